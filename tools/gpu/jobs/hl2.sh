# Queue job (tools/gpu/queue.sh), session 31: Llama-3.1-8B batch-1 step rows with the fused
# attention's exchange form off / on (PG_FUSED_XW 0 / 3, interleaved, 3 rounds; xr.sh measured
# Qwen3 -27 µs with 3), then the headline (tools/gpu/headline.sh, no PyTorch peer) with
# PG_FUSED_XW=3, from the binaries of a49ae96 (xw's fattn / moe, rl2's gemv).
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
echo "binaries of: $(cat "$JOB/commit" 2>/dev/null)"
echo "== step rows, batch 1 x 1K"
for r in 1 2 3; do
  for x in 0 3; do ab_step "xw$x-llama" fattn_gpu_check llama-3.1-8b PG_FUSED_XW=$x; done
done
export PG_FUSED_XW=3
env | grep -E '^(PEREGRINE|PG)_' | sort | sed 's/^/switch: /'
SKIP_TORCH=1 OUT="$OUT/hl" bash tools/gpu/headline.sh
