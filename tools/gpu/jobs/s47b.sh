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
SERVE_MODES_TIMEOUT=150 source tools/gpu/serve_modes.sh  # (the function it defined inline then)
serve_modes llama-3.1-8b configs/llama-3.1-8b/config.json /tmp/llama3.tokenizer.json \
  tests/data/chat_templates/meta-llama-Llama-3.1-8B-Instruct.jinja 18201
serve_modes qwen3-30b-a3b configs/qwen3-30b-a3b/config.json /tmp/qwen.tokenizer.json \
  tests/data/chat_templates/Qwen-Qwen3-0.6B.jinja 18202
