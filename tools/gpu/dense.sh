#!/usr/bin/env bash
# Issue 6 (dense models on one H200) in one GPU call, from prebuilt binaries (nothing compiles
# on the GPU machine). Sections (SECTIONS=comma list, default all):
#   ops      test_ops (op harness: every backend incl. cuda against ref/), test_ops_cuda,
#            bench_cuda (per-op table vs HBM / GEMM floors)
#   golden   test_models_gpu: tiny-llama / tiny-qwen3 vs HF goldens, runner batching,
#            device sampling, fp8 weights, failure isolation; SmolLM2 (GGUF) once all its
#            pieces have arrived (see below)
#   decode   peregrine bench gpu-decode, Llama-3.1-8B shape, bf16 (and fp8 KV / fp8 weights
#            when the binary has those flags), batch 1,8,32,128 x context 1K,32K
#   prefill  peregrine bench gpu-prefill: 8K / 32K prompts, TTFT 800 new on a 50K prefix
#   torch    bench/torch_llama.py: the PyTorch peer on the same shapes
# and prints ONE summary table last (tools/gpu/dense_summary.py): each figure with its floor
# and ratio, and the PyTorch peer's ratio. Logs and JSON go to $OUT.
#
# Here (build machine):
#   cmake --build build/h-peer --target test_ops test_ops_cuda bench_cuda test_models_gpu \
#       peregrine_gpu_bench -j2
#   tools/gpu/dense.sh --pack [build-dir] [job-dir]    (default build/h-peer, .gpuq/peer):
#       stripped xz binaries -> <job-dir>/bin (PACK="peregrine ..." picks them); with SMOL_PARTS=n
#       also the SmolLM2 GGUF in n pieces -> .xfer/m1/smol.0, .xfer/m2/smol.1, ... (n = 4 at a
#       ~28 MB tree: each piece plus the tree must fit one call's 64 MiB)
# GPU machine: a queue job (tools/gpu/queue.sh) whose run.sh sources tools/gpu/queue_env.sh
# (sets $BIN) and runs this script. Env: SECTIONS, CHUNKS (prefill chunk sizes, default 8192),
# DECODE_BATCH, DECODE_CONTEXT, DECODE_FP8=0, PROMPTS, TTFT_REAL=0, TORCH_BUDGET (s, default
# 240), TORCH_COMPILE=1 (per point: torch.compile of one layer, the step under one CUDA
# graph), TORCH_ARGS, T_* timeouts, DENSE_BUDGET (s for the whole script).
set -uo pipefail
cd "$(dirname "$0")/../.."
GGUF=models/SmolLM2-135M-Instruct.Q4_1.gguf
GGUF_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

if [[ "${1:-}" == "--pack" ]]; then
  set -e
  b="${2:-build/h-peer}" job="${3:-.gpuq/peer}"
  mkdir -p "$job/bin"
  rm -f "$job"/bin/*.gz "$job"/bin/*.xz
  # xz -9: a third smaller than gzip on these binaries (most of each is the kernels' fatbin);
  # a job folder should stay under 6 MB, so PACK picks the binaries of this request.
  for name in ${PACK:-peregrine test_models_gpu test_ops test_ops_cuda bench_cuda}; do
    case $name in
      peregrine) src=tests/models/peregrine_gpu_bench ;;
      test_models_gpu) src=tests/models/test_models_gpu ;;
      *) src=tests/ops/$name ;;
    esac
    strip -o /tmp/pg_dense_strip "$b/$src"
    xz -9 -T1 -c /tmp/pg_dense_strip > "$job/bin/$name.xz"
  done
  rm -f /tmp/pg_dense_strip
  if [[ -n ${SMOL_PARTS:-} && -f $GGUF ]]; then
    # SMOL_PARTS pieces of the GGUF, piece i in .xfer/m<i+1>/smol.<i> (one per device call).
    n=$SMOL_PARTS size=$(stat -c %s $GGUF)
    part=$(( (size + n - 1) / n ))
    rm -rf .xfer/m[0-9]*
    for ((i = 0; i < n; i++)); do
      mkdir -p .xfer/m$((i + 1))
      dd if=$GGUF of=.xfer/m$((i + 1))/smol.$i bs=1M iflag=skip_bytes,count_bytes \
        skip=$((i * part)) count=$part status=none
    done
  fi
  grep -qx '/.xfer/' .git/info/exclude || echo '/.xfer/' >> .git/info/exclude
  du -sh "$job" "$job"/bin/* .xfer/m1 .xfer/m2 2>/dev/null
  exit 0
fi

OUT="${OUT:-/tmp/dense_out}"
mkdir -p "$OUT"
# From a queue job, tools/gpu/queue_env.sh has unpacked bin/*.gz|xz into $BIN; run alone, the
# job folder's bin/*.xz are unpacked here.
if [[ -z "${BIN:-}" ]]; then
  BIN=/tmp/pgbin/peer
  mkdir -p "$BIN"
  for f in "${JOB:-.gpuq/peer}"/bin/*.xz; do
    [[ -e $f ]] || continue
    dst="$BIN/$(basename "$f" .xz)"
    { command -v xz >/dev/null && xz -dc "$f" > "$dst"; } || python3 -c \
      'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$f" "$dst"
    chmod +x "$dst"
  done
fi
have() { [[ -x $BIN/$1 ]] || { echo "$2: skipped (no $1 binary in this job; PACK=... tools/gpu/dense.sh --pack)"; return 1; }; }
export NCCL_NVLS_ENABLE=0
SECTIONS=",${SECTIONS:-ops,golden,decode,prefill,torch},"
want() { [[ $SECTIONS == *",$1,"* ]]; }
status=0
fail() { echo "FAILED: $1" | tee -a "$OUT/failures.txt"; status=1; }
# DENSE_BUDGET (s): the whole script's time; each step's timeout is cut to what is left (less
# 8 s for the summary) and a step with < 10 s left is skipped, so the summary always prints.
left() { echo $(( ${DENSE_BUDGET:-100000} - 8 - SECONDS )); }
# Runs "$@" under a timeout with its output in $OUT/<log>.log (filtered info lines on screen).
run_logged() {
  local log=$1 t=$2; shift 2
  (( t > $(left) )) && t=$(left)
  if (( t < 10 )); then
    echo "== $log: skipped (DENSE_BUDGET: $(left) s left)"; echo "$log budget" >> "$OUT/rc.txt"
    return 0
  fi
  echo "== $log (timeout ${t} s): $*"
  local t0=$SECONDS
  timeout --kill-after=5 "$t" "$@" > "$OUT/$log.log" 2>&1
  local rc=$?
  grep -vE "^\[[0-9:. -]+\] \[info\]" "$OUT/$log.log" | tail -${TAIL:-40}
  echo "-- $log rc=$rc ($((SECONDS - t0)) s)"
  echo "$log $rc" >> "$OUT/rc.txt"
  return $rc
}

echo "== environment ($(date -u +%FT%TZ))"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv \
  | tee "$OUT/env.log"
ldd "$BIN/peregrine" 2>/dev/null | grep "not found" && echo "MISSING LIBRARIES"

if want ops && have test_ops ops; then
  run_logged test_ops "${T_OPS:-150}" "$BIN/test_ops" --gtest_brief=1 || fail test_ops
  have test_ops_cuda ops && { run_logged test_ops_cuda "${T_OPS_CUDA:-90}" "$BIN/test_ops_cuda" \
    --gtest_brief=1 || fail test_ops_cuda; }
  have bench_cuda ops && { TAIL=60 run_logged bench_cuda "${T_BENCH_CUDA:-120}" "$BIN/bench_cuda" \
    || fail bench_cuda; }
fi

# The SmolLM2 GGUF travels in pieces, possibly one per back-to-back call: .xfer/<dir>/smol.<i>
# (--pack with SMOL_PARTS) or .xfer/<dir>/smolpart.<i>. The repo folder is laid anew per call,
# so each piece is kept in /tmp (same warm machine) until a set's concatenation, in piece
# order, has the GGUF's sha256.
SMOL_TMP=/tmp/pg_dense_smol
mkdir -p $SMOL_TMP
for f in .xfer/*/smol.* .xfer/*/smolpart.*; do [[ -f $f ]] && cp "$f" $SMOL_TMP/; done
smol_ready() {
  local set parts
  mkdir -p models
  for set in smol smolpart; do
    parts=$(ls $SMOL_TMP/$set.* 2>/dev/null | sort -t. -k2 -n)
    [[ -n $parts ]] || continue
    cat $parts > $GGUF.part
    if echo "$GGUF_SHA  $GGUF.part" | sha256sum -c --status -; then
      mv $GGUF.part $GGUF
      echo "SmolLM2 GGUF reassembled from $(wc -w <<< "$parts") pieces $set.* (sha256 ok)"
      return 0
    fi
  done
  rm -f $GGUF.part
  return 1
}

if want golden && have test_models_gpu golden; then
  filter='GpuModelGolden.TinyLlama:GpuModelGolden.TinyQwen3:GpuRunner.*:GpuSampling.*:GpuFp8Weights.*:GpuPrefillBench.*'
  if [[ -f $GGUF ]] && echo "$GGUF_SHA  $GGUF" | sha256sum -c --status -; then
    filter="$filter:GpuModelGolden.SmolLM2*"
  elif smol_ready; then
    filter="$filter:GpuModelGolden.SmolLM2*"
  else
    echo "SmolLM2 golden: skipped (pieces here: $(ls $SMOL_TMP 2>/dev/null | tr '\n' ' ')— not yet the whole GGUF)"
    echo "smollm2 skipped" >> "$OUT/rc.txt"
  fi
  run_logged test_models_gpu "${T_GOLDEN:-120}" "$BIN/test_models_gpu" --gtest_filter="$filter" \
    || fail test_models_gpu
fi

CONFIG=configs/llama-3.1-8b/config.json
if want decode && have peregrine decode; then
  args=(bench gpu-decode --model $CONFIG --load-format dummy --batch "${DECODE_BATCH:-1,8,32,128}"
        --context "${DECODE_CONTEXT:-1024,32768}")
  run_logged gpu_decode_bf16 "${T_DECODE:-150}" "$BIN/peregrine" "${args[@]}" \
    --json "$OUT/gpu_decode_bf16.json" || fail gpu_decode_bf16
  # fp8 variants once the binary has the flags (helpers "attn": KV, "sample"/kernels: weights).
  help=$("$BIN/peregrine" bench gpu-decode --help 2>&1)
  if [[ "${DECODE_FP8:-1}" != 1 ]]; then
    echo "gpu-decode fp8: skipped (DECODE_FP8=0)"
  elif grep -q -- "--kv-dtype" <<< "$help"; then
    run_logged gpu_decode_fp8kv "${T_DECODE:-150}" "$BIN/peregrine" "${args[@]}" --kv-dtype fp8 \
      --json "$OUT/gpu_decode_fp8kv.json" || fail gpu_decode_fp8kv
  else
    echo "gpu-decode fp8 KV: skipped (no --kv-dtype flag in this binary)"
  fi
  if [[ "${DECODE_FP8:-1}" == 1 ]] && grep -q -- "--weight-dtype" <<< "$help"; then
    run_logged gpu_decode_fp8w "${T_DECODE:-150}" "$BIN/peregrine" "${args[@]}" --weight-dtype fp8 \
      --json "$OUT/gpu_decode_fp8w.json" || fail gpu_decode_fp8w
  else
    echo "gpu-decode fp8 weights: skipped (no --weight-dtype flag in this binary)"
  fi
fi

if want prefill && have peregrine prefill; then
  run_logged gpu_prefill "${T_PREFILL:-200}" "$BIN/peregrine" bench gpu-prefill --model $CONFIG \
    --load-format dummy --prompt "${PROMPTS:-8192,32768}" --chunk "${CHUNKS:-8192}" \
    --ttft-prefix 50000 --ttft-new 800 --json "$OUT/gpu_prefill.json" || fail gpu_prefill
  # TTFT once more with the 50K prefix really prefilled (untimed) instead of random K/V.
  if [[ "${TTFT_REAL:-1}" == 1 ]]; then
    run_logged gpu_prefill_realprefix "${T_PREFILL:-200}" "$BIN/peregrine" bench gpu-prefill \
      --model $CONFIG --load-format dummy --prompt 8192 --chunk 8192 --ttft-prefix 50000 \
      --ttft-new 800 --prefill-prefix --json "$OUT/gpu_prefill_realprefix.json" \
      || fail gpu_prefill_realprefix
  fi
fi

if want torch; then
  tb=${TORCH_BUDGET:-240}
  (( tb > $(left) - 12 )) && tb=$(( $(left) - 12 ))  # python + torch import: ~8 s outside the budget
  run_logged torch_peer "$((tb + 60))" python3 bench/torch_llama.py --config $CONFIG \
    --budget-s "$tb" ${TORCH_COMPILE:+--compile --compile-scope layer} --json "$OUT/torch.json" ${TORCH_ARGS:-} || fail torch_peer
fi

echo
python3 tools/gpu/dense_summary.py "$OUT" 2>&1 | tee "$OUT/summary_table.txt"
echo "status: $([[ $status == 0 ]] && echo OK || echo FAILED)"
exit $status
