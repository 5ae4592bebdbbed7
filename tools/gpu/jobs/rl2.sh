# Queue job (tools/gpu/queue.sh), written in session 29 (no device that session): the MoE router's
# L2 hint (MoeRouterArgs::l2_after, PEREGRINE_MOE_ROUTER_L2_PCT): Qwen3-30B-A3B's NormLogits
# kernel asks the L2 for a share of the next layer's qkv right after its PDL wait, while the
# HBM idles through the routing (~7 µs a layer). Its GPU test, then batch-1 step rows at shares
# 0 / 25 / 50 / 100 (the down kernel's 25 % hint on, as by default) and 50 with the down's off;
# DeepSeek-V2-Lite (which passes no hint by default: PEREGRINE_DSV3_MOE_HINT=1 passes its next
# q + kv_a) at router shares 25 / 50 with the down kernel's share 0, against no hint.
# Also the GEMV GPU tests (the rest of post_dots.sh, see xw.sh).
# Make it: ninja -C build/cuda moe_gpu_check gemv_gpu_check
#   tools/gpu/make_job.sh rl2 tools/gpu/jobs/rl2.sh 560 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     gemv_gpu_check=build/cuda/tests/models/gemv_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
echo "== tests"
ab_tests moe_gpu_check 'MoeExpertsOp.*L2*:MoeExpertsOp.RouteInside*'
ab_tests moe_gpu_check 'GpuModelGolden.TinyQwen3Moe*' PEREGRINE_MOE_ROUTER_L2_PCT=100
ab_tests moe_gpu_check 'GpuModelGolden.TinyDeepseek*' PEREGRINE_DSV3_MOE_HINT=1 PEREGRINE_MOE_ROUTER_L2_PCT=100
ab_tests gemv_gpu_check '-GpuModelGolden.SmolLM2Gguf'
echo "== step rows, batch 1 x 1K"
for r in 1 2 3; do
  for p in 0 25 50 100; do ab_step "rl2-$p" moe_gpu_check qwen3-30b-a3b PEREGRINE_MOE_ROUTER_L2_PCT=$p; done
  ab_step "rl2-50-down0" moe_gpu_check qwen3-30b-a3b PEREGRINE_MOE_ROUTER_L2_PCT=50 PEREGRINE_MOE_L2_AFTER_PCT=0
  ab_step "v2-nohint" moe_gpu_check deepseek-v2-lite
  for p in 25 50; do
    ab_step "v2-rl2-$p" moe_gpu_check deepseek-v2-lite PEREGRINE_DSV3_MOE_HINT=1 PEREGRINE_MOE_L2_AFTER_PCT=0 PEREGRINE_MOE_ROUTER_L2_PCT=$p
  done
done
