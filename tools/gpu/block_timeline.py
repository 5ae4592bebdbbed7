#!/usr/bin/env python3
"""Summarise a block timeline (CSV from a -DPEREGRINE_BLOCK_TRACE=ON build; see
src/kernels/cuda/common/block_trace.cuh) of N back-to-back replays of one decode step.

Per kernel launch (a grid id): first / median / last block start, PDL wait return, block end.
Per kernel kind, summed over the middle replay:
  inc   the kernel's critical-path increment: last block end minus the previous launch's
        last block end (sums to the step's traced span, so it says where wall time goes)
  rel   wait release latency: first wait return minus the previous launch's last block end
  post  last block end minus first wait return (the kernel's work once its input is there)
  lead  previous launch's last end minus this launch's first block start (> 0: resident early)
  tail  last block end minus median block end (the slowest blocks)
With --phases: per kernel kind, the median over blocks of each step between a block's start,
its wait's return, its marks (m0..m3, PG_TRACE_MARK: e.g. the ring GEMV's x staged / first
slot / rows stored, the fused attention's token prepared / keys done / split stored) and its
end, and the median over launches of last end minus first wait return.
Usage: block_timeline.py trace.csv [--replays 3] [--launches] [--phases] [--late]
"""
import argparse
import csv
import os
import statistics
import sys
from collections import defaultdict

TAGS = {1: "gemv_vec", 2: "gemv_scalar", 3: "gemv_ring", 4: "decode_mma", 5: "decode",
        6: "decode_combine", 7: "router", 8: "fused_router", 9: "norm_logits", 10: "gate_up",
        11: "down", 12: "down_tile", 13: "rmsnorm", 14: "embedding", 15: "sample",
        16: "ring_mma", 17: "bf16_ring_mma", 18: "kv_write", 19: "elementwise",
        20: "decode_stream", 21: "mla_decode", 22: "mla_combine", 23: "mla_kv_prep",
        24: "mla_q_absorb", 25: "mla_combine_apply"}


def load_rows(path):
    """Records grouped into launches: [[row, ...], ...] ordered by first block start.
    A graph node keeps its %gridid across replays: a node's records, by start time, split
    into launches of `blocks` records each."""
    by_id = defaultdict(list)
    with open(path) as f:
        for r in csv.DictReader(f):
            by_id[int(r["grid_id"])].append({k: int(v) for k, v in r.items()})
    launches = []
    for rows in by_id.values():
        rows.sort(key=lambda r: r["start"])
        nb = rows[0]["blocks"]
        launches += [rows[i:i + nb] for i in range(0, len(rows), nb)]
    launches.sort(key=lambda g: (g[0]["start"], g[0]["grid_id"]))
    return launches


def phases(path, replays):
    launches = load_rows(path)
    n = len(launches) // replays
    rep = launches[n:2 * n] if replays >= 3 else launches[:n]
    steps = defaultdict(lambda: defaultdict(list))
    for g in rep:
        k = TAGS.get(g[0]["tag"], str(g[0]["tag"]))
        waits = [r["wait1"] for r in g if r["wait1"]]
        for r in g:
            pts = [("start", r["start"])] + ([("wait", r["wait1"])] if r["wait1"] else [])
            pts += [(f"m{i}", r[f"m{i}"]) for i in range(4) if r.get(f"m{i}")]
            pts.append(("end", r["end"]))
            pts.sort(key=lambda p: p[1])  # marks in time order (m3 may precede m2)
            for (a, ta), (b, tb) in zip(pts, pts[1:]):
                steps[k][f"{a}->{b}"].append((tb - ta) / 1e3)
        if waits:
            steps[k]["LAST end - first wait"].append((max(r["end"] for r in g) - min(waits)) / 1e3)
    for k in sorted(steps):
        print(f"-- {k}")
        for name, v in steps[k].items():
            v.sort()
            print(f"  {name:>22}: median {statistics.median(v):7.2f}  p10 {v[len(v) // 10]:7.2f}"
                  f"  p90 {v[9 * len(v) // 10]:7.2f}  (n {len(v)})")


def late(path, replays):
    """Residency: per kernel kind, over the middle replay, the share of a launch's blocks that
    start within 0.3 us before the previous launch's last block end or after it (they became
    resident only as the previous kernel's blocks left: registers or shared memory did not
    allow them beside it, e.g. the 4-warp decode attention beside the fp8 ring GEMV, session
    23), and the median of those blocks' start minus that end."""
    launches = load_rows(path)
    n = len(launches) // replays
    rep = launches[n:2 * n] if replays >= 3 else launches[:n]
    prev_end = max(r["end"] for r in launches[n - 1]) if replays >= 3 else None
    share = defaultdict(list)
    delay = defaultdict(list)
    for g in rep:
        k = TAGS.get(g[0]["tag"], str(g[0]["tag"]))
        if prev_end is not None:
            lat = [r["start"] - prev_end for r in g if r["start"] > prev_end - 300]
            share[k].append(len(lat) / len(g))
            delay[k].extend(x / 1e3 for x in lat)
        e = max(r["end"] for r in g)
        prev_end = e if prev_end is None else max(prev_end, e)
    print(f"{'kernel':>18} {'launches':>8} {'late share':>10} {'late start - prev end (median us)':>34}")
    for k in sorted(share, key=lambda k: -statistics.mean(share[k])):
        d = sorted(delay[k])
        med = f"{statistics.median(d):.2f}" if d else "-"
        print(f"{k:>18} {len(share[k]):>8} {statistics.mean(share[k]):>10.2f} {med:>34}")


def load(path):
    """Per launch (load_rows), its block start / wait / end summary."""
    out = []
    for rows in load_rows(path):
        starts = sorted(r["start"] for r in rows)
        ends = sorted(r["end"] for r in rows)
        waits = sorted(r["wait1"] for r in rows if r["wait1"] > 0)
        out.append({
            "tag": TAGS.get(rows[0]["tag"], str(rows[0]["tag"])),
            "blocks": rows[0]["blocks"], "seen": len(rows), "threads": rows[0]["threads"],
            "s0": starts[0], "smed": starts[len(starts) // 2], "s1": starts[-1],
            "w0": waits[0] if waits else None, "w1": waits[-1] if waits else None,
            "e0": ends[0], "emed": ends[len(ends) // 2], "e1": ends[-1],
            "sms": len({r["sm"] for r in rows}),
        })
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--replays", type=int, default=3)
    ap.add_argument("--launches", action="store_true", help="print every launch of the replay")
    ap.add_argument("--phases", action="store_true", help="per-block phase medians per kernel")
    ap.add_argument("--late", action="store_true",
                    help="per kernel: share of blocks resident only after the previous kernel")
    a = ap.parse_args()
    if a.phases:
        phases(a.csv, a.replays)
        return
    if a.late:
        late(a.csv, a.replays)
        return
    grids = load(a.csv)
    n = len(grids) // a.replays
    ticks = sorted({g["s0"] % 1000 for g in grids})
    print(f"{len(grids)} launches, {n} a replay; distinct start-time residues mod 1 us: {len(ticks)}"
          " (few = a coarse %globaltimer)")
    rep = grids[n:2 * n] if a.replays >= 3 else grids[:n]
    prev_end = grids[n - 1]["e1"] if a.replays >= 3 else rep[0]["s0"]
    span0 = prev_end
    per = defaultdict(lambda: defaultdict(float))
    cnt = defaultdict(int)
    if a.launches:
        print(f"{'#':>4} {'kernel':>14} {'blocks':>6} {'lead':>7} {'rel':>6} {'post':>7} {'inc':>7} {'tail':>6}  (us)")
    for i, g in enumerate(rep):
        inc = (g["e1"] - prev_end) / 1e3
        rel = (g["w0"] - prev_end) / 1e3 if g["w0"] else float("nan")
        post = (g["e1"] - g["w0"]) / 1e3 if g["w0"] else (g["e1"] - g["s0"]) / 1e3
        lead = (prev_end - g["s0"]) / 1e3
        tail = (g["e1"] - g["emed"]) / 1e3
        k = g["tag"]
        cnt[k] += 1
        for name, v in (("inc", inc), ("rel", rel), ("post", post), ("lead", lead), ("tail", tail)):
            if v == v:
                per[k][name] += v
        if a.launches:
            print(f"{i:>4} {k:>14} {g['blocks']:>6} {lead:>7.2f} {rel:>6.2f} {post:>7.2f} {inc:>7.2f} {tail:>6.2f}")
        prev_end = max(prev_end, g["e1"])
    span = (prev_end - span0) / 1e3
    print(f"replay span (last end to last end): {span:.1f} us")
    print(f"{'kernel':>14} {'launches':>8} {'inc sum':>9} {'inc':>7} {'rel':>6} {'post':>7} {'lead':>7} {'tail':>6}  (per launch, us)")
    for k in sorted(per, key=lambda k: -per[k]["inc"]):
        c = cnt[k]
        p = per[k]
        print(f"{k:>14} {c:>8} {p['inc']:>9.1f} {p['inc'] / c:>7.2f} {p['rel'] / c:>6.2f} "
              f"{p['post'] / c:>7.2f} {p['lead'] / c:>7.2f} {p['tail'] / c:>6.2f}")


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:  # a reader that stopped early (`| head`): its lines were enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
