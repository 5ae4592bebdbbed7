#!/usr/bin/env python3
"""A small OpenAI-compatible server for testing the benchmark client (CI peer).

Streams chat completions as SSE over HTTP/1.1 chunked encoding, cutting every event into two
HTTP chunks at an arbitrary byte so the client must reassemble them. Simulates:
  * a tokenizer (runs of letters, single digits, runs of spaces, any other single character),
  * a prefix cache: cached_tokens = longest common token prefix with any earlier prompt,
    rounded down to 16-token pages, reported in usage.prompt_tokens_details.cached_tokens,
  * timing: the first chunk after --ttft-ms, then one token every --tpot-ms.
A message containing PLEASE_FAIL gets HTTP 500. GET /debug/requests returns every chat request
with the reply sent; GET /debug/stats the request count and the peak number in flight.
Prints "PORT <n>" on stdout once listening.
"""
import argparse
import json
import random
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN_RE = re.compile(r"[A-Za-z]+|[0-9]| +|.", re.DOTALL)
PAGE = 16


def tokenize(text):
    return TOKEN_RE.findall(text)


def render_prompt(messages):
    return "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages) + "<|assistant|>\n"


class State:
    def __init__(self):
        self.lock = threading.Lock()
        self.prompts = []  # token lists of earlier prompts
        self.log = []
        self.in_flight = 0
        self.peak_in_flight = 0
        self.num_chat = 0


def make_handler(args, state):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def send_json(self, code, obj):
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def read_json(self):
            n = int(self.headers.get("Content-Length", "0"))
            return json.loads(self.rfile.read(n) or b"{}")

        def do_GET(self):
            if self.path == "/v1/models":
                self.send_json(200, {"object": "list", "data": [{"id": "fake-model"}]})
            elif self.path == "/debug/requests":
                with state.lock:
                    self.send_json(200, state.log)
            elif self.path == "/debug/stats":
                with state.lock:
                    self.send_json(200, {"num_chat": state.num_chat,
                                         "peak_in_flight": state.peak_in_flight})
            else:
                self.send_json(404, {"error": "not found"})

        def do_POST(self):
            body = self.read_json()
            if self.path == "/tokenize":
                return self.tokenize(body)
            if self.path == "/v1/chat/completions":
                return self.chat(body)
            self.send_json(404, {"error": "not found"})

        def tokenize(self, body):
            if args.tokenize == "vllm" and "prompt" in body:
                toks = tokenize(body["prompt"])
                return self.send_json(200, {"count": len(toks), "tokens": list(range(len(toks))),
                                            "max_model_len": 1 << 20})
            if args.tokenize == "llama" and "content" in body:
                return self.send_json(200, {"tokens": list(range(len(tokenize(body["content"]))))})
            self.send_json(400 if args.tokenize != "none" else 404, {"error": "bad tokenize"})

        def write_chunk(self, data):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def send_event(self, obj, rng):
            raw = ("data: " + (obj if isinstance(obj, str) else json.dumps(obj)) + "\n\n").encode()
            cut = rng.randint(1, len(raw) - 1)
            self.write_chunk(raw[:cut])
            self.write_chunk(raw[cut:])

        def chat(self, body):
            messages = body.get("messages", [])
            if any("PLEASE_FAIL" in m.get("content", "") for m in messages):
                with state.lock:
                    state.num_chat += 1
                    state.log.append({"request": body, "reply": None})
                return self.send_json(500, {"error": {"message": "injected failure"}})
            prompt = tokenize(render_prompt(messages))
            with state.lock:
                state.num_chat += 1
                state.in_flight += 1
                state.peak_in_flight = max(state.peak_in_flight, state.in_flight)
                best = 0
                for old in state.prompts:
                    n = 0
                    for a, b in zip(old, prompt):
                        if a != b:
                            break
                        n += 1
                    best = max(best, n)
                state.prompts.append(prompt)
            cached = best // PAGE * PAGE
            max_tokens = int(body.get("max_tokens", 16))
            rng = random.Random(len(prompt))
            words = [f" w{rng.randint(0, 99)}" for _ in range(max_tokens)]
            counted = False
            try:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                time.sleep(args.ttft_ms / 1000.0)
                base = {"id": "x", "object": "chat.completion.chunk", "model": "fake-model"}
                self.send_event({**base, "choices": [{"index": 0, "delta": {"role": "assistant"},
                                                      "finish_reason": None}]}, rng)
                for i, w in enumerate(words):
                    if i > 0:
                        time.sleep(args.tpot_ms / 1000.0)
                    self.send_event({**base, "choices": [{"index": 0, "delta": {"content": w},
                                                          "finish_reason": None}]}, rng)
                self.send_event({**base, "choices": [{"index": 0, "delta": {},
                                                      "finish_reason": "length"}]}, rng)
                self.send_event({**base, "choices": [], "usage": {
                    "prompt_tokens": len(prompt), "completion_tokens": len(words),
                    "total_tokens": len(prompt) + len(words),
                    "prompt_tokens_details": {"cached_tokens": cached}}}, rng)
                    # Logged and no longer in flight before [DONE] can reach the client: the client
                # sends its next turn (or reads the log) only after it.
                with state.lock:
                    state.in_flight -= 1
                    state.log.append({"request": body, "reply": "".join(words),
                                      "prompt_tokens": len(prompt), "cached_tokens": cached})
                    counted = True
                self.send_event("[DONE]", rng)
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            finally:
                if not counted:  # the client went away mid-stream
                    with state.lock:
                        state.in_flight -= 1

    return Handler


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--ttft-ms", type=float, default=40.0)
    ap.add_argument("--tpot-ms", type=float, default=5.0)
    ap.add_argument("--tokenize", choices=["vllm", "llama", "none"], default="vllm")
    args = ap.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(args, State()))
    server.daemon_threads = True
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
