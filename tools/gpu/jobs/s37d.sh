# Queue job (tools/gpu/queue.sh), session 37: the gate/up kernel's auto unroll (4 loads in flight
# where bf16's one-token grid goes flat, moe_walk.cu GateUpUnroll) against the old default
# (PEREGRINE_MOE_GU_UNROLL=2) in interleaved rounds after a warm-up, with two neighbours of the
# new form (the flat grid at one block an SM, and at 4 warps a block); Qwen3-30B-A3B (per-slot
# grid: no change expected) as the control; then the MoE op tests and the tiny models' goldens.
# Make it at HEAD:
#   ninja -C build/cuda moe_gpu_check
#   tools/gpu/make_job.sh s37d tools/gpu/jobs/s37d.sh 300 moe_gpu_check=build/cuda/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
ab_step warmup moe_gpu_check deepseek-v2-lite
for r in 1 2 3; do
  for m in deepseek-v2-lite moonlight-16b-a3b; do
    ab_step "new-$m" moe_gpu_check "$m"
    ab_step "old-$m" moe_gpu_check "$m" PEREGRINE_MOE_GU_UNROLL=2
    ab_step "sm1-$m" moe_gpu_check "$m" PEREGRINE_MOE_GU_FLAT_SM=1
    ab_step "w4-$m" moe_gpu_check "$m" PEREGRINE_MOE_WALK_WARPS=4
  done
  ab_step new-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b
  ab_step old-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b PEREGRINE_MOE_GU_UNROLL=2
done
echo "== tests"
ab_tests moe_gpu_check 'MoeExpertsOp.*:MoeRouterOp.*' | tail -3
ab_tests moe_gpu_check 'GpuModelGolden.Tiny*' | tail -3
