# Queue job (tools/gpu/queue.sh), session 46: main's binaries (code of eac4a88) for issue 7's
# H200 headline. The call runs tools/gpu/if_h200_headline.sh on this job's directory first, which
# prints the headline rows only on an H200; on any other card this job prints the card and the
# H100's batch-1 rows (three rounds), the day's check of main.
#   ninja -C build/cuda moe_gpu_check
#   tools/gpu/make_job.sh s46a tools/gpu/jobs/s46a.sh 120 moe_gpu_check=build/cuda/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
ab_hbm
ab_headline_b1
