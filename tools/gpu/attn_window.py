#!/usr/bin/env python3
"""The decode attention's window in a block timeline (block_timeline.py's CSV): per attention
launch of the middle replay, its blocks split into those resident more than 5 us before the
previous kernel (the qkv GEMV) ended ("early") and the others ("late"); medians of each block's
start / wait return / marks (m0 token prepared, m3 first tile landed, m1 keys done, m2 split
stored) / end in us after the qkv's last block ended; the launch's last m2 and last end; then the next
kernel's (o's) first wait return and last end after the attention's last end. Also the gap
between replays (a replay's first block start minus the previous replay's last block end).
Usage: attn_window.py trace.csv [--replays 3]
"""
import argparse
import statistics
import sys

sys.path.insert(0, __import__("os").path.dirname(__file__))
from block_timeline import TAGS, load_rows  # noqa: E402


def med(v):
    return statistics.median(v) if v else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--replays", type=int, default=3)
    a = ap.parse_args()
    launches = load_rows(a.csv)
    n = len(launches) // a.replays
    for r in range(1, a.replays):
        prev_end = max(x["end"] for x in launches[r * n - 1])
        first = min(x["start"] for x in launches[r * n])
        print(f"replay {r}: gap {(first - prev_end) / 1e3:.2f} us (first start - previous last end)")
    rep = launches[n:2 * n] if a.replays >= 3 else launches[:n]
    cols = ("start", "wait1", "m0", "m3", "m1", "m2", "end")
    acc = {"early": {c: [] for c in cols}, "late": {c: [] for c in cols}}
    n_early, last_m2, last_end, o_wait, o_end, o_early = [], [], [], [], [], []
    o_acc = {c: [] for c in cols}
    attn_blocks = o_blocks = 0
    for i in range(1, len(rep) - 1):
        g = rep[i]
        if TAGS.get(g[0]["tag"]) != "decode_mma":
            continue
        qend = max(x["end"] for x in rep[i - 1])
        early = [x for x in g if x["start"] < qend - 5000]  # resident > 5 us before qkv ended
        late = [x for x in g if x["start"] >= qend - 5000]
        n_early.append(len(early))
        attn_blocks = len(g)
        for name, blocks in (("early", early), ("late", late)):
            for c in cols:
                acc[name][c] += [(x[c] - qend) / 1e3 for x in blocks if x.get(c)]
        m2 = [x["m2"] for x in g if x.get("m2")]
        if m2:
            last_m2.append((max(m2) - qend) / 1e3)
        aend = max(x["end"] for x in g)
        last_end.append((aend - qend) / 1e3)
        o = rep[i + 1]
        o_blocks = len(o)
        waits = [x["wait1"] for x in o if x["wait1"]]
        if waits:
            o_wait.append((min(waits) - aend) / 1e3)
        o_end.append((max(x["end"] for x in o) - aend) / 1e3)
        o_early.append(sum(1 for x in o if x["start"] < aend))
        for c in cols:
            o_acc[c] += [(x[c] - aend) / 1e3 for x in o if x.get(c)]
    if not last_end:
        print("no decode_mma launches")
        return
    print(f"attention launches: {len(last_end)}, blocks a launch {attn_blocks}, "
          f"resident > 5 us before qkv ended: median {med(n_early)} (min {min(n_early)}, max {max(n_early)})")
    print("us after the qkv's last block ended (median over blocks of all launches):")
    for name in ("early", "late"):
        print(f"  {name:>5}: " + "  ".join(f"{c} {med(acc[name][c]):6.2f}" for c in cols)
              + f"  (n {len(acc[name]['end'])})")
    print(f"  last split stored (m2) median {med(last_m2):.2f}, attention last end median {med(last_end):.2f} "
          f"(p10 {sorted(last_end)[len(last_end) // 10]:.2f} p90 {sorted(last_end)[9 * len(last_end) // 10]:.2f})")
    print(f"  next kernel: first wait return {med(o_wait):.2f}, last end {med(o_end):.2f} us after the attention's last end")
    print(f"  next kernel's blocks resident before the attention ended: median {med(o_early)} of {o_blocks}; "
          "us after the attention's last end (median over blocks; ring marks m0 x staged, m1 first slot, m2 rows stored):")
    print("    " + "  ".join(f"{c} {med(o_acc[c]):6.2f}" for c in cols))


if __name__ == "__main__":
    main()
