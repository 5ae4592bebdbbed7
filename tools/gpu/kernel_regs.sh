#!/usr/bin/env bash
# Usage (here, no GPU): tools/gpu/kernel_regs.sh FILE.cu [BASE_COMMIT]
# Registers and spills of every kernel instance in FILE.cu as ptxas reports them for sm_90a
# (one line an instance: its demangled name and template arguments; kernel_regs_fmt.py), and with
# BASE_COMMIT the instances whose line differs from that commit's build of the same file. A
# kernel's register count decides which blocks share an SM (session 44: two registers more in
# the loop-form attention cost 430-600 µs a step); run it on every kernel change, all
# instances, not only the one changed (session 45: a change meant for one instance spilled in
# three others).
set -euo pipefail
file=$1 base=${2:-}
root=$(git rev-parse --show-toplevel)
regs() {  # src_root file -> "instance: regs, spills" lines (demangled, the parameter list cut)
  nvcc -DPEREGRINE_HAVE_CUDA=1 -I"$1/src" -O3 -DNDEBUG --generate-code=arch=compute_90a,code=sm_90a \
    -std=c++17 -x cu -c "$1/$2" -o /dev/null -Xptxas -v 2>&1 |
    awk '/Function properties for/ { name = $NF }
         /spill stores/ { spill = $(NF-7) "+" $(NF-3) }
         /Used [0-9]+ registers/ && name != "" {
           for (i = 1; i <= NF; ++i) if ($i == "Used") r = $(i+1);
           print name, r, spill; name = "" }' |
    python3 "$root/tools/gpu/kernel_regs_fmt.py"
}
now=$(mktemp) && regs "$root" "$file" > "$now"
if [[ -z "$base" ]]; then cat "$now"; exit 0; fi
old=$(mktemp -d)
git -C "$root" archive "$base" src | tar -x -C "$old"
regs "$old" "$file" > "$old/regs.txt"
if diff "$old/regs.txt" "$now" > "$old/diff.txt"; then
  echo "every instance as at $base ($(wc -l < "$now") instances)"
else
  echo "instances that differ from $base (< base, > now):"; cat "$old/diff.txt"
fi
rm -rf "$old" "$now"
