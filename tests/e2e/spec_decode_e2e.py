#!/usr/bin/env python3
"""End-to-end: `peregrine serve --speculative-config ...` (prompt-lookup drafts) against the
same server without it, with the real openai client. Greedy and seeded outputs must be the
same text and token counts, streamed or not, with logprobs equal; /metrics must show drafts
accepted; a bad --speculative-config must stop the server at start with a message naming the
problem. Run: see tests/e2e/CMakeLists.txt.
"""
import argparse
import subprocess
import sys

import openai  # installed by scripts/lib/setup.sh; a missing client is a failure, not a skip

from server_proc import ServerProcess

FAILURES = []
SPEC = '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2}'
CODE = ("def area(w, h):\n    return w * h\n\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n\n\n"
        "def describe(w, h):\n    return f'{w}x{h}: area {area(w, h)}, perimeter {perimeter(w, h)}'\n")
PROMPTS = [
    "Here is a file:\n\n" + CODE + "\nRename the parameter w to width everywhere and output the whole file.",
    "Repeat exactly: alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu.",
    "Name three colours.",
]


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILURES.append(what)


def run_all(client):
    out = []
    for p in PROMPTS:
        msgs = [{"role": "user", "content": p}]
        r = client.chat.completions.create(model="m", messages=msgs, max_tokens=96, temperature=0,
                                           logprobs=True, top_logprobs=2)
        lp = [(t.token, t.logprob) for t in r.choices[0].logprobs.content]
        s = client.chat.completions.create(model="m", messages=msgs, max_tokens=96, temperature=0.8,
                                           seed=5, stream=True, stream_options={"include_usage": True})
        parts, usage = [], None
        for chunk in s:
            usage = chunk.usage or usage
            for c in chunk.choices:
                parts.append(c.delta.content or "")
        out.append((r.choices[0].message.content, r.usage.completion_tokens, r.choices[0].finish_reason,
                    lp, "".join(parts), usage.completion_tokens))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    a = ap.parse_args()
    results, metrics = {}, {}
    for name, extra in (("plain", []), ("spec", ["--speculative-config", SPEC])):
        srv = ServerProcess(a.bin, a.model, ["--served-model-name", "m"] + extra)
        try:
            client = openai.OpenAI(base_url=srv.base + "/v1", api_key="none", max_retries=0)
            results[name] = run_all(client)
            metrics[name] = srv.metrics()
        finally:
            check(srv.stop() == 0, f"{name} server drains and exits 0")
    for i, (plain, spec) in enumerate(zip(results["plain"], results["spec"])):
        check(spec[0] == plain[0] and spec[1] == plain[1] and spec[2] == plain[2],
              f"prompt {i}: greedy text, token count and finish reason equal ({spec[1]} tokens)")
        check(spec[3] == plain[3], f"prompt {i}: greedy logprobs equal")
        check(spec[4] == plain[4] and spec[5] == plain[5], f"prompt {i}: seeded streamed text equal")
    m = metrics["spec"]
    accepted = m.get("peregrine_spec_decode_num_accepted_tokens_total", 0)
    drafted = m.get("peregrine_spec_decode_num_draft_tokens_total", 0)
    check(accepted > 0 and drafted >= accepted, f"/metrics: {accepted:.0f} of {drafted:.0f} draft tokens accepted")
    check(metrics["plain"].get("peregrine_spec_decode_num_draft_tokens_total", 0) == 0, "no drafts without the flag")
    for bad, words in (('{"method": "eagle3", "num_speculative_tokens": 2}', "eagle3"),
                       ('{"method": "ngram", "num_speculative_tokens": 2, "n_gram": 3}', "n_gram"),
                       ('{"method": "ngram"}', "num_speculative_tokens"), ("{oops", "not JSON")):
        p = subprocess.run([a.bin, "serve", "--model", a.model, "--port", "0", "--speculative-config", bad],
                           capture_output=True, text=True, timeout=120)
        check(p.returncode != 0 and words in p.stdout + p.stderr,
              f"--speculative-config {bad!r} refused at start, naming {words!r}")
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)")
        sys.exit(1)
    print("all passed")


if __name__ == "__main__":
    main()
