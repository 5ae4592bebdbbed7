#!/usr/bin/env python3
"""Golden renders of chat templates and Jinja features, made with Python's jinja2.

The environment mirrors Hugging Face transformers' apply_chat_template:
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the loopcontrols
extension and HF's {% generation %} tag, HF's tojson filter (json.dumps, ensure_ascii=False, no HTML escaping), the
raise_exception and strftime_now globals (strftime_now pinned to FIXED_NOW so goldens are
deterministic), and the render call
    template.render(messages=..., tools=..., documents=None, add_generation_prompt=...,
                    bos_token=..., eos_token=..., **extra_kwargs).

Writes:
  tests/data/chat_templates/goldens.json          full templates x conversations
  tests/data/chat_templates/feature_goldens.json  small templates exercising one feature each
  tests/data/chat_templates/corpus_goldens.json   every template in corpus/ (llama.cpp's
      models/templates, vendored by the llama-cpp-python 0.3.36 sdist on PyPI) x the same
      conversations; outputs stored as length + FNV-1a 64 hash to keep the file small

Usage (from the repo root):  python3 tools/golden/chat_template_goldens.py
"""
import datetime
import json
import os
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data", "chat_templates")
FIXED_NOW = datetime.datetime(2024, 7, 26, 14, 5, 9)

TEMPLATES = {
    "smollm2": ("HuggingFaceTB-SmolLM2-135M-Instruct.jinja", "<|im_start|>", "<|im_end|>"),
    "qwen3": ("Qwen-Qwen3-0.6B.jinja", "", "<|im_end|>"),
    "llama31": ("meta-llama-Llama-3.1-8B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    "deepseek_v31": ("deepseek-ai-DeepSeek-V3.1.jinja", "<｜begin▁of▁sentence｜>",
                     "<｜end▁of▁sentence｜>"),
    "kimi_k2": ("moonshotai-Kimi-K2.jinja", "[BOS]", "[EOS]"),
}


class AssistantTracker(Extension):
    """HF's {% generation %}...{% endgeneration %} tag: renders its body unchanged (HF only
    records character offsets there when asked for an assistant-token mask)."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        call = self.call_method("_render", [])
        return nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return FIXED_NOW.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city. Units: \"c\" or \"f\".",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Zürich"},
                "unit": {"type": "string", "enum": ["c", "f"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
                "threshold": {"type": "number", "default": 0.5},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "web_search",
        "description": "Search the web.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                       "required": ["query"]},
    },
}


def call(name, args, id_="call_1"):
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": args}}


CONVERSATIONS = [
    ("system_user", {"messages": [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "What is 2+2?"}]}),
    ("no_system", {"messages": [{"role": "user", "content": "Hello there!"}]}),
    ("multi_turn", {"messages": [
        {"role": "system", "content": "  Be brief.\n"},
        {"role": "user", "content": "Name a prime."},
        {"role": "assistant", "content": "7"},
        {"role": "user", "content": "Another one, bigger?"},
        {"role": "assistant", "content": "11"},
        {"role": "user", "content": "Thanks"}]}),
    ("unicode_and_quotes", {"messages": [
        {"role": "user", "content": "Grüße, 世界! \"quoted\" 'single' \\ back\tslash 🙂\nnew line"},
        {"role": "assistant", "content": "Ça va — ok."},
        {"role": "user", "content": "<b>html</b> & {{ not jinja }}"}]}),
    ("tools_defined", {"tools": [WEATHER_TOOL, SEARCH_TOOL], "messages": [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "Weather in Zürich?"}]}),
    ("tools_no_system", {"tools": [WEATHER_TOOL], "messages": [
        {"role": "user", "content": "Weather in Paris?"}]}),
    ("tool_call_and_result", {"tools": [WEATHER_TOOL], "messages": [
        {"role": "system", "content": "Use tools when useful."},
        {"role": "user", "content": "Weather in Oslo, in c?"},
        {"role": "assistant", "content": "",
         "tool_calls": [call("get_weather", {"city": "Oslo", "unit": "c", "days": 2})]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather",
         "content": "{\"temp\": -3.5, \"sky\": \"snow\"}"},
        {"role": "assistant", "content": "It is -3.5°C and snowing in Oslo."},
        {"role": "user", "content": "And tomorrow?"}]}),
    ("parallel_tool_calls", {"tools": [WEATHER_TOOL, SEARCH_TOOL], "messages": [
        {"role": "user", "content": "Weather in Rome and news about Rome."},
        {"role": "assistant", "content": "Let me check both.",
         "tool_calls": [call("get_weather", {"city": "Rome"}, "call_a"),
                        call("web_search", {"query": "Rome news"}, "call_b")]},
        {"role": "tool", "tool_call_id": "call_a", "content": "sunny, 24"},
        {"role": "tool", "tool_call_id": "call_b", "content": "[\"Colosseum reopens\"]"}]}),
    ("tool_call_string_args", {"tools": [SEARCH_TOOL], "messages": [
        {"role": "user", "content": "Search cats"},
        {"role": "assistant", "content": None,
         "tool_calls": [call("web_search", "{\"query\": \"cats\"}")]},
        {"role": "tool", "tool_call_id": "call_1", "content": "cats are great"}]}),
    ("reasoning_content", {"messages": [
        {"role": "user", "content": "Is 91 prime?"},
        {"role": "assistant", "reasoning_content": "91 = 7 * 13.", "content": "No, 91 = 7 x 13."},
        {"role": "user", "content": "Is 97 prime?"},
        {"role": "assistant", "reasoning_content": "\nCheck up to 9.\n",
         "content": "\nYes."}]}),
    ("think_in_content", {"messages": [
        {"role": "user", "content": "Pick a colour"},
        {"role": "assistant", "content": "<think>\nuser wants one\n</think>\n\nBlue."},
        {"role": "user", "content": "Why?"}]}),
    ("enable_thinking_false", {"kwargs": {"enable_thinking": False}, "messages": [
        {"role": "user", "content": "Quick answer: capital of Peru?"}]}),
    ("thinking_true", {"kwargs": {"thinking": True}, "messages": [
        {"role": "system", "content": "Think first."},
        {"role": "user", "content": "Hard question"}]}),
    ("two_system_messages", {"messages": [
        {"role": "system", "content": "First rule."},
        {"role": "system", "content": "Second rule."},
        {"role": "user", "content": "Go"}]}),
    ("content_parts", {"messages": [
        {"role": "user", "content": [{"type": "text", "text": "Describe: "},
                                      {"type": "image", "image": "x.png"},
                                      {"type": "text", "text": "please"}]}]}),
    ("llama_builtin_tools", {"kwargs": {"builtin_tools": ["code_interpreter", "brave_search"],
                                        "date_string": "01 Jan 2025"},
                             "messages": [
        {"role": "user", "content": "Search for llamas"},
        {"role": "assistant", "content": "",
         "tool_calls": [call("brave_search", {"query": "llamas"})]},
        {"role": "ipython", "content": {"results": ["llama facts"], "n": 1}}]}),
    ("llama_tools_in_system", {"tools": [SEARCH_TOOL], "kwargs": {"tools_in_user_message": False},
                               "messages": [
        {"role": "user", "content": "find the moon"}]}),
    ("empty_messages_tools", {"tools": [SEARCH_TOOL], "messages": []}),
]


def render_case(env, template_src, bos, eos, conv, add_generation_prompt):
    tmpl = env.from_string(template_src)
    kwargs = dict(conv.get("kwargs", {}))
    try:
        out = tmpl.render(messages=conv["messages"], tools=conv.get("tools"), documents=None,
                          add_generation_prompt=add_generation_prompt, bos_token=bos,
                          eos_token=eos, **kwargs)
        return {"expected": out}
    except Exception as e:  # noqa: BLE001 - the golden records the failure
        return {"error": str(e), "error_type": type(e).__name__}


def full_goldens(env):
    cases = []
    for tname, (fname, bos, eos) in TEMPLATES.items():
        with open(os.path.join(DATA, fname), encoding="utf-8") as f:
            src = f.read()
        for cname, conv in CONVERSATIONS:
            for agp in (True, False):
                case = {"template": tname, "file": fname, "name": f"{cname}/agp={int(agp)}",
                        "bos_token": bos, "eos_token": eos, "messages": conv["messages"],
                        "tools": conv.get("tools"), "add_generation_prompt": agp,
                        "kwargs": conv.get("kwargs", {})}
                case.update(render_case(env, src, bos, eos, conv, agp))
                cases.append(case)
    return cases


# Small templates, one feature each: (name, template, context).
FEATURES = [
    ("text_only", "hello\nworld", {}),
    ("trailing_newline_dropped", "abc\n", {}),
    ("var", "{{ x }}|{{ y }}|{{ z }}", {"x": 1, "y": "two", "z": None}),
    ("undefined_prints_empty", "[{{ nope }}][{{ d.missing }}]", {"d": {}}),
    ("comment", "a{# comment #}b{#- c -#}  c", {}),
    ("ws_control", "a  {{- 'x' -}}  b\n  {%- if true -%}  c  {%- endif -%}\n d", {}),
    ("trim_lstrip_blocks", "<ul>\n  {% for i in xs %}\n    <li>{{ i }}</li>\n  {% endfor %}\n</ul>\n",
     {"xs": [1, 2, 3]}),
    ("lstrip_plus", "a\n  {%+ if true %}x{% endif +%}\nb", {}),
    ("comment_lines", "a\n  {# note #}\nb", {}),
    ("for_loop_vars",
     "{% for x in xs %}{{ loop.index }},{{ loop.index0 }},{{ loop.revindex }},{{ loop.revindex0 }},"
     "{{ loop.first }},{{ loop.last }},{{ loop.length }},{{ loop.previtem }},{{ loop.nextitem }};"
     "{% endfor %}", {"xs": ["a", "b", "c"]}),
    ("for_else", "{% for x in xs %}{{ x }}{% else %}empty{% endfor %}", {"xs": []}),
    ("for_filter", "{% for x in xs if x % 2 %}{{ x }}/{{ loop.length }} {% endfor %}",
     {"xs": [1, 2, 3, 4, 5]}),
    ("for_unpack", "{% for a, b in pairs %}{{ a }}={{ b }};{% endfor %}", {"pairs": [[1, 2], [3, 4]]}),
    ("for_items", "{% for k, v in d.items() %}{{ k }}:{{ v }},{% endfor %}",
     {"d": {"b": 1, "a": 2, "c": [1]}}),
    ("for_dict_keys", "{% for k in d %}{{ k }}{% endfor %}", {"d": {"z": 1, "y": 2}}),
    ("for_string", "{% for ch in 'héllo' %}[{{ ch }}]{% endfor %}", {}),
    ("for_break_continue",
     "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}"
     "{% endif %}{{ i }}{% endfor %}", {}),
    ("loop_cycle", "{% for i in range(5) %}{{ loop.cycle('a', 'b') }}{% endfor %}", {}),
    ("nested_loops", "{% for i in range(3) %}{% for j in range(i) %}{{ loop.index }}{{ i }}{% endfor %}|"
     "{{ loop.index }}{% endfor %}", {}),
    ("if_elif_else",
     "{% for n in [1, 5, 10] %}{% if n < 3 %}small{% elif n < 7 %}mid{% else %}big{% endif %} "
     "{% endfor %}", {}),
    ("set_scoping",
     "{% set x = 1 %}{% for i in range(2) %}{% set x = x + 10 %}{{ x }} {% endfor %}{{ x }}"
     "{% if true %}{% set x = 5 %}{% endif %} {{ x }}", {}),
    ("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}", {}),
    ("block_set", "{% set body %}Hi {{ name }}!{% endset %}[{{ body }}] {{ body | length }}",
     {"name": "Ann"}),
    ("namespace", "{% set ns = namespace(total=0, items=[]) %}{% for i in range(4) %}"
     "{% set ns.total = ns.total + i %}{% endfor %}{{ ns.total }} {{ ns.items }}", {}),
    ("macro", "{% macro greet(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}{{ punct }}"
     "{% endmacro %}{{ greet('Bo') }} {{ greet('Al', 'Hi') }} {{ greet(punct='?', name='Cy') }}", {}),
    ("macro_caller", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}"
     "{% call wrap('b') %}bold {{ 1 + 1 }}{% endcall %}", {}),
    ("macro_varargs", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k=4) }}",
     {}),
    ("filter_block", "{% filter upper %}shout {{ 'it' }}{% endfilter %}", {}),
    ("raw_block", "{% raw %}{{ not evaluated }}{% endraw %}", {}),
    ("arith", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 / 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 }}"
     " {{ (1 + 2) * 3 }} {{ 1.5 + 1 }} {{ 10 / 4 }} {{ 6 / 3 }} {{ -3 }} {{ 2 ** -1 }}", {}),
    ("concat_tilde", "{{ 'a' ~ 1 ~ none ~ true ~ [1] }}", {}),
    ("string_plus", "{{ 'a' + 'b' }} {{ [1] + [2, 3] }} {{ 'ab' * 3 }}", {}),
    ("comparisons", "{{ 1 < 2 }} {{ 2 <= 1 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ 'a' != 'a' }} {{ [1,2] == [1,2] }}"
     " {{ none == none }} {{ x == 'y' }}", {}),
    ("logic", "{{ true and false }} {{ true or false }} {{ not true }} {{ 0 or 'x' }} {{ 1 and 'y' }}"
     " {{ '' or [] }} {{ none and 1 }}", {}),
    ("in_ops", "{{ 'a' in 'cat' }} {{ 2 in [1,2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }}"
     " {{ 'z' not in 'abc' }}", {}),
    ("ternary", "{{ 'yes' if x else 'no' }} {{ 'yes' if not x else 'no' }} [{{ 'only' if false }}]",
     {"x": 0}),
    ("literals", "{{ [1, 'two', 3.5, true, none] }} {{ {'a': 1, 'b': [False, None]} }} {{ (1, 2) }}"
     " {{ (1,) }} {{ True }} {{ None }} {{ 1e3 }} {{ 1_000 }} {{ 0.1 }}", {}),
    ("string_escapes", "{{ 'a\\nb\\tc\\\\d\\'e' }}|{{ \"q\\\"q\" }}|{{ 'x' 'y' }}|{{ '\\u00e9' }}", {}),
    ("repr_strings", "{{ ['it\\'s', \"a\\\"b\", 'n\\nl', 'tab\\t', 'é'] }}", {}),
    ("subscript_slice", "{{ xs[0] }} {{ xs[-1] }} {{ xs[1:3] }} {{ xs[::-1] }} {{ xs[::2] }} {{ xs[:-2] }}"
     " {{ s[1:] }} {{ s[::-1] }} {{ s[-2] }} {{ d['k'] }} {{ d.k }}",
     {"xs": [10, 20, 30, 40, 50], "s": "héllo", "d": {"k": "v"}}),
    ("string_methods",
     "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ s.strip(' x') }}|{{ t.split(',') }}|"
     "{{ t.split(',', 1) }}|{{ 'a b  c'.split() }}|{{ t.startswith('a') }}|{{ t.endswith('c') }}|"
     "{{ t.replace(',', ';') }}|{{ t.upper() }}|{{ 'HeLLo'.lower() }}|{{ 'hello world'.title() }}|"
     "{{ t.find('b') }}|{{ t.find('z') }}|{{ t.count(',') }}|{{ 'hello'.capitalize() }}|"
     "{{ t.startswith(('x', 'a')) }}|{{ 'a-b-c'.rsplit('-', 1) }}|{{ '{} and {}'.format(1, 'x') }}|"
     "{{ 'ab'.rfind('b') }}|{{ ', '.join(['x', 'y']) }}|{{ '  '.isspace() }}|{{ '12'.isdigit() }}",
     {"s": " x hi x ", "t": "a,b,c"}),
    ("dict_methods",
     "{{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 'dflt') }} {{ d.keys() | list }} "
     "{{ d.values() | list }} {{ d.items() | list }}", {"d": {"a": 1, "b": "two"}}),
    ("filters_text",
     "{{ '  x  ' | trim }}|{{ 'ab' | upper }}|{{ 'AB' | lower }}|{{ 'hello wORLD' | title }}|"
     "{{ 'hELLO' | capitalize }}|{{ 'aaa' | replace('a', 'b', 2) }}|{{ 'xxhixx' | trim('x') }}|"
     "{{ 'one two  three' | wordcount }}|{{ 'abc' | center(7) }}|{{ 'a<b' | safe }}|{{ 5 | string }}",
     {}),
    ("filters_seq",
     "{{ xs | length }} {{ xs | count }} {{ xs | first }} {{ xs | last }} {{ xs | join('-') }} "
     "{{ xs | sort }} {{ xs | sort(reverse=true) }} {{ xs | unique | list }} {{ xs | reverse | list }} "
     "{{ xs | sum }} {{ xs | min }} {{ xs | max }} {{ 'abc' | list }} {{ xs | batch(2) | list }} "
     "{{ xs | map('string') | join }} {{ xs | select('odd') | list }} {{ xs | reject('odd') | list }}",
     {"xs": [3, 1, 2, 3, 5]}),
    ("filters_attr",
     "{{ people | map(attribute='name') | join(', ') }}|"
     "{{ people | selectattr('admin') | map(attribute='name') | list }}|"
     "{{ people | rejectattr('admin') | map(attribute='name') | list }}|"
     "{{ people | selectattr('age', 'gt', 30) | map(attribute='name') | list }}|"
     "{{ people | selectattr('name', 'equalto', 'Bo') | list | length }}|"
     "{{ people | sort(attribute='age') | map(attribute='name') | join }}|"
     "{{ people | join(',', attribute='name') }}|{{ people | map(attribute='zz', default='?') | join }}",
     {"people": [{"name": "Al", "age": 40, "admin": True}, {"name": "Bo", "age": 25, "admin": False},
                 {"name": "Cy", "age": 33}]}),
    ("filters_misc",
     "{{ none | default('d') }} {{ undefined_var | default('u') }} {{ '' | default('e', true) }} "
     "{{ '' | d('e2') }} {{ '42' | int }} {{ 'x' | int(7) }} {{ '3.5' | float }} {{ -3 | abs }} "
     "{{ 2.567 | round(2) }} {{ 2.5 | round }} {{ 2.1 | round(0, 'ceil') }} {{ 3.7 | int }} "
     "{{ {'b': 1, 'a': 2} | dictsort }} {{ {'b': 1, 'a': 2} | items | list }} {{ 'a\\nb' | indent(2) }}|"
     "{{ 'a\\nb' | indent(2, true) }} {{ [1, [2]] | tojson }}", {}),
    ("tojson_hf",
     "{{ obj | tojson }}\n{{ obj | tojson(indent=2) }}\n{{ 'é\"<>&\\'' | tojson }}\n{{ 1.0 | tojson }}"
     "\n{{ [] | tojson(indent=2) }}\n{{ {} | tojson }}\n{{ obj | tojson(sort_keys=true) }}"
     "\n{{ obj | tojson(separators=(',', ':')) }}\n{{ 'ünï' | tojson(ensure_ascii=true) }}",
     {"obj": {"z": [1, 2.5, 1e-7, 1e22, True, None], "a": {"nested": "ü\n\t\u0001"}, "n": -0.0}}),
    ("tests",
     "{{ x is defined }} {{ y is defined }} {{ y is undefined }} {{ n is none }} {{ s is string }} "
     "{{ d is mapping }} {{ xs is sequence }} {{ s is iterable }} {{ 1 is number }} {{ 1.5 is number }}"
     " {{ true is boolean }} {{ 1 is boolean }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }}"
     " {{ 'a' is equalto 'a' }} {{ 2 is in [1, 2] }} {{ n is not none }} {{ s is lower }} "
     "{{ d is iterable }} {{ d is sequence }} {{ 1 is integer }} {{ 1.0 is float }} {{ x is true }}"
     " {{ true is true }} {{ 5 is gt 3 }} {{ 5 is ge(6) }} {{ s is callable }} {{ range is callable }}",
     {"x": 1, "n": None, "s": "abc", "d": {}, "xs": [1]}),
    ("range_dict",
     "{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(5, 0, -2) | list }} {{ dict(a=1, b='x') }}"
     " {{ range(3) | length }}", {}),
    ("raise_exception", "{% if fail %}{{ raise_exception('bad thing: ' ~ why) }}{% endif %}ok",
     {"fail": True, "why": "no user"}),
    ("strftime_now", "{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%d %H:%M:%S %A %B %j') }}", {}),
    ("bool_print", "{{ true }} {{ false }} {{ none }} {{ 1 == 1 }} {{ [] }} {{ {} }} {{ 1.0 }} {{ 3.14159 }}"
     " {{ 1e20 }} {{ 1e16 }} {{ 1.5e-5 }} {{ 123456789.0 }} {{ 0.0001 }}", {}),
    ("message_pattern",
     "{% for m in messages %}{% if m.tool_calls %}{% for tc in m.tool_calls %}{{ tc.function.name }}"
     "({{ tc.function.arguments | tojson }}){% endfor %}{% elif m['content'] is string %}{{ m.content }}"
     "{% endif %}{% if not loop.last %}\n{% endif %}{% endfor %}",
     {"messages": [{"role": "user", "content": "hi"},
                   {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments":
                                                                        {"a": [1, "x"]}}}]}]}),
    ("loop_over_messages_reverse",
     "{% for m in messages[::-1] %}{{ loop.index0 }}{{ m.role[0] }}{% endfor %}",
     {"messages": [{"role": "user"}, {"role": "assistant"}, {"role": "tool"}]}),
    ("markup_plus_escapes", "{{ 'a<'|safe + '<b>\"q\"' }}|{{ '<x>' ~ ('y'|safe) }}|{{ '&'|escape }}", {}),
    ("generator_semantics",
     "{{ (xs | select('odd')) is sequence }} {{ 'yes' if [] | select else 'no' }} {{ xs | map('string') | list }}"
     " {{ none | selectattr('a') | list }} {{ xs | reject('odd') | first }}", {"xs": [1, 2, 3]}),
    ("unknown_filter_in_if_is_lazy", "{% if false %}{{ x | from_json }}{% endif %}ok {{ 1 if true else x | nope }}", {}),
    ("loop_set_across_iterations",
     "{% for i in range(3) %}{% if i == 0 %}{% set y = 5 %}{% endif %}[{{ y }}]{% endfor %}", {}),
    ("macro_sees_later_globals", "{% macro m() %}{{ g }}{% endmacro %}{% set g = 'G' %}{{ m() }}", {}),
    ("nested_namespace_in_loop",
     "{% set ns = namespace(seen=false, n=0) %}{% for m in ms %}{% if m.role == 'tool' and not ns.seen %}"
     "{% set ns.seen = true %}{% set ns.n = loop.index %}{% endif %}{% endfor %}{{ ns.seen }}{{ ns.n }}",
     {"ms": [{"role": "user"}, {"role": "tool"}, {"role": "tool"}]}),
    ("whitespace_mix", "  {%- for i in range(2) %}\n  {{ i }}\n  {%- endfor %}\n{# c #}\n  end  \n", {}),
    ("attr_of_undefined_is_error", "{{ nope.field }}", {}),
    ("call_of_non_callable_is_error", "{{ x() }}", {"x": 1}),
    ("add_str_int_is_error", "{{ 'a' + 1 }}", {}),
    ("unknown_filter_is_error", "{{ 1 | no_such_filter }}", {}),
    ("append_in_sandbox_is_error", "{% set ns = namespace(l=[]) %}{{ ns.l.append(1) }}", {}),
    ("syntax_error_unclosed_if", "line one\n{% if x %}\nunclosed", {}),
    ("syntax_error_bad_expr", "ok\n\n  {{ 1 + }}", {}),
    ("syntax_error_unknown_tag", "{% frobnicate %}", {}),
]


def feature_goldens(env):
    cases = []
    for name, src, ctx in FEATURES:
        case = {"name": name, "template": src, "context": ctx}
        try:
            case["expected"] = env.from_string(src).render(**ctx)
        except jinja2.exceptions.TemplateSyntaxError as e:
            case["error"] = str(e)
            case["error_type"] = "TemplateSyntaxError"
            case["error_line"] = e.lineno
        except Exception as e:  # noqa: BLE001 - the golden records the failure
            case["error"] = str(e)
            case["error_type"] = type(e).__name__
        cases.append(case)
    return cases


def fnv1a64(data: bytes) -> str:
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def corpus_goldens(env):
    """Templates jinja2 cannot compile (e.g. HF-only {% generation %} without the extension) are
    recorded as such; the C++ side must at least not crash on them."""
    conversations = [{"name": n, "messages": c["messages"], "tools": c.get("tools"),
                      "kwargs": c.get("kwargs", {})} for n, c in CONVERSATIONS]
    templates = {}
    corpus = os.path.join(DATA, "corpus")
    for fname in sorted(os.listdir(corpus)):
        if not fname.endswith(".jinja"):
            continue
        with open(os.path.join(corpus, fname), encoding="utf-8") as f:
            src = f.read()
        try:
            env.from_string(src)
        except jinja2.exceptions.TemplateSyntaxError as e:
            templates[fname] = {"jinja2_syntax_error": str(e)}
            continue
        results = []
        for cname, conv in CONVERSATIONS:
            for agp in (True, False):
                r = render_case(env, src, "<s>", "</s>", conv, agp)
                if "expected" in r:
                    out = r["expected"].encode("utf-8")
                    results.append({"conversation": cname, "add_generation_prompt": agp,
                                    "length": len(out), "fnv1a64": fnv1a64(out)})
                else:
                    results.append({"conversation": cname, "add_generation_prompt": agp,
                                    "error": r["error"], "error_type": r["error_type"]})
        templates[fname] = {"cases": results}
    return {"bos_token": "<s>", "eos_token": "</s>", "conversations": conversations,
            "templates": templates}


def main():
    env = make_env()
    meta = {"generator": "tools/golden/chat_template_goldens.py", "jinja2": jinja2.__version__,
            "python": sys.version.split()[0], "strftime_now": FIXED_NOW.isoformat()}
    with open(os.path.join(DATA, "goldens.json"), "w", encoding="utf-8") as f:
        json.dump({"meta": meta, "cases": full_goldens(env)}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(os.path.join(DATA, "feature_goldens.json"), "w", encoding="utf-8") as f:
        json.dump({"meta": meta, "cases": feature_goldens(env)}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(os.path.join(DATA, "corpus_goldens.json"), "w", encoding="utf-8") as f:
        json.dump({"meta": meta, **corpus_goldens(env)}, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
