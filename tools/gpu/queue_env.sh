# Sourced by a queued job's run.sh on the GPU machine (see tools/gpu/queue.sh): puts the
# shared libraries (.gpulib) and cuBLASLt on LD_LIBRARY_PATH and unpacks the job's bin/*.gz
# into $BIN.
mkdir -p /tmp/pglib
# Every packed library is xz-compressed (.gpulib: what every binary needs; .gpulibx, optional:
# the full peregrine binary's ICU, PCRE2, ...); unpacked once per machine into /tmp/pglib.
for f in .gpulib/*.xz .gpulibx/*.xz; do
  [[ -e "$f" ]] || continue
  b="/tmp/pglib/$(basename "${f%.xz}")"
  [[ -f "$b" ]] || xz -dc "$f" > "$b" 2>/dev/null ||
    python3 -c 'import lzma,sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())' "$f" > "$b"
done
lt=$(ls /usr/local/cuda/lib64/libcublasLt.so.13 /usr/local/cuda/lib/libcublasLt.so.13 2>/dev/null | head -1)
[[ -n "$lt" ]] || lt=$(find / -name 'libcublasLt.so.13' -not -path '*/proc/*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$PWD/.gpulib:/tmp/pglib:$(dirname "${lt:-/nonexistent/x}"):${LD_LIBRARY_PATH:-}"
export OPENBLAS_NUM_THREADS=8 NCCL_NVLS_ENABLE=0
BIN="/tmp/pgbin/$(basename "$JOB")"
mkdir -p "$BIN"
for f in "$JOB"/bin/*.gz "$JOB"/bin/*.xz; do
  [[ -e "$f" ]] || continue
  b="$BIN/$(basename "${f%.*}")"
  case "$f" in
    *.gz) gunzip -c "$f" > "$b" ;;
    *.xz) xz -dc "$f" > "$b" 2>/dev/null ||
            python3 -c 'import lzma,sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())' "$f" > "$b" ;;
  esac
  chmod +x "$b"
done
export BIN
