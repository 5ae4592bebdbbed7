"""End-to-end check of `peregrine serve --device cuda` (run on the GPU machine by
tools/gpu/serve.sh): starts the real binary, sends OpenAI chat / completions requests,
streaming and not, and checks the answers' structure and consistency:
  * non-streamed chat and completions: HTTP 200, one choice, text, usage with exactly
    max_tokens completion tokens (ignore_eos) and prompt tokens > 0;
  * streamed chat: SSE chunks end with [DONE]; the deltas joined equal the non-streamed
    greedy answer of the same request (same engine, temperature 0);
  * seeded sampling: the same seed gives the same text twice, on the device sampler;
  * concurrent requests: all complete, greedy ones equal the answer given alone;
  * an over-long prompt is rejected with HTTP 400 and the server keeps serving;
  * /metrics counts the generated tokens; SIGTERM drains and exits 0.
Usage: gpu_serve_check.py BINARY MODEL [serve args...]"""
import concurrent.futures
import json
import os
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from server_proc import ServerProcess  # noqa: E402

FAILED = []


def check(cond, what):
    print(("PASS " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILED.append(what)


# A top-2 logprob gap (nats) below which bf16 noise may flip the greedy choice.
NEAR_TIE = 0.1


def same_or_near_tie(ref, got, what):
    """ref: logprobs content (token, top_logprobs) of one answer; got: another answer's tokens."""
    toks = [c["token"] for c in ref]
    d = 0
    while d < len(toks) and d < len(got) and toks[d] == got[d]:
        d += 1
    if d == len(toks) and d == len(got):
        check(True, f"{what}: {d} tokens identical")
        return
    if d >= len(toks) or d >= len(got):
        check(False, f"{what}: lengths {len(toks)} / {len(got)}")
        return
    top = ref[d]["top_logprobs"]
    gap = top[0]["logprob"] - top[1]["logprob"]
    check(gap < NEAR_TIE, f"{what}: identical for {d} tokens, then {toks[d]!r} vs {got[d]!r} at a "
                          f"top-2 gap of {gap:.4f} nats (near-tie < {NEAR_TIE})")


def post(base, path, body, timeout=120):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def stream(base, path, body, timeout=120):
    body = dict(body, stream=True)
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    chunks, done = [], False
    with urllib.request.urlopen(req, timeout=timeout) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                break
            chunks.append(json.loads(data))
    return chunks, done


def chat(content, **kw):
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": 24,
            "temperature": 0, "ignore_eos": True}
    body.update(kw)
    return body


def main():
    binary, model, *extra = sys.argv[1:]
    t0 = time.time()
    srv = ServerProcess(binary, model, extra)
    if os.environ.get("SERVE_PID_FILE"):  # lets the caller stop a server left behind by a timeout
        with open(os.environ["SERVE_PID_FILE"], "w") as f:
            f.write(str(srv.proc.pid))
    print(f"server healthy after {time.time() - t0:.1f} s on {srv.base}", flush=True)
    base = srv.base
    try:
        with urllib.request.urlopen(base + "/v1/models", timeout=10) as r:
            check(r.status == 200 and json.loads(r.read().decode())["data"], "GET /v1/models lists the model")

        # Non-streamed chat.
        st, text = post(base, "/v1/chat/completions", chat("Write a haiku about GPUs."))
        check(st == 200, f"chat HTTP {st}")
        r = json.loads(text)
        msg = r["choices"][0]["message"]["content"]
        check(isinstance(msg, str) and len(msg) > 0, f"chat answer is text ({len(msg)} chars)")
        check(r["usage"]["completion_tokens"] == 24, f"chat usage completion_tokens {r['usage']['completion_tokens']} == 24")
        check(r["usage"]["prompt_tokens"] > 5, f"chat usage prompt_tokens {r['usage']['prompt_tokens']}")
        check(r["choices"][0]["finish_reason"] == "length", f"finish_reason {r['choices'][0]['finish_reason']}")

        # Streamed chat of the same request: the same greedy tokens, except at a near-tie (the
        # second request reuses the first's prompt pages from the prefix cache, a different
        # bf16 computation; random weights give flat logits, so near-ties are common). Both
        # ask for top-2 logprobs: the first difference must be where the top-2 gap < NEAR_TIE.
        lp_req = chat("Write a haiku about GPUs.", logprobs=True, top_logprobs=2)
        st, text = post(base, "/v1/chat/completions", lp_req)
        ref = json.loads(text)["choices"][0]["logprobs"]["content"]
        chunks, done = stream(base, "/v1/chat/completions", lp_req)
        got = [c["token"] for ch in chunks if ch.get("choices") and ch["choices"][0].get("logprobs")
               for c in ch["choices"][0]["logprobs"]["content"]]
        check(done, f"stream ends with [DONE] ({len(chunks)} chunks)")
        same_or_near_tie(ref, got, "streamed greedy tokens vs non-streamed")
        chunks, done = stream(base, "/v1/chat/completions", chat("Write a haiku about GPUs."))
        joined = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))
        check(done and len(joined) > 0, f"streamed chat without logprobs: {len(chunks)} chunks, text")

        # Completions endpoint, non-streamed and streamed.
        comp = {"prompt": "The capital of France is", "max_tokens": 16, "temperature": 0, "ignore_eos": True}
        st, text = post(base, "/v1/completions", comp)
        check(st == 200, f"completions HTTP {st}")
        c1 = json.loads(text)
        check(c1["usage"]["completion_tokens"] == 16, "completions usage completion_tokens == 16")
        chunks, done = stream(base, "/v1/completions", comp)
        joined = "".join(c["choices"][0].get("text") or "" for c in chunks if c.get("choices"))
        check(done and joined == c1["choices"][0]["text"], "streamed completion == non-streamed")

        # Seeded sampling on the device: the same seed, the same text.
        seeded = chat("Tell me a story.", temperature=0.8, top_p=0.95, seed=42, max_tokens=32)
        a = json.loads(post(base, "/v1/chat/completions", seeded)[1])["choices"][0]["message"]["content"]
        b = json.loads(post(base, "/v1/chat/completions", seeded)[1])["choices"][0]["message"]["content"]
        check(a == b and len(a) > 0, "seeded sampling repeats")
        pen = dict(seeded, frequency_penalty=0.5, repetition_penalty=1.2)
        a = json.loads(post(base, "/v1/chat/completions", pen)[1])["choices"][0]["message"]["content"]
        b = json.loads(post(base, "/v1/chat/completions", pen)[1])["choices"][0]["message"]["content"]
        check(a == b and len(a) > 0, "seeded sampling with penalties repeats")
        st, text = post(base, "/v1/chat/completions", chat("Hi", logprobs=True, top_logprobs=2, max_tokens=4))
        lp = json.loads(text)["choices"][0].get("logprobs") if st == 200 else None
        check(st == 200 and lp and len(lp["content"]) == 4 and len(lp["content"][0]["top_logprobs"]) == 2,
              "top_logprobs=2 answered (host path)")

        # Concurrent requests (decode batches through the graphs, mixed prefill steps): all
        # complete with max_tokens tokens; greedy tokens as given alone except at near-ties.
        prompts = [f"Question {i}: " + "why is the sky blue? " * (1 + 7 * i) for i in range(12)]
        alone = [json.loads(post(base, "/v1/chat/completions", chat(p, logprobs=True, top_logprobs=2))[1])
                 ["choices"][0]["logprobs"]["content"] for p in prompts[:3]]
        with concurrent.futures.ThreadPoolExecutor(12) as ex:
            outs = list(ex.map(lambda p: post(base, "/v1/chat/completions", chat(p, logprobs=True, top_logprobs=2)),
                               prompts))
        check(all(s == 200 for s, _ in outs), "12 concurrent chats: all HTTP 200")
        check(all(json.loads(t)["usage"]["completion_tokens"] == 24 for _, t in outs),
              "12 concurrent chats: 24 tokens each")
        for i in range(3):
            got = [c["token"] for c in json.loads(outs[i][1])["choices"][0]["logprobs"]["content"]]
            same_or_near_tie(alone[i], got, f"concurrent request {i} vs alone")

        # Over-long prompt: 400, and the server still serves.
        st, text = post(base, "/v1/completions", {"prompt": "hello " * 40000, "max_tokens": 4})
        check(st == 400, f"over-long prompt rejected with HTTP {st}: {text[:160]}")
        st, _ = post(base, "/v1/completions", comp)
        check(st == 200, "server serves after the rejection")

        m = srv.metrics()
        gen = [v for k, v in m.items() if "generation_tokens" in k or "generated_tokens" in k]
        check(gen and max(gen) > 100, f"/metrics counts generated tokens ({gen[:2]})")
    finally:
        rc = srv.stop()
        out = srv.proc.stdout.read()
        print("---- server log (head / tail) ----")
        lines = out.splitlines()
        print("\n".join(lines[:25] + ["..."] + lines[-10:]))
        check(rc == 0, f"SIGTERM: server exit code {rc}")
    print("FAILED: " + "; ".join(FAILED) if FAILED else "ALL PASSED", flush=True)
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
