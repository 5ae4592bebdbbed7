# Queue job (tools/gpu/queue.sh), session 44, on main's binaries (the split ring as the default, no
# branch knobs): s44b ran the branch's kernel with its timing probe, whose two more registers (226,
# allocated as 232) took the step 430-600 µs longer at 4K-12K with either ring, presumably by
# leaving no room for the o projection's ring block beside the attention's. This job: the fused
# attention tests with the new register guard (CudaLoopFormFitsBesideTheORing), then the split
# ring against PG_FUSED_KV_SPLIT=0 on main's kernel (224 registers) at 4K and 8K, two rounds.
#   ninja -C build/cuda fattn_gpu_check moe_gpu_check   (on main)
#   tools/gpu/make_job.sh s44c tools/gpu/jobs/s44c.sh 200 fattn_gpu_check=build/cuda/tests/models/fattn_gpu_check \
#     moe_gpu_check=build/cuda/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
echo "== fused attention tests at the defaults"
ab_fused_tests
ab_ctx_pairs 2 "4096 8192" qwen3-30b-a3b split old PG_FUSED_KV_SPLIT=0
