# Queue job (tools/gpu/queue.sh), written in session 31 when device starts kept failing: the
# essentials of xw.sh and rl2.sh in one call (the binaries of xw: fattn_gpu_check and
# moe_gpu_check of a49ae96; no trace binary). Goldens and harness runs with the exchange form
# (PG_FUSED_XW) and the router's L2 hint (PEREGRINE_MOE_ROUTER_L2_PCT), then batch-1 x 1K step
# rows of Qwen3-30B-A3B (xw 0 / 2 / 3, router hint 50 with and without xw 3) and
# DeepSeek-V2-Lite (no hint / router hint 25), three interleaved rounds.
# Make it: mkdir -p .gpuq/xr/bin && cp .gpuq/xw/bin/{fattn,moe}_gpu_check.xz .gpuq/xw/commit .gpuq/xr/ ...
#   (or tools/gpu/make_job.sh xr tools/gpu/jobs/xr.sh 500 fattn_gpu_check=... moe_gpu_check=...)
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
echo "binaries of: $(cat "$JOB/commit" 2>/dev/null)"
echo "== tests"
ab_tests fattn_gpu_check 'RopeKvWriteAttention.*:GpuModelGolden.Tiny*'
ab_tests moe_gpu_check 'GpuModelGolden.Tiny*' PG_FUSED_XW=3 PEREGRINE_MOE_ROUTER_L2_PCT=50
ab_tests moe_gpu_check 'MoeExpertsOp.*L2*:MoeExpertsOp.RouteInside*:MoeRouterOp.*'
ab_tests moe_gpu_check 'GpuModelGolden.TinyDeepseek*' PEREGRINE_DSV3_MOE_HINT=1 PEREGRINE_MOE_ROUTER_L2_PCT=100
echo "== step rows, batch 1 x 1K"
for r in 1 2 3; do
  for x in 0 2 3; do ab_step "xw$x-qwen3" moe_gpu_check qwen3-30b-a3b PG_FUSED_XW=$x; done
  ab_step "rl2-50-qwen3" moe_gpu_check qwen3-30b-a3b PEREGRINE_MOE_ROUTER_L2_PCT=50
  ab_step "xw3-rl2-50-qwen3" moe_gpu_check qwen3-30b-a3b PG_FUSED_XW=3 PEREGRINE_MOE_ROUTER_L2_PCT=50
  ab_step "v2-nohint" moe_gpu_check deepseek-v2-lite
  ab_step "v2-rl2-25" moe_gpu_check deepseek-v2-lite PEREGRINE_DSV3_MOE_HINT=1 PEREGRINE_MOE_L2_AFTER_PCT=0 PEREGRINE_MOE_ROUTER_L2_PCT=25
done
