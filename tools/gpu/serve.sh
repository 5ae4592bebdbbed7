#!/usr/bin/env bash
# End to end on one GPU (issue 6, the server): the real `peregrine serve --device cuda` on a
# dummy Llama-3.1-8B (configs/llama-3.1-8b, --load-format dummy) with the llama3 tokenizer and
# chat template, checked by tests/e2e/gpu_serve_check.py (chat / completions, streamed and not,
# seeded sampling, 12 concurrent chats against the answers given alone, an over-long prompt
# answered 400 while serving goes on, /metrics, SIGTERM drain); then the agentic benchmark
# (`peregrine bench agentic`) at small concurrency against a second server of the same model.
# Runs as a queue job (tools/gpu/queue.sh): its run.sh sources tools/gpu/queue_env.sh (which
# unpacks the job's bin/peregrine.xz into $BIN) and runs this; the call carries .gpulib and
# .gpulibx (the full binary's ICU / PCRE2 / prometheus-cpp).
# Here: cmake --build build/cuda -j2 --target peregrine
# Env: OUT (default /tmp/serve), AGENTIC_CONC (default 1,2,4,8), SKIP_AGENTIC=1.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/serve}; mkdir -p "$OUT"
PG=$BIN/peregrine
TOK=/tmp/llama3.tokenizer.json
python3 -c 'import lzma,sys; open(sys.argv[2],"wb").write(lzma.open(sys.argv[1]).read())' \
  tests/data/tokenizer/llama3.tokenizer.json.xz "$TOK"
ARGS=(--device cuda --load-format dummy --tokenizer "$TOK"
      --chat-template tests/data/chat_templates/meta-llama-Llama-3.1-8B-Instruct.jinja --context 16384)
MODEL=configs/llama-3.1-8b/config.json
echo "== serve check ($(date -u +%T))"
SERVE_PID_FILE=$OUT/serve.pid timeout 300 python3 -u tests/e2e/gpu_serve_check.py "$PG" "$MODEL" "${ARGS[@]}" \
  > "$OUT/serve_check.txt" 2>&1
echo "serve check rc=$?"
[[ -f $OUT/serve.pid ]] && kill "$(cat "$OUT/serve.pid")" 2>/dev/null
grep -cE "^PASS" "$OUT/serve_check.txt" | sed 's/^/PASS lines: /'
grep -E "^FAIL|healthy|Traceback|Error" "$OUT/serve_check.txt" | head -20
[[ -n "${SKIP_AGENTIC:-}" ]] && exit 0
echo "== agentic ($(date -u +%T))"
port=18123
"$PG" serve --model "$MODEL" "${ARGS[@]}" --host 127.0.0.1 --port $port > "$OUT/server.txt" 2>&1 &
spid=$!
python3 tools/gpu/wait_health.py "$port"
conc=${AGENTIC_CONC:-1,2,4,8}
timeout 200 "$PG" bench agentic --url "http://127.0.0.1:$port" --first-turn-tokens 3000 --turn-tokens 300 \
  --min-turns 3 --max-turns 3 --max-tokens 64 --concurrency "$conc" --conversations "$conc" \
  --warmup 1 --warmup-turns 1 --no-progress > "$OUT/agentic.txt" 2>&1
echo "agentic rc=$?"
kill -TERM $spid; wait $spid
grep -vE "^\[" "$OUT/agentic.txt" | tail -25
