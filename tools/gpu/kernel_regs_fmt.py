"""Helper of tools/gpu/kernel_regs.sh. Default: formats its raw lines ("mangled-name registers
stores+loads", stdin): one line an instance, demangled (c++filt) without its parameter list,
sorted. `--command DB FILE`: FILE's compile command from the compile database DB, writing no
object (the flags the build uses, so the counts are the shipped kernels')."""
import json
import shlex
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


def command(db: str, file: str) -> str:
    """FILE's entry of the compile database DB, its object output replaced by /dev/null."""
    entry = next((e for e in json.load(open(db)) if e["file"] == file), None)
    if entry is None:
        sys.exit(f"{file} is not in {db}")
    args = shlex.split(entry["command"])
    args[args.index("-o") + 1] = "/dev/null"
    return shlex.join(args)


if sys.argv[1:2] == ["--command"]:
    print(command(sys.argv[2], sys.argv[3]))
    sys.exit(0)
rows = [line.split() for line in sys.stdin if line.strip()]
names = subprocess.run(["c++filt"], input="\n".join(r[0] for r in rows), capture_output=True,
                       text=True, check=True).stdout.splitlines()
for name, row in sorted(zip(names, rows)):
    print(f"{cut(name)}: {row[1]} registers, {row[2]} spill bytes (stores+loads)")
