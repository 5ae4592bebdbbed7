#!/usr/bin/env python3
"""End-to-end tests of `peregrine serve` on the embedded model with the real openai client.

Every check asserts real behaviour; greedy decoding (temperature 0) makes streamed and
non-streamed outputs comparable token for token. Run: see tests/e2e/CMakeLists.txt.
"""
import argparse
import concurrent.futures as cf
import http.client
import json
import re
import socket
import sys
import time

import jsonschema  # installed by scripts/lib/setup.sh: the structured outputs oracle
import openai  # installed by scripts/lib/setup.sh; a missing client is a failure, not a skip

from server_proc import ServerProcess

API_KEY = "e2e-key"
FAILURES = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILURES.append(what)


def raw(srv, method, path, body=b"", headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    h = {"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"}
    h.update(headers or {})
    conn.request(method, path, body=body, headers=h)
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, data


def is_error(status, data, want_status):
    try:
        j = json.loads(data)
    except ValueError:
        return False
    return status == want_status and isinstance(j.get("error", {}).get("message"), str)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    a = ap.parse_args()
    srv = ServerProcess(a.bin, a.model, ["--api-key", API_KEY, "--served-model-name", "smol"])
    client = openai.OpenAI(base_url=srv.base + "/v1", api_key=API_KEY, max_retries=0)
    msgs = [{"role": "user", "content": "Name three colours."}]
    try:
        # ---- chat, non-streamed and streamed, same greedy output ------------------------
        r = client.chat.completions.create(model="smol", messages=msgs, max_tokens=24, temperature=0)
        text = r.choices[0].message.content
        check(r.object == "chat.completion" and r.id.startswith("chatcmpl-"), "chat.completion shape")
        check(isinstance(text, str) and len(text) > 0, f"chat content non-empty: {text!r}")
        check(r.choices[0].finish_reason in ("stop", "length"), "finish_reason stop/length")
        check(r.usage.prompt_tokens > 0 and r.usage.completion_tokens > 0 and
              r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, "usage sums")
        check(r.usage.prompt_tokens_details is not None and
              r.usage.prompt_tokens_details.cached_tokens is not None, "usage has cached_tokens")
        stream = client.chat.completions.create(model="smol", messages=msgs, max_tokens=24, temperature=0,
                                                stream=True, stream_options={"include_usage": True})
        parts, finish, usage = [], None, None
        for chunk in stream:
            if chunk.usage:
                usage = chunk.usage
            for c in chunk.choices:
                if c.delta.content:
                    parts.append(c.delta.content)
                if c.finish_reason:
                    finish = c.finish_reason
        check("".join(parts) == text, "streamed content == non-streamed content (greedy)")
        check(finish == r.choices[0].finish_reason, "streamed finish_reason matches")
        check(usage is not None and usage.completion_tokens == r.usage.completion_tokens, "include_usage chunk")

        # ---- length and stop -------------------------------------------------------------
        r = client.chat.completions.create(model="smol", messages=msgs, max_tokens=3, temperature=0)
        check(r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 3, "length finish at 3")
        long = client.chat.completions.create(model="smol", messages=msgs, max_tokens=40, temperature=0)
        full = long.choices[0].message.content
        if len(full) > 6:
            stop = full[4:7]
            r = client.chat.completions.create(model="smol", messages=msgs, max_tokens=40, temperature=0, stop=[stop])
            check(r.choices[0].message.content == full[:full.find(stop)] and r.choices[0].finish_reason == "stop",
                  f"stop string {stop!r} truncates")
        else:
            check(False, f"model output long enough for a stop test: {full!r}")

        # ---- completions -------------------------------------------------------------------
        c = client.completions.create(model="smol", prompt="The capital of France is", max_tokens=8, temperature=0)
        check(c.object == "text_completion" and len(c.choices[0].text) > 0, "text_completion")
        sc = "".join(ch.choices[0].text for ch in client.completions.create(
            model="smol", prompt="The capital of France is", max_tokens=8, temperature=0, stream=True) if ch.choices)
        check(sc == c.choices[0].text, "streamed completion == non-streamed")

        # ---- n > 1: three choices; greedy ones agree, seeded samples are reproducible -----------
        nq = [{"role": "user", "content": "Name a colour."}]
        g = client.chat.completions.create(model="smol", messages=nq, max_tokens=8, temperature=0, n=3)
        check(sorted(ch.index for ch in g.choices) == [0, 1, 2], "n=3 gives choices 0, 1, 2")
        check(len({ch.message.content for ch in g.choices}) == 1, "greedy choices agree")
        one = client.chat.completions.create(model="smol", messages=nq, max_tokens=8, temperature=0)
        check(g.usage.completion_tokens == 3 * one.usage.completion_tokens
              and g.usage.prompt_tokens == one.usage.prompt_tokens,
              f"usage sums the choices' tokens, counts the prompt once: {g.usage} vs {one.usage}")
        check(one.choices[0].message.content == g.choices[0].message.content, "n=3's greedy choice == n=1's")
        s1 = client.chat.completions.create(model="smol", messages=nq, max_tokens=8, temperature=1.0, n=3, seed=11)
        s2 = client.chat.completions.create(model="smol", messages=nq, max_tokens=8, temperature=1.0, n=3, seed=11)
        check([ch.message.content for ch in s1.choices] == [ch.message.content for ch in s2.choices],
              "seeded n=3 samples are reproducible")
        check(len({ch.message.content for ch in s1.choices}) > 1,
              f"sampled choices differ: {[ch.message.content for ch in s1.choices]}")
        streamed = {}
        for ch in client.chat.completions.create(model="smol", messages=nq, max_tokens=8, temperature=1.0, n=3,
                                                 seed=11, stream=True):
            for c in ch.choices:
                streamed[c.index] = streamed.get(c.index, "") + (c.delta.content or "")
        check([streamed.get(i) for i in range(3)] == [ch.message.content for ch in s1.choices],
              "streamed n=3 choices == non-streamed")

        # ---- cached tokens on a second turn ------------------------------------------------
        sys_msg = {"role": "system", "content": "You are a helpful assistant. " * 20}
        t1 = [sys_msg, {"role": "user", "content": "Say hello."}]
        r1 = client.chat.completions.create(model="smol", messages=t1, max_tokens=16, temperature=0)
        t2 = t1 + [{"role": "assistant", "content": r1.choices[0].message.content},
                   {"role": "user", "content": "Again."}]
        r2 = client.chat.completions.create(model="smol", messages=t2, max_tokens=8, temperature=0)
        cached = r2.usage.prompt_tokens_details.cached_tokens
        check(cached >= r1.usage.prompt_tokens // 2, f"second turn cached_tokens {cached} of {r2.usage.prompt_tokens}")

        # ---- tools on a model whose template has no tool format ---------------------------
        tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                                    "parameters": {"type": "object",
                                                                   "properties": {"city": {"type": "string"}}}}}]
        tq = [{"role": "user", "content": "What is the weather in Paris?"}]
        try:
            client.chat.completions.create(model="smol", messages=tq, tools=tools, max_tokens=8,
                                           tool_choice="required")
            check(False, "forced tool_choice without a tool format is a 400")
        except openai.BadRequestError as e:
            check("tool" in str(e), "forced tool_choice without a tool format is a 400")

        # ---- structured outputs: every stopped answer is an instance (checked by jsonschema) --
        schema = {"type": "object", "properties": {
                      "name": {"type": "string", "maxLength": 20},
                      "age": {"type": "integer", "minimum": 18, "maximum": 99},
                      "colour": {"enum": ["red", "green", "blue"]},
                      "pets": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
                      "badge": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"}},
                  "required": ["name", "colour", "badge"], "additionalProperties": False}
        pq = [{"role": "user", "content": "Describe a person as JSON with name, age, favourite colour and pets."}]
        stopped = 0
        for temperature, seed in ((0, None), (0.8, 1), (0.8, 2), (1.0, 3)):
            r = client.chat.completions.create(
                model="smol", messages=pq, max_tokens=120, temperature=temperature, seed=seed,
                response_format={"type": "json_schema",
                                 "json_schema": {"name": "person", "schema": schema, "strict": True}})
            out = r.choices[0].message.content
            if r.choices[0].finish_reason != "stop":
                continue
            stopped += 1
            try:
                jsonschema.validate(json.loads(out), schema)
                check(True, f"json_schema answer is an instance: {out!r}")
            except (ValueError, jsonschema.ValidationError) as e:
                check(False, f"json_schema answer is an instance: {out!r} ({e})")
        check(stopped >= 2, f"json_schema: {stopped} of 4 answers ended within 120 tokens")
        try:
            client.chat.completions.create(model="smol", messages=pq, max_tokens=8, response_format={
                "type": "json_schema", "json_schema": {"name": "p", "schema": {"type": "string", "pattern": "a(?=b)"}}})
            check(False, "a schema with a lookahead 'pattern' is a 400")
        except openai.BadRequestError as e:
            check("pattern" in str(e) and "lookaround" in str(e), "a lookahead 'pattern' is a 400 naming it")

        # ---- vLLM's guided_choice / guided_regex: the whole answer is one choice / a match ----
        cq = [{"role": "user", "content": "Is the sky blue? Answer yes or no."}]
        choices = ["yes", "no", "not sure"]
        for temperature, seed in ((0, None), (1.0, 4), (1.0, 5)):
            r = client.chat.completions.create(model="smol", messages=cq, max_tokens=16, temperature=temperature,
                                               seed=seed, extra_body={"guided_choice": choices})
            out = r.choices[0].message.content
            check(out in choices and r.choices[0].finish_reason == "stop", f"guided_choice answer {out!r} is a choice")
        phone = r"\(\d{3}\) \d{3}-\d{4}"
        for temperature, seed in ((0, None), (0.9, 6), (0.9, 7)):
            r = client.chat.completions.create(
                model="smol", messages=[{"role": "user", "content": "Give me a US phone number."}], max_tokens=24,
                temperature=temperature, seed=seed, extra_body={"structured_outputs": {"regex": phone}})
            out = r.choices[0].message.content
            check(re.fullmatch(phone, out) is not None and r.choices[0].finish_reason == "stop",
                  f"structured_outputs.regex answer {out!r} matches {phone}")
        sc = "".join(ch.choices[0].delta.content or "" for ch in client.chat.completions.create(
            model="smol", messages=cq, max_tokens=16, temperature=0, stream=True, extra_body={"guided_choice": choices})
            if ch.choices)
        check(sc in choices, f"streamed guided_choice answer {sc!r} is a choice")
        try:
            client.chat.completions.create(model="smol", messages=cq, max_tokens=4, extra_body={"guided_regex": "(a"})
            check(False, "a malformed guided_regex is a 400")
        except openai.BadRequestError as e:
            check("guided_regex" in str(e), "a malformed guided_regex is a 400 naming it")

        # ---- GBNF grammars: vLLM's guided_grammar, llama.cpp's grammar -------------------
        items = 'root ::= item ("\\n" item){1,2}\nitem ::= "- " [A-Za-z ]{1,12}\n'
        for temperature, seed in ((0, None), (1.0, 8)):
            r = client.chat.completions.create(
                model="smol", messages=[{"role": "user", "content": "List some fruits."}], max_tokens=64,
                temperature=temperature, seed=seed, extra_body={"guided_grammar": items})
            out = r.choices[0].message.content
            check(re.fullmatch(r"- [A-Za-z ]{1,12}(\n- [A-Za-z ]{1,12}){1,2}", out) is not None and
                  r.choices[0].finish_reason == "stop", f"guided_grammar answer {out!r} is a sentence of it")
        nested = 'root ::= arr\narr ::= "[" ( val ( "," val )* )? "]"\nval ::= [0-9] | arr\n'
        r = client.completions.create(model="smol", prompt="A nested list of digits:", max_tokens=48,
                                      temperature=0.8, seed=3, extra_body={"grammar": nested})
        out, fin = r.choices[0].text, r.choices[0].finish_reason
        check(fin == "length" or isinstance(json.loads(out), list),
              f"llama.cpp-style grammar answer {out!r} ({fin}) is a nested list")
        try:
            client.chat.completions.create(model="smol", messages=cq, max_tokens=4,
                                           extra_body={"guided_grammar": "root ::= root \"a\" | \"b\""})
            check(False, "a left-recursive guided_grammar is a 400")
        except openai.BadRequestError as e:
            check("guided_grammar" in str(e) and "left-recursive" in str(e), "a left-recursive guided_grammar is a 400 naming it")

        # ---- logit_bias: -100 on the greedy answer's first token moves it ------------------
        base = client.completions.create(model="smol", prompt="The capital of France is", max_tokens=1,
                                         temperature=0)
        st, data = raw(srv, "POST", "/tokenize",
                       json.dumps({"prompt": base.choices[0].text, "add_special_tokens": False}).encode())
        first = json.loads(data)["tokens"][0] if st == 200 else None
        check(first is not None, "tokenize the greedy first token")
        biased = client.completions.create(model="smol", prompt="The capital of France is", max_tokens=1,
                                           temperature=0, logit_bias={str(first): -100})
        check(biased.choices[0].text != base.choices[0].text,
              f"logit_bias -100 moves the greedy token ({base.choices[0].text!r} -> {biased.choices[0].text!r})")

        # ---- 32+ concurrent streams, each equal to its greedy non-streamed answer ----------
        prompts = [f"Count from {i} to {i + 5}." for i in range(36)]
        want = {}
        for p in prompts[:6]:
            want[p] = client.chat.completions.create(model="smol", messages=[{"role": "user", "content": p}],
                                                     max_tokens=20, temperature=0).choices[0].message.content

        def run(p):
            s = client.chat.completions.create(model="smol", messages=[{"role": "user", "content": p}],
                                               max_tokens=20, temperature=0, stream=True)
            return p, "".join(ch.choices[0].delta.content or "" for ch in s if ch.choices)

        with cf.ThreadPoolExecutor(36) as ex:
            got = list(ex.map(run, prompts))
        check(all(len(t) > 0 for _, t in got), "36 concurrent streams all produced text")
        check(all(t == want[p] for p, t in got if p in want), "concurrent streams equal their sequential answers")

        # ---- abort on disconnect: KV pages return to baseline ------------------------------
        base = srv.metrics().get('peregrine_kv_pages{state="free"}')
        s = socket.create_connection(("127.0.0.1", srv.port))
        body = json.dumps({"model": "smol", "messages": msgs, "max_tokens": 2000, "ignore_eos": True, "stream": True})
        s.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   f"Authorization: Bearer {API_KEY}\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode())
        s.recv(1024)
        s.close()
        ok = False
        for _ in range(100):
            m = srv.metrics()
            if m.get("peregrine_client_disconnect_aborts_total", 0) >= 1 and m.get('peregrine_kv_pages{state="free"}') == base:
                ok = True
                break
            time.sleep(0.1)
        check(ok, "disconnect aborts the request and KV pages return to baseline")

        # ---- errors --------------------------------------------------------------------------
        bad = openai.OpenAI(base_url=srv.base + "/v1", api_key="wrong", max_retries=0)
        try:
            bad.models.list()
            check(False, "401 for a wrong key")
        except openai.AuthenticationError:
            check(True, "401 for a wrong key")
        for body, name in [(b"{not json", "malformed JSON"),
                           (json.dumps({"model": "smol", "messages": msgs, "max_tokens": "x"}).encode(), "wrong type"),
                           (json.dumps({"model": "smol", "messages": msgs, "temperature": 5}).encode(), "out of range"),
                           (json.dumps({"model": "nope", "messages": msgs}).encode(), "unknown model"),
                           (json.dumps({"model": "smol", "messages": msgs, "n": 17}).encode(), "n > 16"),
                           (json.dumps({"model": "smol", "messages": [{"role": "user", "content": "word " * 20000}]}).encode(),
                            "prompt longer than the context")]:
            st, data = raw(srv, "POST", "/v1/chat/completions", body)
            check(is_error(st, data, 400), f"400 for {name}")
        st, data = raw(srv, "GET", "/v1/nowhere")
        check(is_error(st, data, 404), "404 for an unknown path")
        # Oversized body: the limit is checked against Content-Length, before the body is read.
        s = socket.create_connection(("127.0.0.1", srv.port))
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1073741824\r\n\r\n{")
        reply = s.recv(4096).decode(errors="replace")
        s.close()
        check(reply.startswith("HTTP/1.1 413"), "413 for an oversized body")
        try:
            client.chat.completions.create(model="smol", messages=msgs, max_tokens=-1)
            check(False, "openai client sees BadRequestError")
        except openai.BadRequestError:
            check(True, "openai client sees BadRequestError")
        models = client.models.list()
        check([m.id for m in models.data] == ["smol"], "/v1/models lists the served name")
    finally:
        code = srv.stop()
    check(code == 0, f"SIGTERM drains and exits 0 (got {code})")
    # ---- tool call round trip: same model, Qwen3's published template (Hermes <tool_call>) --
    srv2 = ServerProcess(a.bin, a.model, ["--served-model-name", "smol", "--chat-template",
                                          "tests/data/chat_templates/Qwen-Qwen3-0.6B.jinja",
                                          "--tool-call-parser", "hermes"])
    try:
        client2 = openai.OpenAI(base_url=srv2.base + "/v1", api_key="none", max_retries=0)
        weather = {"type": "object", "properties": {"city": {"type": "string"},
                                                    "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"], "additionalProperties": False}
        clock = {"type": "object", "properties": {"tz": {"type": "string", "maxLength": 32}}, "required": ["tz"]}
        tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                                    "parameters": weather}}]
        tq = [{"role": "user", "content": "What is the weather in Paris?"}]
        # Forced calls are generated under the tools' schemas: arguments are instances.
        both = tools + [{"type": "function", "function": {"name": "get_time", "description": "Time in a zone",
                                                           "parameters": clock}}]
        params = {"get_weather": weather, "get_time": clock}
        for choice in ({"type": "function", "function": {"name": "get_weather"}},
                       {"type": "function", "function": {"name": "get_time"}}, "required"):
            for temperature, seed in ((0, None), (0.9, 5)):
                r = client2.chat.completions.create(model="smol", messages=tq, tools=both, max_tokens=80,
                                                    temperature=temperature, seed=seed, tool_choice=choice)
                calls = r.choices[0].message.tool_calls or []
                ok = len(calls) == 1 and calls[0].function.name in params
                if ok and r.choices[0].finish_reason != "length":
                    try:
                        jsonschema.validate(json.loads(calls[0].function.arguments), params[calls[0].function.name])
                    except (ValueError, jsonschema.ValidationError):
                        ok = False
                want = choice if isinstance(choice, str) else choice["function"]["name"]
                ok = ok and (want == "required" or calls[0].function.name == want)
                check(ok, f"forced call ({want}, T={temperature}) is an instance of its tool's schema: "
                          f"{[(c.function.name, c.function.arguments) for c in calls]}")
        r = client2.chat.completions.create(model="smol", messages=tq, tools=tools, max_tokens=120, temperature=0,
                                            tool_choice={"type": "function", "function": {"name": "get_weather"}})
        print("forced call:", r.choices[0].finish_reason, r.choices[0].message.tool_calls)
        calls = r.choices[0].message.tool_calls or []
        check(len(calls) >= 1 and calls[0].function.name == "get_weather", "forced tool call returned")
        # OpenAI reports "stop" for a call forced by a named tool_choice, "tool_calls" otherwise.
        check(r.choices[0].finish_reason in ("tool_calls", "stop"),
              f"finish_reason of a forced call ({r.choices[0].finish_reason})")
        if calls:
            json.loads(calls[0].function.arguments)  # arguments are JSON
            follow = tq + [{"role": "assistant", "content": None, "tool_calls": [calls[0].model_dump()]},
                           {"role": "tool", "tool_call_id": calls[0].id, "content": "{\"temp_c\": 21}"}]
            r = client2.chat.completions.create(model="smol", messages=follow, tools=tools, max_tokens=16,
                                                temperature=0)
            check(r.choices[0].message.content is not None, "tool result message accepted, answer produced")
        st = client2.chat.completions.create(model="smol", messages=tq, tools=tools, max_tokens=40, temperature=0,
                                             stream=True,
                                             tool_choice={"type": "function", "function": {"name": "get_weather"}})
        names, args = set(), ""
        for ch in st:
            for tc in (ch.choices[0].delta.tool_calls or []) if ch.choices else []:
                if tc.function and tc.function.name:
                    names.add(tc.function.name)
                if tc.function and tc.function.arguments:
                    args += tc.function.arguments
        check(names == {"get_weather"}, "streamed tool call name")
        try:
            json.loads(args)
            check(True, "streamed tool-call argument deltas concatenate to JSON")
        except ValueError:
            check(False, f"streamed tool-call argument deltas concatenate to JSON ({args!r})")
    finally:
        srv2.stop()
    print(f"{len(FAILURES)} failures")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
