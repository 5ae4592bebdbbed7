#!/usr/bin/env python3
"""N concurrent chat requests on one long prompt (an agent's parallel calls on one context)
against a running server: wall time and each request's cached prompt tokens.

  build/cpu/src/cli/peregrine serve --port 8393 &
  python3 tools/bench/shared_prefix_fanout.py --url http://127.0.0.1:8393 -n 4
Standard library only.
"""
import argparse
import concurrent.futures as cf
import http.client
import json
import time
import urllib.parse


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8393")
    ap.add_argument("-n", type=int, default=4)
    ap.add_argument("--lines", type=int, default=120, help="prompt size (~25 tokens a line)")
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    text = " ".join(f"line {i}: the agent read file src/module_{i}.cpp and found {i * 7} warnings."
                    for i in range(a.lines))
    body = json.dumps({"messages": [{"role": "system", "content": text}, {"role": "user", "content": "Summarize."}],
                       "max_tokens": 4, "temperature": 0})

    def call(_):
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
        t = time.time()
        c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        r = json.loads(c.getresponse().read())
        return time.time() - t, r["usage"]["prompt_tokens"], r["usage"]["prompt_tokens_details"]["cached_tokens"]

    t0 = time.time()
    with cf.ThreadPoolExecutor(a.n) as ex:
        res = list(ex.map(call, range(a.n)))
    print(f"{a.label}{a.n} concurrent requests, one {res[0][1]}-token prompt: wall {time.time() - t0:.2f} s; "
          f"per request {', '.join(f'{dt:.2f} s ({c} cached)' for dt, _, c in res)}")


if __name__ == "__main__":
    main()
