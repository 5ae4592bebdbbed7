# Queue job (tools/gpu/queue.sh): the L2 hint's share after the 32K attention (session 27; the
# attn32k job found 25 % best of 25 / 50 / 100 on Llama and 100 % slower on Qwen3), and whether
# main's Qwen3 1K step is slower than 5e71c10's (o_dots' "off" row, +37 us, against a base with a
# 29 us spread). Binaries: main's fattn (dfc9ed9), o_dots' base (5e71c10) and new moe binaries.
# Make it: mkdir -p .gpuq/l2pct/bin; cp .gpuq/attn32k/bin/new_fattn_gpu_check.xz
#   .gpuq/o_dots/bin/{base,new}_moe_gpu_check.xz .gpuq/l2pct/bin/; cp this .gpuq/l2pct/run.sh;
#   echo 400 > .gpuq/l2pct/timeout; date > .gpuq/l2pct/READY
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
echo "== step rows, batch 1 x 32K (us a step, floor/t)"
for r in 1 2 3; do
  AB_CONTEXT=32768 AB_TIMEOUT=90
  export AB_CONTEXT AB_TIMEOUT
  for p in 0 12 25 37; do
    ab_step "l2-$p-llama-3.1-8b" new_fattn_gpu_check llama-3.1-8b PEREGRINE_ATTN_L2_AFTER_PCT=$p
  done
  for p in 0 12 25; do
    ab_step "l2-$p-qwen3-30b-a3b" new_fattn_gpu_check qwen3-30b-a3b PEREGRINE_ATTN_L2_AFTER_PCT=$p
  done
  export AB_CONTEXT=1024
  for p in 0 25; do
    ab_step "1k-l2-$p-llama-3.1-8b" new_fattn_gpu_check llama-3.1-8b PEREGRINE_ATTN_L2_AFTER_PCT=$p
  done
  # base first in odd rounds, main first in even ones (order effects)
  if (( r % 2 )); then
    ab_step "1k-base-qwen3-30b-a3b" base_moe_gpu_check qwen3-30b-a3b
    ab_step "1k-main-qwen3-30b-a3b" new_moe_gpu_check qwen3-30b-a3b
  else
    ab_step "1k-main-qwen3-30b-a3b" new_moe_gpu_check qwen3-30b-a3b
    ab_step "1k-base-qwen3-30b-a3b" base_moe_gpu_check qwen3-30b-a3b
  fi
done
