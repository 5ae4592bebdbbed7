#!/usr/bin/env bash
# Peregrine against llama.cpp on one GGUF, in rounds: each round is one
# `peregrine bench decode ... -r 1 --llama-bench LLAMA_BENCH` (both engines within the same
# minute), and the medians (with min / max) of each engine's tokens/s and of the per-round
# ratios are printed. Rounds make the comparison hold on a shared VM whose speed drifts by
# tens of percent between minutes (docs/PERF.md, "Session 30").
#
# usage: tools/bench/peer_rounds.sh ROUNDS MODEL THREADS PROMPT_TOKENS GEN_TOKENS
# env:   PEREGRINE (default build/cpu/src/cli/peregrine),
#        LLAMA_BENCH (default /work/peers/llama.cpp/build/bin/llama-bench, tools/bench/build_llamacpp.sh)
set -euo pipefail
PEREGRINE="${PEREGRINE:-build/cpu/src/cli/peregrine}"
LLAMA_BENCH="${LLAMA_BENCH:-/work/peers/llama.cpp/build/bin/llama-bench}"
python3 - "$PEREGRINE" "$LLAMA_BENCH" "$@" <<'PY'
import statistics as st, subprocess, sys
peregrine, llama_bench, rounds, model, threads, p, n = sys.argv[1:8]
res = {"pp": [], "tg": []}
for _ in range(int(rounds)):
    out = subprocess.run([peregrine, "bench", "decode", "-m", model, "-t", threads, "-p", p, "-n", n,
                          "-r", "1", "--llama-bench", llama_bench],
                         capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        f = line.split()
        if f and f[0][:2] in res and len(f) >= 6:
            res[f[0][:2]].append((float(f[1]), float(f[4])))
for k, v in res.items():
    if not v:
        continue
    ours, theirs, ratio = [a for a, _ in v], [b for _, b in v], [a / b for a, b in v]
    size = p if k == "pp" else n
    print(f"{k}{size} t={threads}: peregrine median {st.median(ours):.1f} (min {min(ours):.1f} max {max(ours):.1f}); "
          f"llama.cpp median {st.median(theirs):.1f} (min {min(theirs):.1f} max {max(theirs):.1f}); "
          f"ratio median {st.median(ratio):.2f} (min {min(ratio):.2f} max {max(ratio):.2f}), {len(ratio)} rounds")
PY
