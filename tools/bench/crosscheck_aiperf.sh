#!/usr/bin/env bash
# Cross-check of `peregrine bench agentic` against aiperf (PyPI) on one server and workload.
# Each client gets a freshly started server (empty prefix cache), the same K conversations at
# concurrency 1, greedy, 64 tokens out with ignore_eos; then tools/bench/aiperf_crosscheck.py
# compares TTFT and TPOT request by request.
#
#   tools/bench/crosscheck_aiperf.sh PEREGRINE_BIN DATASET_JSON OUT_DIR [COUNT] [AIPERF_VENV]
# AIPERF_VENV (default /work/peers/evid/venv) holds `pip install aiperf` (outside the repo).
# TOKENIZER: an HF tokenizer folder for aiperf (token counts come from the server's usage, so it
# is only loaded; aiperf's "builtin" one downloads tiktoken data, which fails offline). Make one
# from the GGUF with tools/bench/gguf_to_hf_tokenizer.py.
# SERVER_CPUS / CLIENT_CPUS (taskset lists, e.g. 0 and 1): pin the server and the clients to
# separate cores, so a client's own CPU use (aiperf's is large) does not slow the server.
# SERVER_NICE / CLIENT_NICE (default 0): scheduling priority of the server and of the clients
# (e.g. -10 and 10: the server runs before the clients' and other processes' background work).
set -euo pipefail
bin=$1; dataset=$2; out=$3; count=${4:-3}; venv=${5:-/work/peers/evid/venv}
model=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
port=${PORT:-8137}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
python3 "$here/aiperf_crosscheck.py" prepare "$dataset" "$out" --first 1 --count "$count"

start_server() {
  nice -n "${SERVER_NICE:-0}" ${SERVER_CPUS:+taskset -c "$SERVER_CPUS"} "$bin" serve --model "$model" --port "$port" -t "${THREADS:-2}" > "$out/server_$1.log" 2>&1 &
  srv=$!
  for _ in $(seq 300); do curl -sf "http://127.0.0.1:$port/health" > /dev/null && return; sleep 0.5; done
  echo "server did not start" >&2; exit 1
}
stop_server() { kill -TERM "$srv"; wait "$srv" || true; srv=; }
srv=
trap '[ -n "$srv" ] && kill "$srv" 2>/dev/null || true' EXIT

echo "ours: $(uptime)" | tee "$out/load.txt"
start_server ours
/usr/bin/time -f "client cpu: %U s user %S s system, %e s wall" -o "$out/cpu_ours.txt" \
nice -n "${CLIENT_NICE:-0}" ${CLIENT_CPUS:+taskset -c "$CLIENT_CPUS"} "$bin" bench agentic --url "http://127.0.0.1:$port" --dataset "$out/dataset.json" \
  --concurrency 1 --conversations "$count" --warmup 0 --max-tokens 64 --no-progress \
  -o "$out/ours.json" | tee "$out/ours.txt"
curl -s "http://127.0.0.1:$port/metrics" > "$out/metrics_ours.txt"
stop_server

echo "aiperf: $(uptime)" | tee -a "$out/load.txt"
start_server aiperf
model_name=$(curl -s "http://127.0.0.1:$port/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
/usr/bin/time -f "client cpu: %U s user %S s system, %e s wall" -o "$out/cpu_aiperf.txt" \
nice -n "${CLIENT_NICE:-0}" ${CLIENT_CPUS:+taskset -c "$CLIENT_CPUS"} "$venv/bin/aiperf" profile --model "$model_name" --tokenizer "${TOKENIZER:-builtin}" --use-server-token-count \
  --url "http://127.0.0.1:$port" --endpoint-type chat --streaming \
  --input-file "$out/aiperf.jsonl" --custom-dataset-type multi_turn --conversation-num "$count" \
  --concurrency 1 --extra-inputs max_tokens:64 --extra-inputs ignore_eos:true \
  --extra-inputs temperature:0 --artifact-dir "$out/aiperf" --ui-type none --workers-max 1 --record-processors 1 \
  2>&1 | tail -40 | tee "$out/aiperf.txt"
curl -s "http://127.0.0.1:$port/metrics" > "$out/metrics_aiperf.txt"
stop_server
cat "$out/cpu_ours.txt" "$out/cpu_aiperf.txt"
echo "end: $(uptime)" | tee -a "$out/load.txt"

python3 "$here/aiperf_crosscheck.py" compare "$out/ours.json" \
  "$(find "$out/aiperf" -name 'profile_export.jsonl' | head -1)" \
  --server-metrics "$out/metrics_ours.txt" "$out/metrics_aiperf.txt" | tee "$out/compare.txt"
