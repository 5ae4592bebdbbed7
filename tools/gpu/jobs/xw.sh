# Queue job (tools/gpu/queue.sh), written in session 29 (no device that session): the fused decode
# attention's exchange form (decode_xw.cuh, PG_FUSED_XW) — its harness runs and goldens, then
# the batch-1 step rows with it off / on (three forms), interleaved, and block traces of Qwen3. Also
# the MoE GPU tests of 4b5b696 (the o-dots path removed), which post_dots.sh was to run (its GEMV
# tests are in rl2.sh: three binaries a job keep the call's carry under 64 MiB).
# Make it: ninja -C build/cuda fattn_gpu_check moe_gpu_check && ninja -C build/trace moe_gpu_check
#   tools/gpu/make_job.sh xw tools/gpu/jobs/xw.sh 580 fattn_gpu_check=build/cuda/tests/models/fattn_gpu_check \
#     moe_gpu_check=build/cuda/tests/models/moe_gpu_check trace_moe_gpu_check=build/trace/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
echo "== tests (RopeKvWriteAttention runs 8-11: the exchange form)"
ab_tests fattn_gpu_check 'RopeKvWriteAttention.*:GpuModelGolden.Tiny*:GpuRunner.*'
ab_tests fattn_gpu_check 'GpuModelGolden.Tiny*' PG_FUSED_XW=3
ab_tests moe_gpu_check 'MoeRouterOp.*:MoeExpertsOp.*:MatmulFp8BlockOp*:GpuModelGolden.Tiny*'
ab_tests moe_gpu_check 'GpuModelGolden.Tiny*' PG_FUSED_XW=3
echo "== step rows, batch 1 x 1K (PG_FUSED_XW: 0 off, 1 the exchange form, 2 + the push from registers, 3 + asynchronous)"
for r in 1 2 3; do
  for x in 0 1 2 3; do ab_step "xw$x-qwen3" moe_gpu_check qwen3-30b-a3b PG_FUSED_XW=$x; done
  [[ $r == 3 ]] && break
  for x in 0 2 3; do ab_step "xw$x-llama" fattn_gpu_check llama-3.1-8b PG_FUSED_XW=$x; done
done
export AB_TRACE_PHASES=30
for x in 0 2 3; do ab_trace "xw$x" trace_moe_gpu_check qwen3-30b-a3b PG_FUSED_XW=$x; done
