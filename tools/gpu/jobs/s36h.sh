# (Ran the router fold branch's binary, s36/router-fold 'late trigger' commit; docs/PERF.md "Session 36".)
# Queue job (tools/gpu/queue.sh), session 36: the folded router with the side o kernel's PDL
# trigger after its wait (PEREGRINE_SIDE_LATE_TRIGGER=1): s36g's traces put the router's one
# block on an SM from the o kernel's start (the o kernel triggers at once), through the
# attention; the qkv, attention and o ran 1.3-1.9 us slower a layer, the gate/up blocks on the
# router's SM 6 us. Rows: base, fold, fold + late trigger, interleaved.
# Make it (branch s36/router-fold): ninja -C build/cuda moe_gpu_check; cp build/cuda/tests/models/moe_gpu_check /tmp/moe_fold_late
#   tools/gpu/make_job.sh s36h tools/gpu/jobs/s36h.sh 300 moe_fold=/tmp/moe_fold_late
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
for r in 1 2; do
  ab_step base-qwen3-30b-a3b moe_fold qwen3-30b-a3b
  ab_step fold-qwen3-30b-a3b moe_fold qwen3-30b-a3b PEREGRINE_MOE_ROUTER_FOLD=1
  ab_step late-qwen3-30b-a3b moe_fold qwen3-30b-a3b PEREGRINE_MOE_ROUTER_FOLD=1 PEREGRINE_SIDE_LATE_TRIGGER=1
done
