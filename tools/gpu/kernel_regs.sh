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
db="$root/build/cuda/compile_commands.json"  # the build's own flags for FILE (cmake --preset cuda)
[[ -f "$db" ]] || { echo "no $db: run cmake --preset cuda first" >&2; exit 1; }
cmd=$(python3 "$root/tools/gpu/kernel_regs_fmt.py" --command "$db" "$root/$file")
regs() {  # src_root -> "instance: regs, spills" lines (demangled, the parameter list cut)
  eval "${cmd//$root\//$1\/} -Xptxas -v" 2>&1 |
    awk '/Function properties for/ { name = $NF }
         /spill stores/ { spill = $(NF-7) "+" $(NF-3) }
         /Used [0-9]+ registers/ && name != "" {
           for (i = 1; i <= NF; ++i) if ($i == "Used") r = $(i+1);
           print name, r, spill; name = "" }' |
    python3 "$root/tools/gpu/kernel_regs_fmt.py"
}
now=$(mktemp) && regs "$root" > "$now"
[[ -s "$now" ]] || { echo "no kernel instance in $file (or it does not compile)" >&2; exit 1; }
if [[ -z "$base" ]]; then cat "$now"; exit 0; fi
old=$(mktemp -d)
git -C "$root" archive "$base" src | tar -x -C "$old"
regs "$old" > "$old/regs.txt"
if diff "$old/regs.txt" "$now" > "$old/diff.txt"; then
  echo "every instance as at $base ($(wc -l < "$now") instances)"
else
  echo "instances that differ from $base (< base, > now):"; cat "$old/diff.txt"
fi
rm -rf "$old" "$now"
