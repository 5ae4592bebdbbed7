# Queue job (tools/gpu/queue.sh), session 48: guided regexes, schema patterns and n > 1 served
# on the GPU (s48b tests them in the engine): `peregrine serve --device cuda` on dummy weights
# of Llama-3.1-8B (128,256 ids) and Qwen3-30B-A3B (151,936-id head) under
# tools/bench/serve_output_modes.py (the session-47 modes plus a schema with patterns, two
# guided regexes and n=4; batch 1, 128 tokens, two rounds). Carries .gpulib and .gpulibx:
#   ninja -C build/cuda peregrine
#   tools/gpu/make_job.sh s48a tools/gpu/jobs/s48a.sh 480 peregrine=build/cuda/src/cli/peregrine
#   run(command="QUEUE_BUDGET=500 JOBS='s48a' tools/gpu/queue.sh >/dev/null 2>&1; tar -xzf $OUT/s48a.tgz
#       -C $OUT; cat $OUT/s48a/log.txt", carry=[".gpulib", ".gpulibx", ".gpuq/s48a"])
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
source tools/gpu/serve_modes.sh
serve_modes llama-3.1-8b configs/llama-3.1-8b/config.json /tmp/llama3.tokenizer.json \
  tests/data/chat_templates/meta-llama-Llama-3.1-8B-Instruct.jinja 18201
serve_modes qwen3-30b-a3b configs/qwen3-30b-a3b/config.json /tmp/qwen.tokenizer.json \
  tests/data/chat_templates/Qwen-Qwen3-0.6B.jinja 18202
