# Queue job (tools/gpu/queue.sh), session 47: what a constrained or sampled row costs in GPU
# serving. `peregrine serve --device cuda` on dummy weights of Llama-3.1-8B (llama3 tokenizer,
# 128,256 ids) and Qwen3-30B-A3B (qwen tokenizer, 151,936-id head), each driven by
# tools/bench/serve_output_modes.py (greedy, streamed, T=0.7 top_p=0.9 / T=1 top_p=0.95,
# penalties, logprobs, JSON mode, a JSON schema; batch 1, 128 tokens, two rounds). Rows with
# JSON mode / a schema / top logprobs are sampled on the host (one logits row copied back a
# step); the others on the device. The call carries .gpulib and .gpulibx (the full binary):
#   ninja -C build/cuda peregrine
#   tools/gpu/make_job.sh s47b tools/gpu/jobs/s47b.sh 420 peregrine=build/cuda/src/cli/peregrine
#   run(command="QUEUE_BUDGET=430 JOBS='s47b' tools/gpu/queue.sh >/dev/null 2>&1; tar -xzf $OUT/s47b.tgz
#       -C $OUT; cat $OUT/s47b/log.txt", carry=[".gpulib", ".gpulibx", ".gpuq/s47b"])
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
unxz_to() { python3 -c 'import lzma,sys; open(sys.argv[2],"wb").write(lzma.open(sys.argv[1]).read())' "$1" "$2"; }
unxz_to tests/data/tokenizer/llama3.tokenizer.json.xz /tmp/llama3.tokenizer.json
unxz_to tests/data/tokenizer/qwen.tokenizer.json.xz /tmp/qwen.tokenizer.json
serve_modes() {  # NAME CONFIG TOKENIZER TEMPLATE PORT
  local name=$1 cfg=$2 tok=$3 tpl=$4 port=$5
  echo "== $name ($(date -u +%T))"
  "$BIN/peregrine" serve --device cuda --model "$cfg" --load-format dummy --tokenizer "$tok" \
    --chat-template "$tpl" --context 4096 --host 127.0.0.1 --port "$port" > "$OUT/server_$name.txt" 2>&1 &
  local spid=$!
  python3 tools/gpu/wait_health.py "$port" 360 ||
    { echo "$name: no health"; tail -20 "$OUT/server_$name.txt"; kill $spid; return; }
  timeout 150 python3 -u tools/bench/serve_output_modes.py --url "http://127.0.0.1:$port" --rounds 2 --max-tokens 128 \
    || echo "$name: modes rc=$?"
  kill -TERM $spid; wait $spid
  grep -E "error|Error" "$OUT/server_$name.txt" | head -5
}
serve_modes llama-3.1-8b configs/llama-3.1-8b/config.json /tmp/llama3.tokenizer.json \
  tests/data/chat_templates/meta-llama-Llama-3.1-8B-Instruct.jinja 18201
serve_modes qwen3-30b-a3b configs/qwen3-30b-a3b/config.json /tmp/qwen.tokenizer.json \
  tests/data/chat_templates/Qwen-Qwen3-0.6B.jinja 18202
