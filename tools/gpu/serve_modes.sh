# Sourced by GPU jobs: serve_modes NAME CONFIG TOKENIZER TEMPLATE PORT starts
# `peregrine serve --device cuda` on dummy weights of CONFIG and runs
# tools/bench/serve_output_modes.py against it (batch 1, 128 tokens, two rounds). The llama3 and
# qwen tokenizers are unpacked to /tmp.
unxz_to() { python3 -c 'import lzma,sys; open(sys.argv[2],"wb").write(lzma.open(sys.argv[1]).read())' "$1" "$2"; }
unxz_to tests/data/tokenizer/llama3.tokenizer.json.xz /tmp/llama3.tokenizer.json
unxz_to tests/data/tokenizer/qwen.tokenizer.json.xz /tmp/qwen.tokenizer.json
serve_modes() {
  local name=$1 cfg=$2 tok=$3 tpl=$4 port=$5
  echo "== $name ($(date -u +%T))"
  "$BIN/peregrine" serve --device cuda --model "$cfg" --load-format dummy --tokenizer "$tok" \
    --chat-template "$tpl" --context 4096 --host 127.0.0.1 --port "$port" > "$OUT/server_$name.txt" 2>&1 &
  local spid=$!
  python3 tools/gpu/wait_health.py "$port" 360 ||
    { echo "$name: no health"; tail -20 "$OUT/server_$name.txt"; kill $spid; return; }
  timeout "${SERVE_MODES_TIMEOUT:-190}" python3 -u tools/bench/serve_output_modes.py --url "http://127.0.0.1:$port" \
    --rounds 2 --max-tokens 128 || echo "$name: modes rc=$?"
  kill -TERM $spid; wait $spid
  grep -E "error|Error" "$OUT/server_$name.txt" | head -5
}
