// Error behaviour: syntax errors carry line and column; runtime errors carry the position of
// the failing expression; undefined values raise only where jinja2's default Undefined does.
#include <gtest/gtest.h>

#include <random>

#include "tokenizer/jinja/chat_template.h"

namespace pg::jinja {
namespace {

using Json = nlohmann::ordered_json;

std::string ErrorOf(std::string_view src, const Json& ctx = Json::object()) {
  try {
    Template(src).Render(ctx);
  } catch (const TemplateError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  ADD_FAILURE() << "no error for: " << src;
  return "";
}

TEST(JinjaSyntaxErrors, ReportLineAndColumn) {
  EXPECT_EQ(ErrorOf("line1\nline2 {{ 1 + }}"),
            "chat template syntax error at line 2, column 14: unexpected end of print statement '}}'");
  EXPECT_EQ(ErrorOf("a\n\n  {% if x %}\nnever closed"),
            "chat template syntax error at line 4, column 13: unexpected end of template: 'if' opened at "
            "line 3, column 3 was never closed (expected 'elif' or 'else' or 'endif')");
  EXPECT_EQ(ErrorOf("{% for x in y %}{% endif %}"), "chat template syntax error at line 1, column 17: unknown tag 'endif'");
  EXPECT_EQ(ErrorOf("ok\n{{ 'unterminated }}"), "chat template syntax error at line 2, column 4: unterminated string literal");
  EXPECT_EQ(ErrorOf("{{ x | nosuch }}"), "chat template syntax error at line 1, column 8: no filter named 'nosuch'");
  EXPECT_EQ(ErrorOf("{{ x is nosuch }}"), "chat template syntax error at line 1, column 9: no test named 'nosuch'");
  EXPECT_EQ(ErrorOf("\n\n{{ a"), "chat template syntax error at line 3, column 1: unclosed '{{' (missing '}}')");
  EXPECT_EQ(ErrorOf("{# open"), "chat template syntax error at line 1, column 1: unclosed comment (missing '#}')");
  EXPECT_EQ(ErrorOf("{% frob %}"), "chat template syntax error at line 1, column 1: unknown tag 'frob'");
  EXPECT_EQ(ErrorOf("{{ a b }}"), "chat template syntax error at line 1, column 6: unexpected 'b' in print statement");
}

TEST(JinjaRuntimeErrors, CarryExpressionPosition) {
  EXPECT_EQ(ErrorOf("x\n  {{ nope.attr }}"), "chat template error at line 2, column 10: 'nope' is undefined");
  EXPECT_EQ(ErrorOf("{{ 'a' + 1 }}"), "chat template error at line 1, column 8: can only concatenate str (not \"int\") to str");
  EXPECT_EQ(ErrorOf("{{ 1 // 0 }}"), "chat template error at line 1, column 6: integer division or modulo by zero");
  EXPECT_EQ(ErrorOf("{{ 'x' in none }}"), "chat template error at line 1, column 8: argument of type 'NoneType' is not iterable");
  EXPECT_EQ(ErrorOf("{{ m[0].role }}", {{"m", Json::array()}}),
            "chat template error at line 1, column 8: list object has no element 0");
  EXPECT_EQ(ErrorOf("{% for x in 3 %}{% endfor %}"), "chat template error at line 1, column 13: 'int' object is not iterable");
  EXPECT_EQ(ErrorOf("{{ x() }}", {{"x", 1}}), "chat template error at line 1, column 5: 'int' object is not callable");
  EXPECT_EQ(ErrorOf("{% set a.b = 1 %}"), "chat template error at line 1, column 1: cannot assign attribute 'b' on 'a': not a namespace()");
}

TEST(JinjaUndefined, LenientWhereJinja2IsLenient) {
  Template t("[{{ u }}][{{ u | length }}][{{ u is defined }}][{% for x in u %}x{% endfor %}][{{ u | default('d') }}]"
             "[{{ d.missing }}][{{ d.missing is none }}][{{ 'a' if u else 'b' }}][{{ u == none }}][{{ u ~ 'k' }}]");
  EXPECT_EQ(t.Render(Json{{"d", Json::object()}}), "[][0][False][][d][][False][b][False][k]");
  EXPECT_THROW(Template("{{ u + 1 }}").Render(Json::object()), TemplateError);
  EXPECT_THROW(Template("{{ u.x }}").Render(Json::object()), TemplateError);
  EXPECT_THROW(Template("{{ u['x'] }}").Render(Json::object()), TemplateError);
  EXPECT_THROW(Template("{{ u | tojson }}").Render(Json::object()), TemplateError);
}

TEST(JinjaRuntimeErrors, RunawayRecursionIsAnErrorNotACrash) {
  EXPECT_THROW(Template("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").Render(Json::object()), TemplateError);
  EXPECT_THROW(Template("{{ range(1000000) | length }}").Render(Json::object()), TemplateError);
}

TEST(JinjaChatTemplateWrapper, BadInputsAreErrors) {
  EXPECT_THROW(ChatTemplate("{% if %}", "", ""), TemplateError);
  ChatTemplate t("{{ messages | length }}", "", "");
  EXPECT_THROW(t.Render(Json::object()), TemplateError);
  EXPECT_EQ(t.Render(Json::array({Json{{"role", "user"}, {"content", "x"}}})), "1");
}

}  // namespace
}  // namespace pg::jinja

namespace pg::jinja {
namespace {

TEST(JinjaHostileTemplates, DeepNestingFailsCleanly) {
  const std::string deep_parens = fmt::format("{{{{ {}1{} }}}}", std::string(100000, '('), std::string(100000, ')'));
  EXPECT_THROW(Template{deep_parens}, TemplateError);
  std::string deep_ifs;
  for (int i = 0; i < 5000; ++i) deep_ifs += "{% if true %}";
  EXPECT_THROW(Template{deep_ifs}, TemplateError);
  std::string long_chain = "{{ 1";
  for (int i = 0; i < 200000; ++i) long_chain += " + 1";
  long_chain += " }}";
  EXPECT_THROW(Template(long_chain).Render(Json::object()), TemplateError);
  EXPECT_THROW(Template("{% for a, b in [1, 2] %}{% endfor %}").Render(Json::object()), TemplateError);
  EXPECT_THROW(Template("{% set a, b = 1 %}").Render(Json::object()), TemplateError);
  EXPECT_THROW(Template("{{ x.99999999999999999999999 }}"), TemplateError);
  EXPECT_THROW(Template("{{ 99999999999999999999999 }}"), TemplateError);
  EXPECT_EQ(Template("{{ 1e999 }}").Render(Json::object()), "inf");
  EXPECT_THROW(Template("{{ '{99999999999999}'.format(1) }}").Render(Json::object()), TemplateError);
  // Deeply nested request JSON is rejected, not recursed into.
  Json deep = "leaf";
  for (int i = 0; i < 1000; ++i) deep = Json::array({std::move(deep)});
  ChatTemplate chat("{{ messages | length }}", "", "");
  EXPECT_THROW(chat.Render(Json::array({Json{{"role", "user"}, {"content", deep}}})), TemplateError);
  // 64-bit integer overflow is an error, never undefined behaviour.
  for (const char* src : {"{{ 2 ** 64 }}", "{{ 9223372036854775807 + 1 }}", "{{ 4611686018427387904 * 4 }}",
                          "{{ -9223372036854775807 - 2 }}", "{{ 'ab' * 9223372036854775807 }}"}) {
    EXPECT_THROW(Template(src).Render(Json::object()), TemplateError) << src;
  }
  EXPECT_EQ(Template("{{ 2 ** 62 + (2 ** 62 - 1) }} {{ 3 ** 39 }}").Render(Json::object()),
            "9223372036854775807 4052555153018976267");
  // Moderate nesting still works.
  EXPECT_EQ(Template(fmt::format("{{{{ {}2{} * 3 }}}}", std::string(50, '('), std::string(50, ')'))).Render(Json::object()), "6");
}

// Random token soup: every outcome must be a rendered string or a TemplateError, never a crash.
TEST(JinjaHostileTemplates, RandomTokenSoupNeverCrashes) {
  const std::vector<std::string> pieces = {
      "{{", "}}", "{%", "%}", "{#", "#}", "{%-", "-%}", "{{-", "-}}", " if ", " for ", " in ", " endif ", " endfor ",
      " else ", " set ", " = ", " x ", " xs ", " loop.index ", " | ", " trim ", " tojson ", "(", ")", "[", "]", "{", "}",
      ",", ":", "'s'", "\"q\"", " 1 ", " 2.5 ", " + ", " - ", " * ", " / ", " // ", " % ", " ** ", " ~ ", " not ", " and ",
      " or ", " is ", " defined ", " none ", " macro ", " endmacro ", " m ", " namespace ", " . ", "text", "\n", "  ",
      " raise_exception ", " range ", " [::-1] ", " break ", " continue ", " call ", " endcall ", " filter ", " upper "};
  std::mt19937 rng(99);
  Json ctx = {{"x", "abc"}, {"xs", {1, 2, 3}}};
  int num_rendered = 0, num_errors = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string src;
    int n = 1 + static_cast<int>(rng() % 30);
    for (int k = 0; k < n; ++k) src += pieces[rng() % pieces.size()];
    try {
      Template(src).Render(ctx);
      ++num_rendered;
    } catch (const TemplateError&) {
      ++num_errors;
    }
  }
  EXPECT_EQ(num_rendered + num_errors, 3000);
  EXPECT_GT(num_rendered, 0);
  EXPECT_GT(num_errors, 0);
}

}  // namespace
}  // namespace pg::jinja
