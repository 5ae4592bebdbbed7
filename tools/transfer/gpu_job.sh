#!/usr/bin/env bash
# TransferEngine evidence on the GPU host (16 cores, a quiet machine) through the shared GPU
# job queue (tools/gpu/queue.sh): unit tests, write latency against fi_pingpong on shm and
# tcp;ofi_rxm (low-latency path and proxy-only path in the same run), the multi-process
# loopback suite, then the all-to-all benchmark if time is left.
#
#   here:    tools/transfer/gpu_job.sh --pack BUILD_DIR JOB_DIR   (binaries + libfabric's deps)
#   device:  JOB_DIR/run.sh runs `bash tools/transfer/gpu_job.sh` (OUT, JOB set by the queue)
set -uo pipefail
if [[ "${1:-}" == "--pack" ]]; then
  set -e
  B="$2"; J="$3"
  rm -rf "$J/bin"; mkdir -p "$J/bin"
  bins=("$B/src/comm/transfer_bench" "$B/tests/unit/transfer/test_transfer"
        "$B/tests/unit/transfer/test_transfer_multiproc" "$B/tests/unit/transfer/transfer_rank"
        "$(command -v fi_pingpong)" "$(command -v fi_info)")
  for f in "${bins[@]}"; do strip -o /tmp/xfer_strip "$f"; gzip -9c /tmp/xfer_strip > "$J/bin/$(basename "$f").gz"; done
  # Shared libraries the binaries need that .gpulib does not carry (libfabric's own deps, and
  # the C++ runtime they were built against); glibc itself comes from the device.
  for f in "${bins[@]}" /usr/lib/x86_64-linux-gnu/libfabric.so.1; do ldd "$f"; done | awk '$3 ~ /^\// {print $3}' | sort -u |
    while read -r l; do
      n=$(basename "$l")
      case "$n" in libc.so*|libm.so*|ld-linux*|libpthread*|libdl.so*|librt.so*) continue ;; esac
      [[ -e ".gpulib/$n" ]] && continue
      gzip -9c "$l" > "$J/bin/$n.gz"
    done
  printf '#!/usr/bin/env bash\nexec bash tools/transfer/gpu_job.sh\n' > "$J/run.sh"
  du -sh "$J"
  exit 0
fi

source tools/gpu/queue_env.sh
export LD_LIBRARY_PATH="$BIN:$LD_LIBRARY_PATH" PEREGRINE_LOG_LEVEL=warn
export PEREGRINE_TRANSFER_RANK_BIN="$BIN/transfer_rank"
T0=$(date +%s)
left() { echo $(( ${1} - ($(date +%s) - T0) )); }
echo "== $(date -u +%FT%TZ) $(nproc) cores, kernel $(uname -r), commit $(git rev-parse --short HEAD 2>/dev/null)"
"$BIN/fi_info" -l 2>/dev/null | grep -E '^(tcp|shm|ofi_rxm|net):' | tr '\n' ' '; echo
if [[ "${1:-}" == "--part2" ]]; then
  # The rest when a window is short: multi-process suite, all-to-all, one more latency pass.
  echo "== test_transfer_multiproc (loopback: 2/4/8 processes, kill a peer)"
  timeout 25 "$BIN/test_transfer_multiproc" --gtest_filter='Loopback*' > "$OUT/multiproc.log" 2>&1
  echo "rc=$?"; grep -E '^\[ *(OK|PASSED|FAILED) ' "$OUT/multiproc.log"
  for p in shm "tcp;ofi_rxm"; do
    echo "== a2a $p"
    timeout 12 "$BIN/transfer_bench" a2a --provider="$p" --spin=1 --worlds=2,4,8 --iters=20 \
      2>&1 | grep -E 'rank=0|provider' | tee -a "$OUT/a2a.log"
  done
  for p in shm "tcp;ofi_rxm"; do
    echo "== repeat: small sizes, low-latency path and fi_pingpong, $p"
    timeout 10 "$BIN/transfer_bench" write --provider="$p" --spin=1 --max-bytes=8192 \
      --fi-pingpong="$BIN/fi_pingpong" 2>&1 | grep -v '\[info\]' | tee -a "$OUT/write.log"
  done
  echo "== done after $(( $(date +%s) - T0 )) s"
  exit 0
fi
echo "== test_transfer"
timeout 40 "$BIN/test_transfer" > "$OUT/test_transfer.log" 2>&1; echo "rc=$?"
grep -E '^\[ *(PASSED|FAILED) ' "$OUT/test_transfer.log"
for p in shm "tcp;ofi_rxm"; do
  echo "== write, low-latency path, $p (vs fi_pingpong)"
  timeout 30 "$BIN/transfer_bench" write --provider="$p" --spin=1 \
    --fi-pingpong="$BIN/fi_pingpong" 2>&1 | grep -v '\[info\]' | tee -a "$OUT/write.log"
done
for p in shm "tcp;ofi_rxm"; do
  for inj in 1 0; do
    echo "== raw provider write+imm ping-pong (one thread per process, no engine), $p, inject=$inj"
    timeout 15 "$BIN/transfer_bench" raw --provider="$p" --inject=$inj 2>&1 | grep -v '\[info\]' |
      tee -a "$OUT/write.log"
  done
done
for rep in 2 3; do
  echo "== repeat $rep: small sizes, low-latency path and fi_pingpong, shm"
  timeout 15 "$BIN/transfer_bench" write --provider=shm --spin=1 --max-bytes=8192 \
    --fi-pingpong="$BIN/fi_pingpong" 2>&1 | grep -v '\[info\]' | tee -a "$OUT/write.log"
done
for p in shm "tcp;ofi_rxm"; do
  echo "== write, proxy-only path, $p"
  timeout 10 "$BIN/transfer_bench" write --provider="$p" --spin=1 --low-latency=0 \
    --pingpong=0 --max-bytes=2097152 2>&1 | grep -v '\[info\]' | tee -a "$OUT/write.log"
done
echo "== test_transfer_multiproc (loopback: 2/4/8 processes, kill a peer)"
t=$(left 95); (( t > 5 )) || t=5
timeout "$t" "$BIN/test_transfer_multiproc" --gtest_filter='Loopback*' \
  > "$OUT/multiproc.log" 2>&1; echo "rc=$?"
grep -E '^\[ *(OK|PASSED|FAILED) ' "$OUT/multiproc.log"
for p in shm "tcp;ofi_rxm"; do
  t=$(left 115); (( t > 5 )) || break
  echo "== a2a $p"
  timeout "$t" "$BIN/transfer_bench" a2a --provider="$p" --spin=1 --worlds=2,4,8 --iters=20 \
    2>&1 | grep -E 'rank=0|provider' | tee -a "$OUT/a2a.log"
done
echo "== done after $(( $(date +%s) - T0 )) s"
