#!/usr/bin/env python3
"""Speculative decoding (prompt-lookup drafts) side by side with plain decoding, batch 1: the
same `peregrine serve` binary started with and without --speculative-config, alternated per
round, on chat tasks whose answers copy their context (a coding agent's edits) and on tasks
whose answers do not. Per task: decode tokens/s (completion tokens - 1 over the time from the
first streamed text to the last), the ratio,
the drafts' acceptance (from /metrics), and whether both runs gave the same text (greedy: they
must).

  python3 tools/bench/spec_decode.py --peregrine build/cpu/src/cli/peregrine \\
      --spec '{"method": "ngram", "num_speculative_tokens": 4}' --rounds 2
Standard library only.
"""
import argparse
import http.client
import json
import re
import statistics
import subprocess
import time

CODE = '''import json
import os


def load_config(path):
    with open(path) as f:
        return json.load(f)


def save_config(path, config):
    with open(path, "w") as f:
        json.dump(config, f, indent=2)


def merge_configs(base, override):
    result = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merge_configs(result[key], value)
        else:
            result[key] = value
    return result


def config_path(name):
    return os.path.join(os.path.expanduser("~"), ".config", name + ".json")
'''

TOOL_OUTPUT = json.dumps({"files": [{"path": f"src/module_{i}.py", "lines": 100 + 7 * i,
                                     "status": "modified" if i % 3 else "clean"} for i in range(12)]},
                         indent=1)

TASKS = [
    ("edit", "Here is a Python file:\n\n" + CODE + "\nRename the function merge_configs to "
     "deep_merge everywhere. Output the complete file."),
    ("quote", "A tool returned this JSON:\n\n" + TOOL_OUTPUT + "\n\nRepeat the JSON exactly, "
     "with the status of src/module_4.py set to clean."),
    ("explain", "Explain in a few sentences why the sky is blue."),
    ("story", "Write a short story about a lighthouse keeper who finds a message in a bottle."),
]


class Server:
    def __init__(self, binary, port, extra):
        self.port = port
        self.proc = subprocess.Popen([binary, "serve", "--port", str(port)] + extra,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(600):
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("server did not start")

    def metrics(self):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
        out = {}
        for name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
            m = re.search(rf"^peregrine_spec_decode_{name}_total\S* (\S+)$", text, re.M)
            out[name] = float(m.group(1)) if m else 0.0
        return out

    def chat(self, prompt, max_tokens):
        body = json.dumps({"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
                           "temperature": 0, "stream": True,
                           "stream_options": {"include_usage": True}})
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        t0 = time.time()
        c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        text, first, ntok = "", None, 0
        for line in r:
            line = line.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            d = json.loads(line[6:])
            if d.get("choices") and d["choices"][0]["delta"].get("content"):
                if first is None:
                    first = time.time()
                text += d["choices"][0]["delta"]["content"]
                end = time.time()
            if d.get("usage"):
                ntok = d["usage"]["completion_tokens"]
        return text, ntok, first - t0, end - first

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peregrine", default="build/cpu/src/cli/peregrine")
    ap.add_argument("--spec", default='{"method": "ngram", "num_speculative_tokens": 4}')
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--port", type=int, default=8461)
    ap.add_argument("--extra", default="", help="more serve flags for both runs")
    a = ap.parse_args()
    extra = a.extra.split()
    configs = [("plain", extra), ("spec", extra + ["--speculative-config", a.spec])]
    rates = {(n, t): [] for n, _ in configs for t, _ in TASKS}
    texts = {}
    accept = {}
    for rnd in range(a.rounds):
        for name, flags in (configs if rnd % 2 == 0 else configs[::-1]):
            s = Server(a.peregrine, a.port, flags)
            try:
                s.chat("Hi", 4)  # warm-up
                for task, prompt in TASKS:
                    m0 = s.metrics()
                    text, ntok, ttft, decode_s = s.chat(prompt, a.max_tokens)
                    m1 = s.metrics()
                    texts.setdefault((name, task), text)
                    if texts[(name, task)] != text:
                        print(f"warning: {name}/{task} text changed between rounds")
                    rates[(name, task)].append((ntok - 1) / decode_s if decode_s > 0 else 0.0)
                    d = {k: m1[k] - m0[k] for k in m1}
                    if name == "spec":
                        accept.setdefault(task, []).append(d)
                    print(f"round {rnd} {name:5s} {task:8s}: {ntok:4d} tokens, TTFT {ttft * 1e3:7.1f} ms, "
                          f"decode {rates[(name, task)][-1]:6.1f} tok/s"
                          + (f", drafts {d['num_accepted_tokens']:.0f}/{d['num_draft_tokens']:.0f} accepted "
                             f"over {d['num_drafts']:.0f} steps" if name == "spec" else ""), flush=True)
            finally:
                s.stop()
    print(f"\n| task | plain tok/s | spec tok/s | ratio | accepted / drafted | same text |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for task, _ in TASKS:
        p = statistics.median(rates[("plain", task)])
        q = statistics.median(rates[("spec", task)])
        acc = sum(d["num_accepted_tokens"] for d in accept[task])
        dr = sum(d["num_draft_tokens"] for d in accept[task])
        same = texts[("plain", task)] == texts[("spec", task)]
        print(f"| {task} | {p:.1f} | {q:.1f} | {q / p:.2f}x | {acc:.0f} / {dr:.0f} "
              f"({(acc / dr if dr else 0) * 100:.0f} %) | {'yes' if same else 'NO'} |")


if __name__ == "__main__":
    main()
