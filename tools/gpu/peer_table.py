#!/usr/bin/env python3
"""One table of Peregrine's decode against its PyTorch peers on the same points, from one
device call: `peregrine bench gpu-decode --json` files (any number, e.g. one per context) and
bench/torch_llama.py's --json. Usage: peer_table.py OUT_DIR [torch.json] (every
OUT_DIR/pg_decode*.json is read).

Columns (us per decode step): Peregrine's CUDA-graph step, its floor ((weights + KV read) /
HBM measured by Peregrine in that run) and floor/time; PyTorch "ref" (hand-written forward,
same math) under one torch.cuda.graph (s: SDPA attention, m: two GEMMs + softmax, the faster);
ref's step compiled by torch.compile (inductor) and that compiled step captured by
torch.cuda.graph ("model": the whole step compiled, "layer": one compiled layer reused);
torch / Peregrine ratios (> 1: Peregrine is faster)."""
import glob
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except Exception as e:  # a step that died leaves no (or half a) file
        print(f"({path}: {type(e).__name__})")
        return None


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    tpath = sys.argv[2] if len(sys.argv) > 2 else os.path.join(out, "torch.json")
    t = load(tpath) or {"rows": []}
    trows = t.get("rows", [])

    def find(**kw):
        for r in trows:
            if all(r.get(k) == v for k, v in kw.items()):
                return r
        return None

    pg_rows, hbm = [], None
    for path in sorted(glob.glob(os.path.join(out, "pg_decode*.json"))):
        d = load(path)
        if d:
            hbm = d.get("hbm_bytes_per_s", hbm)
            pg_rows += d.get("rows", [])
    print(f"HBM (this call): Peregrine {hbm / 1e9 if hbm else 0:.0f} GB/s, torch copy "
          f"{t.get('hbm_gbs', 0):.0f} GB/s; torch {t.get('torch', '?')}")
    hdr = (f"{'batch':>5} {'ctx':>6} {'pg graph':>9} {'floor':>8} {'fl/pg':>6} {'ref graph':>10} "
           f"{'compile+graph':>14} {'ref/pg':>7} {'cmp/pg':>7} {'compile s':>10} {'err/noise':>11}")
    print(hdr)
    for r in pg_rows:
        b, ctx = r["batch"], r["context"]
        if not r.get("fits"):
            print(f"{b:>5} {ctx:>6} skipped: {r.get('note', '')[:80]}")
            continue
        pg = r["graph_step_us"]
        g = find(kind="decode", impl="ref_graph", batch=b, context=ctx)
        c = next((x for x in trows if x.get("impl") == "ref_compile" and x.get("batch") == b
                  and x.get("context") == ctx and "ms" in x), None)
        cerr = next((x for x in trows if x.get("impl") == "ref_compile" and x.get("batch") == b
                     and x.get("context") == ctx and "error" in x), None)
        gs = f"{g['ms'] * 1e3:.0f}{'m' if g.get('attn') == 'matmul' else 's'}" if g and "ms" in g else "-"
        cs = f"{c['ms'] * 1e3:.0f} {c.get('scope', '')[:1]}" if c else ("failed" if cerr else "-")
        rr = f"{g['ms'] * 1e3 / pg:.2f}" if g and "ms" in g else "-"
        cr = f"{c['ms'] * 1e3 / pg:.2f}" if c else "-"
        ct = f"{c['compile_s']:.1f}" if c else "-"
        ce = f"{c.get('err', float('nan')):.3f}/{c.get('noise', float('nan')):.3f}" if c else "-"
        print(f"{b:>5} {ctx:>6} {pg:>9.0f} {r['floor_us']:>8.0f} {100 * r['floor_us'] / pg:>5.0f}% "
              f"{gs:>10} {cs:>14} {rr:>7} {cr:>7} {ct:>10} {ce:>11}")
        if cerr and not c:
            print(f"      torch.compile failed: {cerr['error'][:150]}")
    print("(ref/pg, cmp/pg: torch time / Peregrine time; err/noise: max|logit diff| / std of the "
          "compiled step against ref eager on the same inputs / of ref's other attention form "
          "against ref (the bf16 noise scale); compile s: first call of the compiled step; "
          "scope m = whole step, l = one layer)")


if __name__ == "__main__":
    main()
