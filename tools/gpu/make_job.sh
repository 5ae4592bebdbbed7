#!/usr/bin/env bash
# Packs a queue job for tools/gpu/queue.sh (run from the repo root):
#   tools/gpu/make_job.sh NAME SCRIPT TIMEOUT_S [LABEL=BINARY ...]
# makes .gpuq/NAME/{run.sh (a copy of SCRIPT), timeout, READY, commit (git describe of the tree),
# bin/LABEL.xz (BINARY stripped and xz-compressed)}; run.sh finds each binary as $BIN/LABEL
# (tools/gpu/queue_env.sh) and the commit as $JOB/commit. Prints the
# job's size: the device call carries .gpulib (11 MB) and the jobs beside the tracked tree, 64
# MiB in all, so three or four binaries a call.
set -euo pipefail
cd "$(dirname "$0")/../.."
[[ $# -ge 3 ]] || { sed -n 2,7p "$0"; exit 2; }
name=$1 script=$2 timeout=$3; shift 3
d=.gpuq/$name
rm -rf "$d" && mkdir -p "$d/bin"
cp "$script" "$d/run.sh"
echo "$timeout" > "$d/timeout"
for pair in "$@"; do
  label=${pair%%=*} bin=${pair#*=}
  [[ -x "$bin" ]] || { echo "make_job: $bin is not an executable" >&2; exit 1; }
  strip -o "$d/bin/$label" "$bin"
  xz -9 -T2 "$d/bin/$label"
done
git describe --always --dirty > "$d/commit" 2>/dev/null || true  # the tree the binaries came from
date -u +%FT%TZ > "$d/READY"
du -sh "$d"
