#!/usr/bin/env bash
# Usage (on the GPU machine, repository root): tools/gpu/if_h200_headline.sh JOBDIR
# If the card is an H200 (issue 7's goal is stated for one H200), prints issue 7's headline rows
# with JOBDIR's moe_gpu_check before anything else of the call: the bench's D2D line (the
# floor's rate), Qwen3-30B-A3B and DeepSeek-V2-Lite at batch 1 x 1K (three rounds), batches 8 /
# 32, Moonlight at 1. On any other card it prints the card's name and does nothing else; a job
# without moe_gpu_check gets a line saying so (pack one beside the job's own binaries).
set -u
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "card: $name"
[[ "$name" == *H200* ]] || exit 0
JOB=$1
if ! compgen -G "$JOB/bin/moe_gpu_check.*" > /dev/null; then
  echo "== issue 7 headline: $JOB carries no moe_gpu_check, no rows"
  exit 0
fi
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
echo "== issue 7 headline on the H200 (binaries of $(cat "$JOB/commit" 2>/dev/null))"
ab_hbm
ab_headline_b1
ab_headline_moe
