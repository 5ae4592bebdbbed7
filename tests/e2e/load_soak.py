#!/usr/bin/env python3
"""Bounded load and soak test of `peregrine serve` on loopback.

N requests at a fixed concurrency, a mix of streamed / non-streamed chat and completions, and
random client cancels (the socket is closed mid-response). Asserts: the server never dies,
every response that completes is well-formed (JSON shape, SSE ends with [DONE]), KV pages
return to their idle baseline, no request stays in flight, and resident memory stays flat
(the second half of the run adds < 15% RSS over the first half).
"""
import argparse
import concurrent.futures as cf
import json
import random
import socket
import sys
import time

from server_proc import ServerProcess


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def one_request(port, i, rng, recv_timeout):
    """Returns (kind, why, seconds, q): kind is ok / cancelled / error; q the drawn request."""
    q = {"stream": rng.random() < 0.6, "chat": rng.random() < 0.7,
         "cancel_after": rng.choice([None, None, None, 1, 200, 600]),  # bytes before closing
         "max_tokens": rng.randint(1, 48)}
    t0 = time.time()
    kind, why = exchange(port, i, rng, q, recv_timeout)
    return kind, why, time.time() - t0, q


def exchange(port, i, rng, q, recv_timeout):
    stream, chat, cancel_after, max_tokens = q["stream"], q["chat"], q["cancel_after"], q["max_tokens"]
    if chat:
        path = "/v1/chat/completions"
        body = {"messages": [{"role": "user", "content": f"Request {i}: tell me about {rng.choice(['cats', 'rivers', 'tea', 'stars'])}."}]}
    else:
        path = "/v1/completions"
        body = {"prompt": f"Item {i}: once upon a time"}
    body.update({"max_tokens": max_tokens, "stream": stream, "temperature": rng.choice([0, 0.7]), "seed": i})
    data = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=recv_timeout)
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
              f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    buf = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
        if cancel_after is not None and len(buf) >= cancel_after:
            s.close()
            return "cancelled", None
    s.close()
    head, _, payload = buf.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    if status != 200:
        return "error", f"status {status}: {payload[:200]!r}"
    if stream:
        # de-chunk
        text, rest = b"", payload
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            n = int(size_line, 16)
            if n == 0:
                break
            text, rest = text + rest[:n], rest[n + 2:]
        events = [e[6:] for e in text.decode().split("\n\n") if e.startswith("data: ")]
        if not events or events[-1] != "[DONE]":
            return "error", "stream without [DONE]"
        for e in events[:-1]:
            j = json.loads(e)
            if "choices" not in j or j["object"] not in ("chat.completion.chunk", "text_completion"):
                return "error", f"bad chunk {e[:200]}"
        return "ok", None
    j = json.loads(payload)
    ok = j.get("object") in ("chat.completion", "text_completion") and j["usage"]["completion_tokens"] <= max_tokens
    return ("ok", None) if ok else ("error", f"bad body {payload[:200]!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--serve-args", default="", help="more `peregrine serve` flags, e.g. --speculative-config ...")
    ap.add_argument("--recv-timeout", type=float, default=600,
                    help="seconds a client waits for the next bytes (a non-streamed reply sends "
                         "nothing until it is complete) before calling the request lost")
    a = ap.parse_args()
    srv = ServerProcess(a.bin, a.model, a.serve_args.split())
    failures = []
    try:
        base_free = srv.metrics()['peregrine_kv_pages{state="free"}']
        rng = random.Random(1234)
        seeds = [rng.random() for _ in range(a.requests)]
        counts = {"ok": 0, "cancelled": 0, "error": 0}
        rss = []
        latency = {}  # "stream" / "whole" -> [(seconds, max_tokens)] of completed replies
        t0 = time.time()
        with cf.ThreadPoolExecutor(a.concurrency) as ex:
            futs = [ex.submit(one_request, srv.port, i, random.Random(seeds[i]), a.recv_timeout)
                    for i in range(a.requests)]
            sample_every = max(1, a.requests // 20)
            for k, f in enumerate(cf.as_completed(futs)):
                try:
                    kind, why, secs, q = f.result()
                except OSError as e:  # socket.timeout included: the request was lost
                    kind, why, secs, q = "error", f"request lost: {e!r}", a.recv_timeout, None
                counts[kind] += 1
                if why:
                    failures.append(why)
                if kind == "ok":
                    latency.setdefault("stream" if q["stream"] else "whole", []).append((secs, q["max_tokens"]))
                if k % sample_every == 0:
                    rss.append(rss_kib(srv.proc.pid))
        elapsed = time.time() - t0
        print(f"{a.requests} requests in {elapsed:.1f} s: {counts}; RSS samples (KiB) {rss}")
        for mode, xs in sorted(latency.items()):
            secs = sorted(x[0] for x in xs)
            worst = max(xs)
            print(f"  {mode} replies: {len(xs)}, latency p50 {secs[len(secs) // 2]:.1f} s, "
                  f"p95 {secs[int(len(secs) * 0.95)]:.1f} s, max {worst[0]:.1f} s "
                  f"(max_tokens {worst[1]})")
        ok = False
        for _ in range(100):
            m = srv.metrics()
            if m['peregrine_kv_pages{state="free"}'] == base_free and m["peregrine_http_requests_in_flight"] == 0:
                ok = True
                break
            time.sleep(0.1)
        if not ok:
            failures.append("KV pages / in-flight requests did not return to baseline")
        half = len(rss) // 2
        if half and max(rss[half:]) > 1.15 * max(rss[:half]):
            failures.append(f"memory grew: {rss}")
        if srv.proc.poll() is not None:
            failures.append("server died")
    finally:
        code = srv.stop()
    if code != 0:
        failures.append(f"exit code {code} after SIGTERM")
    for f in failures[:20]:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
