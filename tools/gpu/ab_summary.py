#!/usr/bin/env python3
"""Summarises the step rows of an A/B job's log (tools/gpu/ab_rows.sh output).

  python3 tools/gpu/ab_summary.py LOG [--base base]

Rows "ROW <setting>-<model> <us> <floor/t>" (and "SERVE <label> <context> <us> <floor/t>") are
grouped by model (the label's suffix that names a folder of configs/) and setting; per group it
prints the rounds, their median, min and max in us a step, the median floor/time, and the
median's difference from the setting named by --base (default "base") of the same model.
Rounds are interleaved in the jobs, so the spread within a setting is the call's noise.
"""
import argparse
import os
import re
import statistics
import sys
from collections import OrderedDict


def models():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "configs")
    try:
        names = [n for n in os.listdir(root) if os.path.isdir(os.path.join(root, n))]
    except OSError:
        names = []
    return sorted(names, key=len, reverse=True)  # longest first: "x-8b" before "8b"


def split_label(label, names):
    for n in names:
        if label.endswith("-" + n):
            return label[: -len(n) - 1], n
    return label, "?"


def percent(s):
    m = re.match(r"([0-9.]+)", s)
    return float(m.group(1)) if m else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--base", default="base")
    args = ap.parse_args()
    names = models()
    groups = OrderedDict()  # (model, extra) -> setting -> [(us, floor%)]
    with open(args.log, errors="replace") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 4 and parts[0] == "ROW":
                setting, model = split_label(parts[1], names)
                key, us, fl = (model, ""), parts[2], parts[3]
            elif len(parts) >= 5 and parts[0] == "SERVE":
                setting, model = split_label(parts[1], names)
                key, us, fl = (model, "serve " + parts[2]), parts[3], parts[4]
            else:
                continue
            try:
                v = float(us)
            except ValueError:
                continue
            groups.setdefault(key, OrderedDict()).setdefault(setting, []).append((v, percent(fl)))
    if not groups:
        print("no ROW / SERVE lines in", args.log)
        return 1
    for (model, extra), settings in groups.items():
        print(f"== {model} {extra}".rstrip())
        base = settings.get(args.base)
        base_med = statistics.median(v for v, _ in base) if base else None
        heads = ("n", "median", "min", "max", "floor/t", "d median")
        print(f"  {'setting':<14} " + " ".join(f"{h:>{w}}" for h, w in zip(heads, (2, 9, 9, 9, 8, 9))))
        for setting, rows in settings.items():
            us = [v for v, _ in rows]
            med = statistics.median(us)
            fl = statistics.median(p for _, p in rows)
            d = f"{med - base_med:+9.1f}" if base_med is not None else f"{'':>9}"
            print(f"  {setting:<14} {len(us):>2} {med:9.1f} {min(us):9.1f} {max(us):9.1f}"
                  f" {fl:7.1f}% {d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
