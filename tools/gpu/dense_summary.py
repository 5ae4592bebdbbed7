#!/usr/bin/env python3
"""One summary table for tools/gpu/dense.sh (issue 6), read from its $OUT folder:
test results, then every figure with its floor, floor/time, and the PyTorch peer's time on the
same shape (bench/torch_llama.py, same GPU, same call) with the peer ratio
= torch time / Peregrine time (> 1: Peregrine is faster).
Usage: dense_summary.py OUT_DIR"""
import glob
import json
import os
import re
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def tail_match(path, pattern):
    try:
        with open(path, errors="replace") as f:
            return [l.rstrip() for l in f if re.search(pattern, l)]
    except OSError:
        return []


def fmt_ratio(x):
    return f"{100 * x:.0f}%" if x else "-"


def main(out):
    print("================ issue 6 (dense, one H200) summary ================")
    rc = {}
    for line in open(os.path.join(out, "rc.txt")) if os.path.exists(os.path.join(out, "rc.txt")) else []:
        k, _, v = line.strip().partition(" ")
        rc[k] = v
    for log in ("test_ops", "test_ops_cuda", "test_models_gpu"):
        p = os.path.join(out, log + ".log")
        if not os.path.exists(p):
            continue
        lines = tail_match(p, r"^\[  (PASSED|FAILED)  \]|tests? ran|^\[  SKIPPED")
        print(f"{log} (rc {rc.get(log, '?')}): " + "; ".join(lines[:6]))
        for l in tail_match(p, r"case \d+ \(prompt"):
            print("   " + l)
    if "smollm2" in rc:
        print("SmolLM2 golden: skipped (not all pieces of its GGUF carried yet)")
    for l in tail_match(os.path.join(out, "bench_cuda.log"), r"^HBM|^bf16 GEMM"):
        print("bench_cuda: " + l)

    torch = load(os.path.join(out, "torch.json")) or {"rows": []}
    trows = torch.get("rows", [])

    def t_find(**kw):
        for r in trows:
            if all(r.get(k) == v for k, v in kw.items()) and "skipped" not in r:
                return r
        return None
    for r in trows:
        if r.get("kind") == "check":
            nan = float("nan")
            print(f"torch peer check vs fp32 transformers (same weights), max|diff|/std: prefill "
                  f"ref {r.get('prefill', nan):.4f} / transformers bf16 {r.get('prefill_hf', nan):.4f}, "
                  f"decode ref {r.get('decode', nan):.4f} / {r.get('decode_hf', nan):.4f} "
                  f"-> {'OK' if r.get('ok') else 'MISMATCH'}")
    for r in trows:
        if r.get("kind") == "check_decode_forms":
            print(f"torch peer decode attention forms (sdpa vs matmul) agree: max|diff|/std "
                  f"{r['err']:.4f} -> {'OK' if r.get('ok') else 'MISMATCH'}")
    if torch.get("gemm_tflops"):
        print(f"torch ceilings: HBM {torch['hbm_gbs']:.0f} GB/s, bf16 GEMM {torch['gemm_tflops']:.1f} TFLOP/s "
              f"(torch {torch.get('torch')})")

    hdr = f"{'figure':<34} {'peregrine':>11} {'floor':>10} {'floor/t':>8} {'torch graph':>12} {'torch eager':>12} {'torch/pg':>9}"
    print()
    print(hdr)
    print("-" * len(hdr))
    for path in sorted(glob.glob(os.path.join(out, "gpu_decode_*.json"))):
        d = load(path)
        if not d:
            continue
        variant = os.path.basename(path)[len("gpu_decode_"):-5]
        print(f"# decode {variant}: HBM {d['hbm_bytes_per_s'] / 1e9:.0f} GB/s (this run); floor = "
              f"(weights {d['streamed_weight_bytes'] / 1e9:.2f} GB + KV read) / HBM; us per step")
        for r in d.get("rows", []):
            name = f"decode {variant} b={r['batch']} ctx={r['context']}"
            t = t_find(kind="decode", impl="ref_graph", batch=r["batch"], context=r["context"])
            if not r.get("fits"):
                print(f"{name:<34} {'skipped: ' + r.get('note', '')[:80]}")
                continue
            tg = (f"{t['ms'] * 1e3:.0f}" + ("m" if t.get("attn") == "matmul" else "")) if t else "-"
            te = f"{t['eager_ms'] * 1e3:.0f}" if t else "-"
            peer = f"{t['ms'] * 1e3 / r['graph_step_us']:.2f}x" if t else "-"
            print(f"{name:<34} {r['graph_step_us']:>11.0f} {r['floor_us']:>10.0f} "
                  f"{fmt_ratio(r['floor_over_time']):>8} {tg:>12} {te:>12} {peer:>9}")
            c = t_find(kind="decode", impl="ref_compile", batch=r["batch"], context=r["context"])
            if c and "ms" in c:
                print(f"{'  torch.compile + CUDA graph':<34} {'':>11} {'':>10} {'':>8} "
                      f"{c['ms'] * 1e3:>12.0f} {'':>12} "
                      f"{c['ms'] * 1e3 / r['graph_step_us']:>8.2f}x  (compiled in {c['compile_s']:.0f} s)")
            elif c:
                print(f"  torch.compile failed: {c.get('error', '')[:100]}")
    for r in trows:
        if r.get("impl") == "hf_eager" and r.get("kind") == "decode":
            print(f"{'  transformers eager b=1 ctx=1K':<34} {'':>11} {'':>10} {'':>8} {'':>12} {r['ms'] * 1e3:>12.0f}")
    for path in sorted(glob.glob(os.path.join(out, "gpu_prefill*.json"))):
        d = load(path)
        if not d:
            continue
        real = "realprefix" in path
        print(f"# prefill / TTFT{' (prefix really prefilled)' if real else ''}: bf16 GEMM "
              f"{d['gemm_flops_per_s'] / 1e12:.0f} TFLOP/s (this run); "
              f"floor = FLOPs (linear + lm_head rows + causal attention) / GEMM rate; ms")
        for r in d.get("rows", []):
            if r["kind"] == "prefill":
                name = f"prefill {r['tokens']} (chunk {r['chunk']})"
                t = t_find(kind="prefill", impl="ref_eager", tokens=r["tokens"])
            else:
                name = f"ttft {r['tokens']} on {r['prefix']}{' real' if real else ''} (chunk {r['chunk']})"
                t = t_find(kind="ttft", impl="ref_eager", tokens=r["tokens"], prefix=r["prefix"])
            if not r.get("seconds"):
                print(f"{name:<34} skipped: {r.get('note', '')[:80]}")
                continue
            te = f"{t['seconds'] * 1e3:.1f}" if t else "-"
            peer = f"{t['seconds'] / r['seconds']:.2f}x" if t else "-"
            extra = f"  ({r['tokens'] / r['seconds']:.0f} tok/s)" if r["kind"] == "prefill" else ""
            print(f"{name:<34} {r['seconds'] * 1e3:>11.1f} {r['floor_seconds'] * 1e3:>10.1f} "
                  f"{fmt_ratio(r['floor_over_time']):>8} {'-':>12} {te:>12} {peer:>9}{extra}"
                  + ("" if r.get("ok") else "  FAILED: " + r.get("note", "")))
    for r in trows:
        if r.get("impl") == "hf_eager" and r.get("kind") == "prefill":
            print(f"{'  transformers eager prefill ' + str(r['tokens']):<34} {'':>11} {'':>10} {'':>8} {'':>12} "
                  f"{r['seconds'] * 1e3:>12.1f}")
    fails = os.path.join(out, "failures.txt")
    if os.path.exists(fails):
        print("failures: " + "; ".join(l.strip() for l in open(fails)))
    print("(torch graph/eager: bench/torch_llama.py 'ref' (hand-written, same weights as transformers) "
          "under one CUDA graph / eagerly, the faster decode attention form (m: two GEMMs + softmax, "
          "else SDPA); torch/pg = torch time / Peregrine time)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
