#!/usr/bin/env bash
# The dense model on the H200, from one device call (repo root):
#   1. test_models_gpu: tiny-llama / tiny-qwen3 (and SmolLM2 when its GGUF is here) on the GPU
#      against HF goldens at bf16 tolerance; runner batching and failure isolation
#   2. peregrine bench gpu-decode: Llama-3.1-8B (and Qwen3-8B) shapes with dummy weights,
#      decode time per step with CUDA graphs vs the HBM floor measured in the same run
# and prints a summary last. Logs go to $OUT.
#
# Nothing is compiled on the GPU machine. On the build machine:
#   tools/gpu/model_check.sh --pack     (after building test_models_gpu peregrine_gpu_bench
#                                        in build/cuda2): binaries -> .gpu2/bin, libs -> .gpu2/lib,
#                                        SmolLM2 GGUF halves -> .xfer/m1, .xfer/m2
# Then (device tool):
#   call 1: run(command="tools/gpu/model_check.sh", carry=[".gpu2", ".xfer/m1"])
#   call 2 (back to back, same warm machine; .gpu2/lib and .xfer/m1 are still there):
#           run(command="SMOL=1 tools/gpu/model_check.sh", carry=[".gpu2/bin", ".xfer/m2"])
# Env: SMOL=1 reassembles the GGUF and runs its test; BENCH=0 skips the benchmarks;
#      MODELS="llama-3.1-8b qwen3-8b" picks the bench configs.
set -uo pipefail
cd "$(dirname "$0")/../.."
GGUF=models/SmolLM2-135M-Instruct.Q4_1.gguf
GGUF_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

if [[ "${1:-}" == "--pack" ]]; then
  set -e
  b=build/cuda2/tests/models
  rm -rf .gpu2 && mkdir -p .gpu2/bin .gpu2/lib
  for t in test_models_gpu:test_models_gpu peregrine_gpu_bench:peregrine; do
    strip -o /tmp/pg_strip_${t#*:} $b/${t%%:*} && gzip -9c /tmp/pg_strip_${t#*:} > .gpu2/bin/${t#*:}.gz
  done
  for l in libfmt.so.9 libspdlog.so.1.10 libgfortran.so.5 libquadmath.so.0; do
    cp -L /lib/x86_64-linux-gnu/$l .gpu2/lib/
  done
  cp -L /usr/local/cuda/lib64/libcudart.so.13 .gpu2/lib/
  gzip -9c /usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0 > .gpu2/lib/libopenblas.so.0.gz
  mkdir -p .xfer/m1 .xfer/m2
  head -c 41943040 $GGUF > .xfer/m1/smol.0
  tail -c +41943041 $GGUF > .xfer/m2/smol.1
  for p in /.gpu2/ /.xfer/; do grep -qx "$p" .git/info/exclude || echo "$p" >> .git/info/exclude; done
  du -sh .gpu2 .gpu2/* .xfer/m1 .xfer/m2
  exit 0
fi

OUT="${OUT:-/tmp/model_check_out}"
mkdir -p "$OUT"
[[ -f .gpu2/bin/test_models_gpu.gz ]] || { echo "no .gpu2/bin: run tools/gpu/model_check.sh --pack here and carry .gpu2"; exit 2; }
mkdir -p /tmp/pglib /tmp/pgbin
for f in .gpu2/bin/*.gz; do gunzip -c "$f" > /tmp/pgbin/$(basename "$f" .gz); chmod +x /tmp/pgbin/$(basename "$f" .gz); done
[[ -f /tmp/pglib/libopenblas.so.0 ]] || gunzip -c .gpu2/lib/libopenblas.so.0.gz > /tmp/pglib/libopenblas.so.0
lt=$(ls /usr/local/cuda/lib64/libcublasLt.so.13 /usr/local/cuda/lib/libcublasLt.so.13 2>/dev/null | head -1)
[[ -n "$lt" ]] || lt=$(find / -name 'libcublasLt.so.13' -not -path '*/proc/*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$PWD/.gpu2/lib:/tmp/pglib:$(dirname "${lt:-/nonexistent/x}"):${LD_LIBRARY_PATH:-}"
export OPENBLAS_NUM_THREADS=8

echo "== environment ($(date -u +%FT%TZ))"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv
ldd /tmp/pgbin/test_models_gpu | grep "not found" && echo "MISSING LIBRARIES"

status=0
filter='GpuModelGolden.Tiny*:GpuRunner.*'
if [[ "${SMOL:-0}" == 1 ]]; then
  mkdir -p models
  cat .xfer/m1/smol.0 .xfer/m2/smol.1 > $GGUF
  echo "$GGUF_SHA  $GGUF" | sha256sum -c - || status=1
  filter='GpuModelGolden.SmolLM2*'
fi
echo "== test_models_gpu ($filter)"
timeout 120 /tmp/pgbin/test_models_gpu --gtest_filter="$filter" 2>&1 | tee "$OUT/test_models_gpu.log" \
  | grep -vE "^\[[0-9:.]+\] \[info\]"
[[ ${PIPESTATUS[0]} == 0 ]] || status=1

if [[ "${BENCH:-1}" == 1 ]]; then
  for m in ${MODELS:-llama-3.1-8b qwen3-8b}; do
    echo "== bench gpu-decode $m"
    timeout 120 /tmp/pgbin/peregrine bench gpu-decode --model configs/$m/config.json \
      --load-format dummy --batch "${BATCH:-1,8,32}" --context "${CONTEXT:-1024,32768}" \
      --json "$OUT/gpu_decode_$m.json" 2>&1 | tee "$OUT/gpu_decode_$m.log"
    [[ ${PIPESTATUS[0]} == 0 ]] || status=1
  done
fi

echo
echo "================ summary ================"
grep -hE "^\[  (PASSED|FAILED)|tests? ran|case [0-9]" "$OUT"/test_models_gpu.log
for f in "$OUT"/gpu_decode_*.log; do
  [[ -f $f ]] || continue
  echo "-- $(basename "$f" .log)"
  awk '/^model:/{p=1} p' "$f"
done
echo "status: $([[ $status == 0 ]] && echo OK || echo FAILED)"
exit $status
