// Unit tests of the Jinja interpreter, one behaviour each, with expectations worked out from
// Python/jinja2 semantics by hand (the jinja2-generated oracle is jinja_golden_test.cpp).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/jinja/value.h"

namespace pg::jinja {
namespace {

using Json = nlohmann::ordered_json;

std::string R(std::string_view src, const Json& ctx = Json::object(), TemplateOptions o = {}) {
  return Template(src, std::move(o)).Render(ctx);
}

TEST(JinjaBasics, TextExpressionsAndComments) {
  EXPECT_EQ(R("plain"), "plain");
  EXPECT_EQ(R("{{ a }}-{{ b }}", {{"a", 3}, {"b", "x"}}), "3-x");
  EXPECT_EQ(R("a{# hidden {{ x }} #}b"), "ab");
  EXPECT_EQ(R("{{ 'x' ~ 2 ~ none }}"), "x2None");
  EXPECT_EQ(R("{{ missing }}|{{ missing is defined }}"), "|False");
}

TEST(JinjaWhitespace, DashStripsAllWhitespaceOnThatSide) {
  EXPECT_EQ(R("a \n\t {{- 'b' -}} \n c"), "abc");
  EXPECT_EQ(R("a \n {%- if true %}b{% endif %}"), "ab");
}

TEST(JinjaWhitespace, TrimAndLstripBlocks) {
  // trim_blocks drops the newline after %}, lstrip_blocks the indentation before {%.
  EXPECT_EQ(R("x\n    {% if true %}\n    y\n    {% endif %}\nz"), "x\n    y\nz");
  // Not for {{ }}.
  EXPECT_EQ(R("  {{ 1 }}\n2"), "  1\n2");
  // '+' opts out of lstrip (before) and trim (after).
  EXPECT_EQ(R("  {%+ if true +%}\nq{% endif %}"), "  \nq");
  // Options off: everything stays.
  TemplateOptions raw;
  raw.trim_blocks = false;
  raw.lstrip_blocks = false;
  EXPECT_EQ(R("  {% if true %}\nq{% endif %}", Json::object(), raw), "  \nq");
  // lstrip only applies when the tag starts its line.
  EXPECT_EQ(R("a  {% if true %}b{% endif %}"), "a  b");
}

TEST(JinjaWhitespace, OneTrailingNewlineDroppedAndCrlfNormalised) {
  EXPECT_EQ(R("x\n\n"), "x\n");
  EXPECT_EQ(R("a\r\nb\rc"), "a\nb\nc");
}

TEST(JinjaLoops, LoopVariables) {
  Json ctx = {{"xs", {"p", "q", "r", "s"}}};
  EXPECT_EQ(R("{% for x in xs %}{{ loop.index }}{{ loop.revindex0 }}{{ x }}{% if not loop.last %},{% endif %}{% endfor %}", ctx),
            "13p,22q,31r,40s");
  EXPECT_EQ(R("{% for x in xs %}{% if loop.first %}[{% endif %}{{ loop.previtem | default('-') }}{{ loop.nextitem | default('-') }}"
              "{% if loop.last %}]{{ loop.length }}{% endif %}{% endfor %}", ctx),
            "[-qprqsr-]4");
}

TEST(JinjaLoops, ElseFilterUnpackBreakContinue) {
  EXPECT_EQ(R("{% for x in [] %}x{% else %}none{% endfor %}"), "none");
  EXPECT_EQ(R("{% for x in range(7) if x is odd %}{{ x }}{{ loop.length }} {% endfor %}"), "13 33 53 ");
  EXPECT_EQ(R("{% for k, v in d | dictsort %}{{ k }}{{ v }}{% endfor %}", {{"d", {{"b", 2}, {"a", 1}}}}), "a1b2");
  EXPECT_EQ(R("{% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %}", {{"d", {{"b", 2}, {"a", 1}}}}), "b2a1");
  EXPECT_EQ(R("{% for i in range(9) %}{% if i % 3 == 0 %}{% continue %}{% endif %}{% if i > 6 %}{% break %}{% endif %}{{ i }}{% endfor %}"),
            "1245");
}

TEST(JinjaScoping, LoopBodySetDoesNotLeakNamespaceDoes) {
  EXPECT_EQ(R("{% set n = 0 %}{% for i in range(3) %}{% set n = n + 1 %}{% endfor %}{{ n }}"), "0");
  EXPECT_EQ(R("{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"), "3");
  EXPECT_EQ(R("{% if true %}{% set v = 'in-if' %}{% endif %}{{ v }}"), "in-if");
}

TEST(JinjaMacros, DefaultsKeywordsCaller) {
  const char* src =
      "{% macro tag(name, body='', attrs=none) -%}<{{ name }}{% if attrs %} {{ attrs }}{% endif %}>{{ body }}</{{ name }}>"
      "{%- endmacro %}{{ tag('a') }}{{ tag('b', 'x') }}{{ tag(name='c', attrs='k=1') }}";
  EXPECT_EQ(R(src), "<a></a><b>x</b><c k=1></c>");
  EXPECT_EQ(R("{% macro box() %}[{{ caller() }}]{% endmacro %}{% call box() %}in{% endcall %}"), "[in]");
}

TEST(JinjaExpressions, ArithmeticFollowsPython) {
  EXPECT_EQ(R("{{ 7 // -2 }} {{ -7 % 3 }} {{ 1 / 4 }} {{ 2 ** 62 }} {{ 3 * 'ab' }} {{ 0.1 + 0.2 }}"),
            "-4 2 0.25 4611686018427387904 ababab 0.30000000000000004");
  EXPECT_EQ(R("{{ messages | length - 1 }}", {{"messages", {1, 2, 3}}}), "2");
  EXPECT_EQ(R("{{ -x | abs }}", {{"x", 5}}), "5");  // filter binds tighter than unary minus
}

TEST(JinjaExpressions, SlicesAndNegativeIndexOnUtf8) {
  Json ctx = {{"s", "añb€c"}, {"xs", {1, 2, 3, 4, 5, 6, 7}}};
  EXPECT_EQ(R("{{ s[1] }}{{ s[-2] }}|{{ s[1:4] }}|{{ s[::-2] }}|{{ s | length }}", ctx), "ñ€|ñb€|cba|5");
  EXPECT_EQ(R("{{ xs[5:1:-2] }} {{ xs[-3:] }} {{ xs[100:] }} {{ xs[:-100] }}", ctx), "[6, 4] [5, 6, 7] [] []");
}

TEST(JinjaExpressions, LiteralsAndRepr) {
  EXPECT_EQ(R("{{ {'a': [1, 2.0, 'x'], 'b': (none, True)} }}"), "{'a': [1, 2.0, 'x'], 'b': (None, True)}");
  EXPECT_EQ(R("{{ \"it's\" }} {{ [\"it's\"] }}"), "it's [\"it's\"]");
}

TEST(JinjaFilters, TojsonMatchesPythonJsonDumps) {
  Json ctx = Json::parse(R"({"o": {"b": 1.5, "a": [true, null, "ü\"\n"], "c": 1e100, "d": 100000000000000000.0}})");
  EXPECT_EQ(R("{{ o | tojson }}", ctx), "{\"b\": 1.5, \"a\": [true, null, \"ü\\\"\\n\"], \"c\": 1e+100, \"d\": 1e+17}");
  EXPECT_EQ(R("{{ o.a | tojson(indent=2) }}", ctx), "[\n  true,\n  null,\n  \"ü\\\"\\n\"\n]");
  EXPECT_EQ(R("{{ '<&>' | tojson }}"), "\"<&>\"");  // HF's tojson does not HTML-escape
}

TEST(JinjaFilters, SequenceFilters) {
  Json ctx = {{"ps", {{{"n", "b"}, {"k", 2}}, {{"n", "a"}, {"k", 1}}, {{"n", "c"}}}}};
  EXPECT_EQ(R("{{ ps | map(attribute='n') | join('/') }}", ctx), "b/a/c");
  EXPECT_EQ(R("{{ ps | selectattr('k', 'defined') | map(attribute='n') | list }}", ctx), "['b', 'a']");
  EXPECT_EQ(R("{{ ps | rejectattr('k') | first }}", ctx), "{'n': 'c'}");
  EXPECT_EQ(R("{{ ['B', 'a', 'C'] | sort }} {{ ['B', 'a', 'C'] | sort(case_sensitive=true) }}"), "['a', 'B', 'C'] ['B', 'C', 'a']");
  EXPECT_EQ(R("{{ [1, 2, 3, 4, 5] | batch(2, 0) | list }}"), "[[1, 2], [3, 4], [5, 0]]");
  EXPECT_EQ(R("{{ ['a', 'A', 'b'] | unique | list }}"), "['a', 'b']");
}

TEST(JinjaFilters, StringFilters) {
  EXPECT_EQ(R("{{ '  hi  ' | trim }}|{{ 'ab-cd ef' | title }}|{{ 'x' | center(5) }}|{{ 'a\nb' | indent(3, first=true) }}"),
            "hi|Ab-Cd Ef|  x  |   a\n   b");
  EXPECT_EQ(R("{{ 3.14159 | round(2) }} {{ '12' | int + 1 }} {{ 'zz' | float }} {{ none | string }}"), "3.14 13 0.0 None");
}

TEST(JinjaTests, TypeTests) {
  Json ctx = {{"s", "x"}, {"l", {1}}, {"d", Json::object()}, {"n", nullptr}, {"f", 1.5}, {"b", true}};
  EXPECT_EQ(R("{{ s is string }}{{ l is sequence }}{{ d is mapping }}{{ n is none }}{{ f is number }}{{ b is boolean }}"
              "{{ l is mapping }}{{ s is number }}{{ u is undefined }}{{ 4 is divisibleby(2) }}", ctx),
            "TrueTrueTrueTrueTrueTrueFalseFalseTrueTrue");
}

TEST(JinjaMethods, StringAndDictMethods) {
  Json ctx = {{"c", "<think>\nplan\n</think>\n\nanswer"}, {"d", {{"k", "v"}}}};
  EXPECT_EQ(R("{{ c.split('</think>')[-1].lstrip('\\n') }}|{{ c.split('</think>')[0].split('<think>')[-1].strip() }}", ctx),
            "answer|plan");
  EXPECT_EQ(R("{{ d.get('k') }}{{ d.get('z', 'dz') }}{{ d.get('z') }}{{ d.keys() | list }}", ctx), "vdzNone['k']");
  EXPECT_EQ(R("{{ 'a,b,,c'.split(',') }} {{ '  x  y '.split() }} {{ 'aXbXc'.rsplit('X', 1) }}"),
            "['a', 'b', '', 'c'] ['x', 'y'] ['aXb', 'c']");
}

TEST(JinjaGlobals, RaiseExceptionAndStrftime) {
  try {
    R("{{ raise_exception('Conversation roles must alternate') }}");
    FAIL() << "no exception";
  } catch (const TemplateError& e) {
    EXPECT_TRUE(e.raised_by_template());
    EXPECT_STREQ(e.what(), "Conversation roles must alternate");
  }
  TemplateOptions o;
  std::tm tm{};
  tm.tm_year = 125;
  tm.tm_mon = 0;
  tm.tm_mday = 2;
  o.now = tm;
  EXPECT_EQ(R("{{ strftime_now('%Y-%m-%d') }}", Json::object(), o), "2025-01-02");
  EXPECT_EQ(R("{{ dict(a=1) }} {{ range(2, 8, 3) | list }}"), "{'a': 1} [2, 5]");
}

TEST(JinjaSandbox, MutationIsBlockedUnlessAllowed) {
  const char* src = "{% set ns = namespace(l=[]) %}{% set _ = ns.l.append(3) %}{{ ns.l }}";
  EXPECT_THROW(R(src), TemplateError);
  TemplateOptions o;
  o.allow_mutation = true;
  EXPECT_EQ(R(src, Json::object(), o), "[3]");
}

// Python float repr on random doubles: the shortest digits must round-trip exactly.
TEST(JinjaValue, FloatReprRoundTripsOnRandomDoubles) {
  std::mt19937_64 rng(1234);
  std::uniform_real_distribution<double> mant(-1.0, 1.0);
  std::uniform_int_distribution<int> ex(-30, 30);
  for (int i = 0; i < 2000; ++i) {
    double d = mant(rng) * std::pow(10.0, ex(rng));
    std::string s = FormatPythonFloat(d);
    EXPECT_EQ(std::strtod(s.c_str(), nullptr), d) << s;
    double ad = std::fabs(d);
    bool sci = ad != 0 && (ad < 1e-4 || ad >= 1e16);
    EXPECT_EQ(s.find('e') != std::string::npos, sci) << s;
    if (!sci) {
      EXPECT_NE(s.find('.'), std::string::npos) << s;
    }
  }
  EXPECT_EQ(FormatPythonFloat(1e16), "1e+16");
  EXPECT_EQ(FormatPythonFloat(9999999999999998.0), "9999999999999998.0");
  EXPECT_EQ(FormatPythonFloat(0.0001), "0.0001");
  EXPECT_EQ(FormatPythonFloat(-0.0), "-0.0");
}

// Random string content survives messages -> template -> output byte for byte.
TEST(JinjaChatTemplate, RandomContentPassesThroughSmolTemplate) {
  const char* src =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
      "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  ChatTemplate t(src, "", "");
  std::mt19937 rng(7);
  const std::string alphabet = "ab {}%#-\n\t'\"\\<|>ü€😀";
  for (int trial = 0; trial < 50; ++trial) {
    Json messages = Json::array();
    std::string expected;
    int n = 1 + trial % 5;
    for (int m = 0; m < n; ++m) {
      std::string content;
      int len = static_cast<int>(rng() % 40);
      auto chars = SplitCodepoints(alphabet);
      for (int k = 0; k < len; ++k) content += chars[rng() % chars.size()];
      std::string role = m % 2 ? "assistant" : "user";
      messages.push_back({{"role", role}, {"content", content}});
      expected += "<|im_start|>" + role + "\n" + content + "<|im_end|>\n";
    }
    bool agp = trial % 2;
    if (agp) expected += "<|im_start|>assistant\n";
    EXPECT_EQ(t.Render(messages, nullptr, agp), expected);
  }
}

}  // namespace
}  // namespace pg::jinja

namespace pg::jinja {
namespace {

// An agentic conversation re-rendered every turn must stay cheap: 400 messages with tool calls
// through the published Qwen3 template. Structure is checked exactly; the time is printed and
// only bounded loosely (catches quadratic blow-ups, not noise on a shared machine).
TEST(JinjaPerf, LongAgenticConversationQwen3) {
  std::ifstream f("tests/data/chat_templates/Qwen-Qwen3-0.6B.jinja");
  std::stringstream ss;
  ss << f.rdbuf();
  ChatTemplate t(ss.str(), "", "<|im_end|>");
  Json tools = Json::array({Json{{"type", "function"}, {"function", {{"name", "lookup"}, {"parameters", {{"type", "object"}}}}}}});
  Json msgs = Json::array({Json{{"role", "system"}, {"content", "agent"}}});
  const int kTurns = 100;
  for (int i = 0; i < kTurns; ++i) {
    msgs.push_back({{"role", "user"}, {"content", fmt::format("q{}{}", i, std::string(300, 'x'))}});
    msgs.push_back({{"role", "assistant"}, {"content", ""},
                    {"tool_calls", Json::array({Json{{"type", "function"}, {"function", {{"name", "lookup"}, {"arguments", {{"i", i}}}}}}})}});
    msgs.push_back({{"role", "tool"}, {"content", std::string(400, 'y')}});
    msgs.push_back({{"role", "assistant"}, {"content", fmt::format("a{}", i)}});
  }
  std::string out;
  double best_ms = 1e9;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    out = t.Render(msgs, tools, true);
    best_ms = std::min(best_ms, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  auto count = [&](const std::string& needle) {
    size_t n = 0;
    for (size_t p = out.find(needle); p != std::string::npos; p = out.find(needle, p + 1)) ++n;
    return n;
  };
  // system + per turn: user, assistant(tool call), user(tool_response), assistant; + generation prompt.
  EXPECT_EQ(count("<|im_start|>"), 1u + 4u * kTurns + 1u);
  EXPECT_EQ(count("<tool_call>\n{\"name\": \"lookup\", \"arguments\": {\"i\": "), static_cast<size_t>(kTurns));
  EXPECT_EQ(count("<tool_response>"), static_cast<size_t>(kTurns));
  EXPECT_NE(out.find("<|im_start|>assistant\n<think>\n\n</think>\n\na99<|im_end|>"), std::string::npos);
  EXPECT_LT(best_ms, 250.0);
  std::printf("[ perf ] Qwen3 template, %zu messages -> %zu bytes: %.3f ms/render\n", msgs.size(), out.size(), best_ms);
}

}  // namespace
}  // namespace pg::jinja

namespace pg::jinja {
namespace {

// One parsed template is shared by server threads: Render is const and must be thread-safe.
TEST(JinjaThreads, ConcurrentRendersOfOneTemplateAgree) {
  std::ifstream f("tests/data/chat_templates/moonshotai-Kimi-K2.jinja");
  std::stringstream ss;
  ss << f.rdbuf();
  const ChatTemplate t(ss.str(), "", "");
  auto conversation = [](int k) {
    Json msgs = Json::array();
    for (int i = 0; i < 20 + k; ++i) {
      msgs.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", fmt::format("turn {} of thread {}", i, k)}});
    }
    return msgs;
  };
  std::vector<std::string> expected;
  for (int k = 0; k < 4; ++k) expected.push_back(t.Render(conversation(k)));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      Json msgs = conversation(k);
      for (int rep = 0; rep < 200; ++rep) mismatches[k] += t.Render(msgs) != expected[k];
    });
  }
  for (auto& th : threads) th.join();
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(mismatches[k], 0) << "thread " << k;
    EXPECT_NE(expected[k].find(fmt::format("turn {} of thread {}", 19 + k, k)), std::string::npos);
  }
}

}  // namespace
}  // namespace pg::jinja
