#!/usr/bin/env bash
# Everything the CUDA backend needs from one H200 call (device tool, repo root):
#   1. environment (GPU, driver, libraries)
#   2. the op harness on the GPU (test_ops: every backend incl. cuda against ref/) and the
#      CUDA-only tests (test_ops_cuda: batch plan, split-K decode, graph replay, arena)
#   3. bench_cuda: HBM bandwidth and GEMM rate measured in this run; Llama-3.1-8B GEMV/GEMM
#      shapes at batch 1/8/32/128 and decode attention at 1K/32K vs their floors
# and prints a summary table last. Logs go to $OUT.
#
# Nothing is compiled on the GPU machine: build here, then pack the binaries and the shared
# libraries they need into .gpu/ (git-ignored via .git/info/exclude) and carry it:
#   tools/gpu/cuda_check.sh --pack        (on the build machine, after building build/cuda)
#   run(command="tools/gpu/cuda_check.sh", carry=[".gpu"])
set -uo pipefail
cd "$(dirname "$0")/../.."

if [[ "${1:-}" == "--pack" ]]; then
  set -e
  b=build/cuda/tests/ops
  rm -rf .gpu && mkdir -p .gpu/lib
  cp $b/test_ops $b/test_ops_cuda $b/bench_cuda .gpu/
  for l in libfmt.so.9 libspdlog.so.1.10 libgfortran.so.5 libquadmath.so.0; do
    cp -L /lib/x86_64-linux-gnu/$l .gpu/lib/
  done
  cp -L /usr/local/cuda/lib64/libcudart.so.13 .gpu/lib/
  gzip -9c /usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0 > .gpu/lib/libopenblas.so.0.gz
  grep -qx '/.gpu/' .git/info/exclude || echo '/.gpu/' >> .git/info/exclude
  du -sh .gpu
  exit 0
fi

OUT="${OUT:-/tmp/cuda_check_out}"
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
[[ -d .gpu ]] || { echo "no .gpu/: run tools/gpu/cuda_check.sh --pack here and carry .gpu"; exit 2; }
mkdir -p /tmp/pglib && gunzip -c .gpu/lib/libopenblas.so.0.gz > /tmp/pglib/libopenblas.so.0
# cuBLASLt is too large to carry: use the toolkit's or PyTorch's copy on the GPU machine.
lt=$(ls /usr/local/cuda/lib64/libcublasLt.so.13 /usr/local/cuda/lib/libcublasLt.so.13 2>/dev/null | head -1)
[[ -n "$lt" ]] || lt=$(find / -name 'libcublasLt.so.13' -not -path '*/proc/*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$PWD/.gpu/lib:/tmp/pglib:$(dirname "${lt:-/nonexistent/x}"):${LD_LIBRARY_PATH:-}"
export OPENBLAS_NUM_THREADS=8

{
  echo "== environment"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv
  echo "cublasLt: ${lt:-NOT FOUND}"
  ldd .gpu/test_ops | grep -E "not found" && echo "MISSING LIBRARIES"
} 2>&1 | tee "$OUT/env.log"

status=0
echo "== test_ops (harness, all backends)"
timeout 240 .gpu/test_ops --gtest_brief=1 2>&1 | tee "$OUT/test_ops.log" | tail -40
[[ ${PIPESTATUS[0]} == 0 ]] || status=1
echo "== test_ops_cuda"
timeout 120 .gpu/test_ops_cuda --gtest_brief=1 2>&1 | tee "$OUT/test_ops_cuda.log" | tail -40
[[ ${PIPESTATUS[0]} == 0 ]] || status=1
echo "== bench_cuda"
timeout 240 .gpu/bench_cuda 2>&1 | tee "$OUT/bench_cuda.log"
[[ ${PIPESTATUS[0]} == 0 ]] || status=1

echo
echo "================ summary ================"
grep -hE "^\[  (PASSED|FAILED)|tests? ran" "$OUT"/test_ops*.log
grep -hE "HBM|GEMM 8192" "$OUT/bench_cuda.log"
echo "status: $([[ $status == 0 ]] && echo OK || echo FAILED)"
exit $status
