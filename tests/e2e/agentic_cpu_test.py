"""Issue 5 evidence inside the test suite: a short `peregrine bench agentic --preset cpu` run
against `peregrine serve` on the embedded model.

The cpu preset's semantics are kept (first turn ~1,500 tokens, +120 per turn, 3-5 turns, 64
tokens out, greedy, ignore_eos, a warm-up, fresh conversations per level); only the number of
conversations is scaled down so the run fits in about three minutes on the 2-core dev machine.

Checked against the benchmark's JSON and, independently, against the server's own /metrics:
  * no failed turn, every reply exactly max_tokens long (ignore_eos), finish_reason "length";
  * later turns hit the prefix cache: level KV hit rate of turns 2+ above 0.8;
  * the benchmark's token sums equal the server's counters (prompt, generated and prefix-cache
    hit tokens, warm-up included), so the client reads usage correctly;
  * each later turn's prompt holds the previous prompt plus the previous reply (the client
    really sends the actual reply back), and its cached tokens cover the previous prompt's
    full pages;
  * TTFT is measured at the first token, not at the role chunk: first turns (1,500-token
    prefill) take longer than later turns (~200 new tokens) and than any role-only chunk.
Fails (never skips) when the binary, the model or the server misbehaves.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_proc import ServerProcess  # noqa: E402

PAGE_SIZE = 16  # the server's default --page-size


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", default="2")
    ap.add_argument("--concurrency", default="1,2")
    ap.add_argument("--conversations", default="1,2")
    a = ap.parse_args()

    srv = ServerProcess(a.bin, a.model, ["-t", a.threads])
    failures = []

    def check(cond, msg):
        if not cond:
            failures.append(msg)
            print("FAIL:", msg, flush=True)

    try:
        before = srv.metrics()
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "agentic.json")
            cmd = [a.bin, "bench", "agentic", "--url", srv.base, "--preset", "cpu",
                   "--concurrency", a.concurrency, "--conversations", a.conversations,
                   "--warmup", "1", "--warmup-turns", "1", "--no-progress", "-o", out]
            t0 = time.time()
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            print(proc.stdout)
            print(proc.stderr[-3000:], file=sys.stderr)
            print(f"bench took {time.time() - t0:.1f} s", flush=True)
            if proc.returncode != 0:
                raise SystemExit(f"bench exited with {proc.returncode}")
            with open(out) as f:
                result = json.load(f)
        after = srv.metrics()
    finally:
        rc = srv.stop()
    check(rc == 0, f"server exit code {rc} after SIGTERM")

    cfg = result["config"]
    check(cfg["max_tokens"] == 64 and cfg["first_turn_tokens"] == 1500, f"not the cpu preset: {cfg}")
    levels = result["levels"]
    reqs = result["requests"]
    want_levels = [int(c) for c in a.concurrency.split(",")]
    check([l["concurrency"] for l in levels] == want_levels, "levels run")

    # No failed turns; every reply exactly 64 tokens.
    for l in levels:
        check(l["num_failed"] == 0, f"c={l['concurrency']}: {l['num_failed']} failed turns")
        check(l["num_requests"] >= 3 * l["num_conversations"], f"c={l['concurrency']}: too few turns")
        hit = l["kv_hit_rate_later_turns"]
        check(hit is not None and hit > 0.8, f"c={l['concurrency']}: later-turn KV hit rate {hit}")
    for r in reqs:
        check(r["success"], f"request failed: {r['error']}")
        check(r["completion_tokens"] == 64 and r["finish_reason"] == "length",
              f"conv {r['conversation']} turn {r['turn']}: {r['completion_tokens']} tokens, {r['finish_reason']}")

    # The client's sums equal the server's own counters (independent of the client's parsing).
    def delta(name):
        return after.get(name, 0.0) - before.get(name, 0.0)
    ok = [r for r in reqs if r["success"]]
    check(delta("peregrine_prompt_tokens_total") == sum(r["prompt_tokens"] for r in ok),
          "prompt tokens: server counter vs usage sums")
    check(delta("peregrine_generation_tokens_total") == sum(r["completion_tokens"] for r in ok),
          "generated tokens: server counter vs usage sums")
    check(delta("peregrine_prefix_cache_hit_tokens_total") == sum(r["cached_tokens"] for r in ok),
          "prefix-cache hit tokens: server counter vs usage sums")

    # Each later turn sends back the previous prompt + reply + new turn; the cache covers the
    # previous prompt's full pages (the new user/tool text adds ~120 tokens + template).
    by_conv = {}
    for r in ok:
        by_conv.setdefault(r["conversation"], []).append(r)
    for conv, turns in by_conv.items():
        turns.sort(key=lambda r: r["turn"])
        for prev, cur in zip(turns, turns[1:]):
            grow = cur["prompt_tokens"] - prev["prompt_tokens"]
            check(64 + 100 <= grow <= 64 + 200, f"conv {conv} turn {cur['turn']}: prompt grew by {grow}")
            full_pages = (prev["prompt_tokens"] // PAGE_SIZE) * PAGE_SIZE
            check(cur["cached_tokens"] >= full_pages,
                  f"conv {conv} turn {cur['turn']}: cached {cur['cached_tokens']} < {full_pages}")

    # TTFT is the first token: first turns prefill ~1,500 tokens, later turns ~200.
    meas = [r for r in ok if not r["warmup"]]
    first = [r["ttft_ms"] for r in meas if r["turn"] == 0]
    later = [r["ttft_ms"] for r in meas if r["turn"] > 0]
    check(first and later and median(first) > median(later),
          f"TTFT first turns {median(first) if first else None} ms vs later {median(later) if later else None} ms")
    for r in meas:
        check(r["ttft_ms"] >= r["first_chunk_ms"], "TTFT before the first chunk")

    for l in levels:
        print(f"c={l['concurrency']}: {l['num_requests']} turns, KV hit later turns "
              f"{l['kv_hit_rate_later_turns']:.3f}, TTFT p50 {l['ttft_ms']['p50']:.0f} ms, "
              f"TPOT mean {l['tpot_ms']['mean']:.1f} ms")
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("agentic cpu preset: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
