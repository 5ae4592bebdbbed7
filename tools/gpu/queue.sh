#!/usr/bin/env bash
# One device call runs every queued GPU job (several developers share the 30-minute budget).
#
# A job is a folder .gpuq/<name>/ (git-ignored, carried to the GPU machine) holding
#   run.sh     the job (bash; runs from the repo root with OUT=<its own output folder>),
#   READY      present when the job should run; its text is a request number,
#   timeout    optional: seconds this job may take (default 150),
#   bin/*.gz    optional: stripped binaries, gzip- or xz-compressed (queue_env.sh unpacks them).
# Shared libraries every binary needs travel once in .gpulib (tools/gpu/queue.sh --pack-lib).
# A/B step rows for run.sh: tools/gpu/ab_rows.sh (ab_step / ab_serve).
#
#   here:   tools/gpu/queue.sh --pack-lib           (once per session)
#   device: run(command="tools/gpu/queue.sh", carry=[".gpulib", ".gpuq"])  (+ ".gpulibx" for jobs
#           that run the full peregrine binary)
# Env: JOBS="a b c" picks jobs and their order (default: every READY job, by name);
#      MAXJOB caps each job's seconds; QUEUE_BUDGET (default 560) caps the whole call: a job
#      gets min(its timeout, MAXJOB, what is left).
# Output: $OUT/summary.txt and $OUT/<job>.tgz (its folder, with log.txt), at most 7 jobs a call
# (the device tool returns at most 8 files).
set -uo pipefail
cd "$(dirname "$0")/../.."

if [[ "${1:-}" == "--pack-lib" ]]; then
  set -e
  rm -rf .gpulib && mkdir -p .gpulib
  for l in libfmt.so.9 libspdlog.so.1.10 libgfortran.so.5 libquadmath.so.0 libfabric.so.1; do
    [[ -e /lib/x86_64-linux-gnu/$l ]] && xz -9c /lib/x86_64-linux-gnu/$l > .gpulib/$l.xz
  done
  xz -9c /usr/local/cuda/lib64/libcudart.so.13 > .gpulib/libcudart.so.13.xz
  xz -9c /usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0 > .gpulib/libopenblas.so.0.xz
  # The full `peregrine` binary (server, tokenizers) also needs these (8.4 MB compressed):
  # carried as .gpulibx only in calls whose jobs run it.
  rm -rf .gpulibx && mkdir -p .gpulibx
  for l in libicuuc.so.72 libicudata.so.72 libpcre2-8.so.0 libprometheus-cpp-core.so.1.0; do
    xz -9c /lib/x86_64-linux-gnu/$l > .gpulibx/$l.xz
  done
  for p in /.gpulib/ /.gpulibx/ /.gpuq/; do grep -qx "$p" .git/info/exclude || echo "$p" >> .git/info/exclude; done
  du -sh .gpulib .gpulibx
  exit 0
fi

OUT="${OUT:-/tmp/gpuq_out}"
mkdir -p "$OUT/jobs"
export NCCL_NVLS_ENABLE=0
{
  echo "== environment ($(date -u +%FT%TZ))"
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv
} 2>&1 | tee "$OUT/summary.txt"
t0=$(date +%s)
budget=${QUEUE_BUDGET:-560}
jobs=${JOBS:-$(ls .gpuq 2>/dev/null)}
n=0
for name in $jobs; do
  d=".gpuq/$name"
  [[ -f "$d/READY" && -f "$d/run.sh" ]] || continue
  (( n < 7 )) || { echo "job $name skipped: 7 jobs a call" | tee -a "$OUT/summary.txt"; continue; }
  t=$(cat "$d/timeout" 2>/dev/null || echo 150)
  [[ -n "${MAXJOB:-}" ]] && (( t > MAXJOB )) && t=$MAXJOB
  left=$(( budget - ($(date +%s) - t0) ))
  (( left < 20 )) && { echo "job $name skipped: no time left" | tee -a "$OUT/summary.txt"; continue; }
  (( t > left )) && t=$left
  o="$OUT/jobs/$name"; mkdir -p "$o"
  cp "$d/READY" "$o/request"
  start=$(date +%s)
  ( export OUT="$PWD/$o" JOB="$d"; [[ "$o" = /* ]] && export OUT="$o"; timeout --kill-after=10 "$t" bash "$d/run.sh" ) > "$o/log.txt" 2>&1
  rc=$?
  echo "job $name request $(cat "$d/READY") rc=$rc seconds=$(( $(date +%s) - start )) (limit $t)" | tee -a "$OUT/summary.txt"
  tail -5 "$o/log.txt" | sed 's/^/    /' | tee -a "$OUT/summary.txt"
  tar -C "$OUT/jobs" -czf "$OUT/$name.tgz" "$name" && rm -rf "$o"
  n=$((n + 1))
done
rmdir "$OUT/jobs" 2>/dev/null
