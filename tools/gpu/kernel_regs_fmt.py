"""Formats tools/gpu/kernel_regs.sh's raw lines ("mangled-name registers stores+loads", stdin):
one line an instance, demangled (c++filt) without its parameter list, sorted."""
import subprocess
import sys


def cut(name: str) -> str:
    """The name up to its parameter list (its last top-level parenthesis), without `void `."""
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(name[i], 0)
        if depth == 0 and name[i] == "(":
            name = name[:i]
            break
    return name.removeprefix("void ")


rows = [line.split() for line in sys.stdin if line.strip()]
names = subprocess.run(["c++filt"], input="\n".join(r[0] for r in rows), capture_output=True,
                       text=True, check=True).stdout.splitlines()
for name, row in sorted(zip(names, rows)):
    print(f"{cut(name)}: {row[1]} registers, {row[2]} spill bytes (stores+loads)")
