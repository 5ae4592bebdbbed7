#!/usr/bin/env python3
"""Served ms a generated token under the output controls a client sends, side by side in rounds
against one running server: greedy, streamed, T=0.7 top_p=0.9 / 0.95, penalties, logprobs, JSON
mode, a JSON schema (with and without a pattern), guided regexes, and n=4 choices (the
constrained ones end when their output may; the others run max_tokens with ignore_eos). Wall
time of the whole request over its completion tokens (prefill included; n=4: all choices'
tokens).

  build/cpu/src/cli/peregrine serve --port 8391 &
  python3 tools/bench/serve_output_modes.py --url http://127.0.0.1:8391 --rounds 3
Standard library only (runs on the GPU machine too).
"""
import argparse
import http.client
import json
import time
import urllib.parse

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string"}, "age": {"type": "integer"},
    "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 30}},
    "bio": {"type": "string", "maxLength": 400}}, "required": ["name", "age", "hobbies", "bio"]}

# The bio must be one line of at least one non-space character (a permissive pattern: the mask
# takes the regex class index).
SCHEMA_PATTERN = {"type": "object", "properties": {
    "name": {"type": "string", "pattern": "^[A-Z][a-z]+( [A-Z][a-z]+)*$"},
    "bio": {"type": "string", "pattern": "^[^\\n]*\\S[^\\n]*$", "maxLength": 400}}, "required": ["name", "bio"]}

MODES = {
    "greedy": dict(temperature=0),
    "greedy, streamed": dict(temperature=0, stream=True),
    "T=0.7 top_p=0.9": dict(temperature=0.7, top_p=0.9, seed=1),
    "T=1 top_p=0.95": dict(temperature=1.0, top_p=0.95, seed=1),
    "penalties": dict(temperature=0.7, top_p=0.95, presence_penalty=0.5, frequency_penalty=0.3, seed=1),
    "logprobs (5)": dict(temperature=0, logprobs=True, top_logprobs=5),
    "JSON mode": dict(temperature=0, response_format={"type": "json_object"}, constrained=True),
    "JSON schema": dict(temperature=0, constrained=True,
                        response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}}),
    "schema + pattern": dict(temperature=0, constrained=True, response_format={
        "type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA_PATTERN}}),
    "regex [^\\n]{400}": dict(temperature=0, constrained=True, guided_regex="[^\\n]{400}"),
    "regex \\d{300}": dict(temperature=0, constrained=True, guided_regex="\\d{300}"),
    "n=4, T=0.8": dict(temperature=0.8, seed=1, n=4),
}


def post(url, body):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read().decode()
    conn.close()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {data[:300]}")
    return data


def run(url, model, max_tokens, kw):
    kw = dict(kw)
    constrained = kw.pop("constrained", False)
    body = {"model": model, "max_tokens": max_tokens, **kw,
            "messages": [{"role": "user", "content": "Write a long JSON profile of a fictional person with a long "
                          "bio." if constrained else "Write a long story about a lighthouse keeper."}]}
    if not constrained:
        body["ignore_eos"] = True
    if body.get("stream"):
        body["stream_options"] = {"include_usage": True}
    t = time.time()
    data = post(url, body)
    dt = time.time() - t
    if body.get("stream"):
        n = 0
        for line in data.splitlines():
            if line.startswith("data: {"):
                usage = json.loads(line[6:]).get("usage")
                if usage:
                    n = usage["completion_tokens"]
    else:
        n = json.loads(data)["usage"]["completion_tokens"]
    return dt * 1000 / max(n, 1), n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8391")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=200)
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    conn.request("GET", "/v1/models")
    model = json.loads(conn.getresponse().read())["data"][0]["id"]
    conn.close()
    for rnd in range(a.rounds):
        for name, kw in MODES.items():
            ms, n = run(a.url, model, a.max_tokens, kw)
            print(f"round {rnd}  {name:18s} {ms:6.2f} ms/token over {n} tokens", flush=True)


if __name__ == "__main__":
    main()
