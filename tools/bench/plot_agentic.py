#!/usr/bin/env python3
"""Plots of a `peregrine bench agentic` result JSON (needs matplotlib: pip install matplotlib).

  python3 tools/bench/plot_agentic.py bench_agentic.json --out-dir plots/ [--label ours]
        [--compare other.json --compare-label llama.cpp]

Writes, as in TokenSpeed's agentic figures:
  per_user_vs_throughput.png  per-user decode speed (tokens/s) against total throughput per GPU
                              (tokens/s), one point per concurrency level, annotated with it
  ttft_by_concurrency.png     TTFT mean / p50 / p99 by concurrency, first turns versus later turns
"""
import argparse
import json
import os
import sys


def load(path):
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if data.get("benchmark") != "agentic" or "levels" not in data:
        sys.exit(f"{path}: not a bench agentic result")
    return data


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("result")
    ap.add_argument("--out-dir", default=".")
    ap.add_argument("--label", default=None)
    ap.add_argument("--compare", action="append", default=[], help="more result JSONs to overlay")
    ap.add_argument("--compare-label", action="append", default=[])
    args = ap.parse_args()

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [(args.label or load(args.result)["config"].get("model", "run"), load(args.result))]
    for i, path in enumerate(args.compare):
        label = args.compare_label[i] if i < len(args.compare_label) else os.path.basename(path)
        runs.append((label, load(path)))
    os.makedirs(args.out_dir, exist_ok=True)

    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    for label, data in runs:
        levels = data["levels"]
        xs = [l["throughput_per_gpu_tps"] for l in levels]
        ys = [l["per_user_tps"] for l in levels]
        ax.plot(xs, ys, marker="o", label=label)
        for l, x, y in zip(levels, xs, ys):
            ax.annotate(f"c={l['concurrency']}", (x, y), textcoords="offset points", xytext=(4, 4),
                        fontsize=8)
    cfg = runs[0][1]["config"]
    ax.set_xlabel("total throughput per GPU (tokens/s)")
    ax.set_ylabel("per-user decode speed (tokens/s)")
    ax.set_title(f"agentic replay: {cfg.get('preset') or 'custom'} workload, "
                 f"{cfg.get('max_tokens')} out/turn")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    out1 = os.path.join(args.out_dir, "per_user_vs_throughput.png")
    fig.savefig(out1, dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    for label, data in runs:
        levels = data["levels"]
        cs = [l["concurrency"] for l in levels]
        ax.plot(cs, [l["ttft_ms"]["mean"] for l in levels], marker="o", label=f"{label} mean")
        ax.plot(cs, [l["ttft_ms"]["p99"] for l in levels], marker="^", linestyle=":",
                label=f"{label} p99")
        ax.plot(cs, [l["ttft_first_turn_ms"]["mean"] for l in levels], marker="s", linestyle="--",
                label=f"{label} first turns (mean)")
        ax.plot(cs, [l["ttft_later_turns_ms"]["mean"] for l in levels], marker="x",
                linestyle="-.", label=f"{label} later turns (mean)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({l["concurrency"] for _, d in runs for l in d["levels"]}))
    ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.set_xlabel("concurrency (conversations in flight)")
    ax.set_ylabel("TTFT (ms)")
    ax.set_title("time to first token by concurrency")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out2 = os.path.join(args.out_dir, "ttft_by_concurrency.png")
    fig.savefig(out2, dpi=120)
    plt.close(fig)
    print(out1)
    print(out2)


if __name__ == "__main__":
    main()
