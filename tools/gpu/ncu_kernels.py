#!/usr/bin/env python3
"""Summarise an `ncu --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum` log: one row per
kernel name (templates cut) and grid, with calls, median µs, median DRAM MB read, and the
read rate (GB/s) that implies. Usage: ncu_kernels.py LOG [--top N]."""
import csv, statistics, sys, re
from collections import defaultdict

def short(name):
    name = re.sub(r"\(.*$", "", name)          # arguments
    depth, out = 0, []
    for ch in name:                             # drop template arguments
        if ch == "<": depth += 1; continue
        if ch == ">": depth -= 1; continue
        if depth == 0: out.append(ch)
    return "".join(out).split("::")[-1][:48]

rows = defaultdict(lambda: defaultdict(dict))
lines = [l for l in open(sys.argv[1], errors="replace") if l.startswith('"')]
for r in csv.DictReader(lines):
    try:
        key = (r["ID"], short(r["Kernel Name"]), r.get("Grid Size", ""), r.get("Block Size", ""))
        v = float(r["Metric Value"].replace(",", ""))
    except (KeyError, ValueError):
        continue
    rows[key][r["Metric Name"]] = v
agg = defaultdict(lambda: ([], []))
order = []
for (i, name, grid, block), m in rows.items():
    k = (name, grid, block)
    if k not in agg: order.append(k)
    agg[k][0].append(m.get("gpu__time_duration.sum", 0) / 1e3)   # ns -> µs
    agg[k][1].append(m.get("dram__bytes_read.sum", 0) / 1e6)     # bytes -> MB
print(f"{'kernel':48} {'grid':>14} {'block':>12} {'calls':>5} {'us':>8} {'MB':>8} {'GB/s':>7} {'sum_us':>9}")
tot = 0.0
for k in sorted(order, key=lambda k: -sum(agg[k][0])):
    t, b = agg[k]
    mt, mb = statistics.median(t), statistics.median(b)
    tot += sum(t)
    print(f"{k[0]:48} {k[1]:>14} {k[2]:>12} {len(t):5d} {mt:8.2f} {mb:8.2f} {mb/mt*1e3 if mt else 0:7.0f} {sum(t):9.1f}")
print(f"total kernel time {tot:.1f} us over {sum(len(v[0]) for v in agg.values())} launches")
