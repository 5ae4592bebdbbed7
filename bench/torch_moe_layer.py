#!/usr/bin/env python3
"""PyTorch peer of tests/ops/bench_moe.cpp: the same MoE layer (router matmul, routing, shared
expert, routed experts accumulated onto it) on the same shapes and token counts, bf16.

Two implementations:
  loop    - a plain loop over the experts hit (tokens sorted by expert, one host sync for the
            counts), as a framework's fallback MoE does;
  grouped - torch._grouped_mm over the expert-sorted tokens (no host sync), when available.
The DeepSeek-V3-style shape runs with bf16 weights here (torch has no 128x128 block-scaled fp8
grouped GEMM): twice the weight bytes of our fp8 layer; noted in the output.

Timing: CUDA events around each call after warm-up, median of --reps. Output: a table and
JSON lines (--json FILE)."""
import argparse
import json

import torch
import torch.nn.functional as F

SHAPES = [
    # name, hidden, experts, top_k, inter, shared_inter, scoring, groups, topk_groups, renorm, scaling
    ("qwen3-30b-a3b", 2048, 128, 8, 768, 0, "softmax", 1, 1, True, 1.0),
    ("deepseek-v2-lite", 2048, 64, 6, 1408, 2816, "softmax", 1, 1, False, 1.0),
    ("dsv3-fp8-block", 7168, 256, 8, 2048, 2048, "sigmoid", 8, 4, True, 2.5),
]
TOKENS = [1, 8, 32, 64, 128, 512]


class Layer:
    def __init__(self, s, dev):
        (self.name, self.h, self.E, self.k, self.I, self.SI, self.scoring, self.groups,
         self.topk_groups, self.renorm, self.scaling) = s
        g = torch.Generator(device=dev).manual_seed(0)
        r = lambda *shape: (torch.rand(*shape, generator=g, device=dev, dtype=torch.bfloat16) - 0.5) * 0.1
        self.router = r(self.E, self.h)
        self.w13 = r(self.E, 2 * self.I, self.h)   # gate rows then up rows, per expert
        self.w2 = r(self.E, self.h, self.I)
        if self.SI:
            self.sh13 = r(2 * self.SI, self.h)
            self.sh2 = r(self.h, self.SI)

    def route(self, x):
        logits = (x @ self.router.t()).float()
        scores = logits.softmax(-1) if self.scoring == "softmax" else logits.sigmoid()
        choice = scores
        if self.groups > 1 and self.topk_groups < self.groups:
            n = x.shape[0]
            grouped = choice.view(n, self.groups, -1)
            gscore = grouped.topk(2, dim=-1).values.sum(-1)
            keep = gscore.topk(self.topk_groups, dim=-1).indices
            mask = torch.zeros_like(gscore).scatter_(1, keep, 1.0)
            choice = grouped.masked_fill(mask.unsqueeze(-1) == 0, float("-inf")).view(n, -1)
        ids = choice.topk(self.k, dim=-1).indices
        w = scores.gather(1, ids)
        if self.renorm:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        return ids, w * self.scaling

    def shared(self, x):
        if not self.SI:
            return torch.zeros_like(x)
        gu = x @ self.sh13.t()
        return (F.silu(gu[:, : self.SI]) * gu[:, self.SI:]) @ self.sh2.t()

    def loop(self, x):
        ids, w = self.route(x)
        out = self.shared(x).float()
        flat = ids.flatten()
        order = flat.argsort(stable=True)
        counts = torch.bincount(flat, minlength=self.E).tolist()  # the one host sync
        tok = order // self.k
        start = 0
        for e, c in enumerate(counts):
            if c == 0:
                continue
            t = tok[start:start + c]
            xe = x[t]
            gu = xe @ self.w13[e].t()
            y = (F.silu(gu[:, : self.I]) * gu[:, self.I:]) @ self.w2[e].t()
            out.index_add_(0, t, y.float() * w.flatten()[order[start:start + c]].unsqueeze(1))
            start += c
        return out.to(torch.bfloat16)

    def grouped(self, x):
        ids, w = self.route(x)
        out = self.shared(x).float()
        flat = ids.flatten()
        order = flat.argsort(stable=True)
        offs = torch.bincount(flat, minlength=self.E).cumsum(0).to(torch.int32)
        tok = order // self.k
        xs = x[tok]
        gu = torch._grouped_mm(xs, self.w13.transpose(1, 2), offs=offs)
        act = F.silu(gu[:, : self.I]) * gu[:, self.I:]
        y = torch._grouped_mm(act, self.w2.transpose(1, 2), offs=offs)
        out.index_add_(0, tok, y.float() * w.flatten()[order].unsqueeze(1))
        return out.to(torch.bfloat16)


def time_us(fn, reps):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3)
    ts.sort()
    return ts[len(ts) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    dev = "cuda"
    has_grouped = hasattr(torch, "_grouped_mm")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, _grouped_mm: {has_grouped}")
    out = open(args.json, "w") if args.json else None
    for s in SHAPES:
        layer = Layer(s, dev)
        note = " (bf16 weights: torch has no block-scaled fp8 grouped GEMM)" if "fp8" in s[0] else ""
        print(f"\n== {s[0]}{note}\n{'tokens':>6} {'loop_us':>10} {'grouped_us':>11} {'check':>10}")
        for n in TOKENS:
            x = (torch.rand(n, layer.h, device=dev, dtype=torch.bfloat16) - 0.5) * 2
            t_loop = time_us(lambda: layer.loop(x), args.reps)
            t_grp, check = float("nan"), ""
            if has_grouped:
                try:
                    t_grp = time_us(lambda: layer.grouped(x), args.reps)
                    a, b = layer.loop(x).float(), layer.grouped(x).float()
                    check = f"{((a - b).norm() / a.norm()).item():.1e}"
                except Exception as e:  # noqa: BLE001 - report and go on
                    check = f"err {type(e).__name__}"
            print(f"{n:>6} {t_loop:>10.1f} {t_grp:>11.1f} {check:>10}")
            if out:
                out.write(json.dumps({"shape": s[0], "tokens": n, "torch_loop_us": round(t_loop, 2),
                                      "torch_grouped_us": round(t_grp, 2), "grouped_vs_loop": check}) + "\n")
        del layer
        torch.cuda.empty_cache()
    if out:
        out.close()


if __name__ == "__main__":
    main()
