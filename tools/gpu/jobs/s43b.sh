# Queue job (tools/gpu/queue.sh), written in session 42; session 43 ran its 8K rows at 8 and 32
# loads inside s43e (branch s43/ring3; docs/PERF.md "Session 43"), not the --warm rows: the KV layout probe's
# follow-up. s43a (run in session 42) found the probe's per-kv-head blocks reading at ~5.7 GB/s
# a block with 8 16-byte loads a thread in flight (16 KB a block: ~2.8 µs a round trip),
# whichever the page layout (token- or head-major, in order or shuffled); the fused kernel's loop
# form gets ~23 GB/s a block with 32-64 KB in flight. Is a block's rate set by its bytes in
# flight over a ~2.8 µs round trip (then 32 loads a thread read ~4x faster, and deeper rings are
# the lever), and is that round trip the HBM's (then --warm, the same bytes from L2 every call,
# reads much faster)? --chase (first row) adds one thread's dependent-load round trip over 4 MB
# (L2) to 1 GiB (HBM), the latency with no other traffic.
# Make it at HEAD:
# (moe_gpu_check rides along for tools/gpu/if_h200_headline.sh's rows should an H200 come.)
#   ninja -C build/cuda fattn_gpu_check moe_gpu_check
#   tools/gpu/make_job.sh s43b tools/gpu/jobs/s43b.sh 200 fattn_gpu_check=build/cuda/tests/models/fattn_gpu_check \
#     moe_gpu_check=build/cuda/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
p=(--bench --kv-layout-probe --contexts=4096,8192,16384 --kv-heads=4)
timeout 100 "$BIN/fattn_gpu_check" "${p[@]}" --chase
timeout 100 "$BIN/fattn_gpu_check" "${p[@]}" --loads=32
timeout 100 "$BIN/fattn_gpu_check" "${p[@]}" --warm
timeout 100 "$BIN/fattn_gpu_check" "${p[@]}" --loads=32 --warm
