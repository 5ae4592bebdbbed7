# Queue job (tools/gpu/queue.sh), session 38: the gate/up kernels' weight loads not allocated in
# L1 (branch s38/gu-noalloc: ld.global.nc.L1::no_allocate in place of __ldcs), so the x row the
# warps re-read stays in L1 whatever the SM's split (s38k-s38m: the split matters, -19 to -24 us a
# step on Qwen3-30B-A3B at the largest L1). moe_main = main's binary (049e29b), moe_noalloc the
# branch's. Three rounds after a warm-up, then the MoE tests on the branch's binary.
# Make it (both binaries copied aside, see the session's commands):
#   tools/gpu/make_job.sh s38n tools/gpu/jobs/s38n.sh 300 moe_main=/tmp/nb/moe_main moe_noalloc=/tmp/nb/moe_noalloc
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
ab_step warmup moe_main qwen3-30b-a3b
for r in 1 2 3; do
  for m in qwen3-30b-a3b deepseek-v2-lite; do
    ab_step "main-$m" moe_main "$m"
    ab_step "noalloc-$m" moe_noalloc "$m"
  done
done
echo "== tests"
AB_TEST_TIMEOUT=200 ab_tests moe_noalloc 'MoeExpertsOp.*:GpuModelGolden.Tiny*' | tail -3
