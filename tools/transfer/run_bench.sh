#!/usr/bin/env bash
# Runs every TransferEngine benchmark recorded in docs/PERF.md.
#   tools/transfer/run_bench.sh [BUNDLE_DIR]
# With BUNDLE_DIR (bin/ + lib/ incl. the loader, made by `run_bench.sh --bundle DIR` on the
# build machine), binaries run through the bundled loader, so a machine without libfabric
# packages can run them.
set -euo pipefail
if [[ "${1:-}" == "--bundle" ]]; then
  B="$2"; BENCH="${3:-build/xfer/src/comm/transfer_bench}"
  rm -rf "$B"; mkdir -p "$B/bin" "$B/lib"
  cp "$BENCH" "$(command -v fi_pingpong)" "$(command -v fi_info)" "$B/bin/"
  for f in "$B"/bin/*; do ldd "$f" | awk '{print $3}' | grep '^/' ; done | sort -u | xargs -I{} cp -L {} "$B/lib/"
  cp -L /lib64/ld-linux-x86-64.so.2 "$B/lib/"
  exit 0
fi
RUN=""; BIN=""; FI_BIN=""
if [[ -n "${1:-}" ]]; then
  B="$(cd "$1" && pwd)"; RUN="$B/lib/ld-linux-x86-64.so.2 --library-path $B/lib"
  BIN="$B/bin/"; FI_BIN="$B/bin/"
else
  BIN="${BENCH_DIR:-build/xfer/src/comm}/"  # fi_* tools from PATH (libfabric-bin)
fi
SPIN="${SPIN:-1}"
echo "# $(date -u +%F) $(git rev-parse --short HEAD 2>/dev/null || echo nogit) $(nproc) cores, $(uname -r)"
$RUN ${FI_BIN}fi_info -l 2>/dev/null | grep -E '^(tcp|shm|ofi_rxm|net):' | tr '\n' ' '; echo
for p in "tcp;ofi_rxm" shm; do
  $RUN ${BIN}transfer_bench write --provider="$p" --spin="$SPIN" \
    --fi-pingpong="$RUN ${FI_BIN}fi_pingpong" || echo "write bench on $p failed"
done
for p in "tcp;ofi_rxm" shm; do  # the provider alone: the floor of the engine's write path
  for inj in 1 0; do $RUN ${BIN}transfer_bench raw --provider="$p" --inject=$inj || true; done
  $RUN ${BIN}transfer_bench write --provider="$p" --spin="$SPIN" --low-latency=0 --pingpong=0 ||
    echo "proxy-only write bench on $p failed"
done
$RUN ${BIN}transfer_bench scatter --provider="tcp;ofi_rxm" --spin=0 --peers=8,16,32 || true
$RUN ${BIN}transfer_bench scatter --provider=shm --spin=0 --peers=8,16,32 || true
for p in "tcp;ofi_rxm" shm; do
  $RUN ${BIN}transfer_bench a2a --provider="$p" --spin="$SPIN" --worlds=2,4,8 || true
done
