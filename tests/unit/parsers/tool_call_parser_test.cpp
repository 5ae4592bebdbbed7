// Tool-call parsers on real markup (as written by each model family's published chat template),
// fed whole and in random pieces. Expected calls are written out by hand from the markup; the
// argument text is compared as parsed JSON against an independently written JSON value.
#include "tokenizer/parsers/tool_call_parser.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "split_feed.h"

namespace pg::parsers {
namespace {

using nlohmann::json;

struct Expected {
  std::string content;
  std::vector<std::pair<std::string, json>> calls;  // (name, arguments)
};

struct Outcome {
  ToolCallAccumulator acc;
  int num_deltas_with_args = 0;  // how many pieces carried argument bytes
};

Outcome RunParser(ToolFormat format, std::string_view text, uint64_t seed, std::string_view force = {},
            bool forced = false) {
  auto parser = MakeToolCallParser(format);
  Outcome out;
  if (forced) parser->ForceCall(force);
  for (const auto& piece : testing::RandomSplit(text, seed)) {
    ParsedDelta d = parser->Feed(piece);
    for (const auto& c : d.tool_calls) out.num_deltas_with_args += !c.arguments.empty();
    out.acc.Add(d);
  }
  out.acc.Add(parser->Finish());
  return out;
}

void ExpectParsed(ToolFormat format, std::string_view text, const Expected& want,
                  std::string_view force = {}, bool forced = false) {
  for (uint64_t seed = 0; seed < 40; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    Outcome got = RunParser(format, text, seed, force, forced);
    EXPECT_EQ(got.acc.content, want.content);
    ASSERT_EQ(got.acc.calls.size(), want.calls.size());
    for (size_t i = 0; i < want.calls.size(); ++i) {
      EXPECT_EQ(got.acc.calls[i].name, want.calls[i].first);
      EXPECT_FALSE(got.acc.calls[i].id.empty());
      json args;
      ASSERT_NO_THROW(args = json::parse(got.acc.calls[i].arguments)) << got.acc.calls[i].arguments;
      EXPECT_EQ(args, want.calls[i].second);
    }
  }
}

TEST(HermesParser, TwoCallsAfterText) {
  const std::string text =
      "Let me look that up.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
      "{\"location\": \"Paris, FR\", \"unit\": \"celsius\"}}\n</tool_call>\n<tool_call>\n"
      "{\"name\": \"get_time\", \"arguments\": {\"tz\": \"Europe/Paris\", \"hours\": [1, 2.5]}}"
      "\n</tool_call>";
  ExpectParsed(ToolFormat::kHermes, text,
               {"Let me look that up.\n",
                {{"get_weather", {{"location", "Paris, FR"}, {"unit", "celsius"}}},
                 {"get_time", {{"tz", "Europe/Paris"}, {"hours", {1, 2.5}}}}}});
}

// Seen from a small model on a forced call: the closing tag comes before the call object's
// closing brace. The arguments are complete, so the call stands and the tag ends it.
TEST(HermesParser, CloseTagBeforeTheObjectCloses) {
  const std::string text =
      "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}</tool_call>"
      "The weather in Paris is sunny.";
  ExpectParsed(ToolFormat::kHermes, text,
               {"The weather in Paris is sunny.",
                {{"get_weather",
                  {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}},
               "get_weather", /*forced=*/true);
}

TEST(HermesParser, BracesQuotesAndMarkupInsideStrings) {
  // Braces, escaped quotes, a fake closing tag and non-ASCII text inside argument strings.
  const std::string text =
      "<tool_call>\n{\"name\": \"run_code\", \"arguments\": {\"code\": \"if (x) { return \\\"}\\\"; "
      "} // </tool_call>\", \"note\": \"naïve — ok\", \"n\": -3}}\n</tool_call>";
  ExpectParsed(ToolFormat::kHermes, text,
               {"",
                {{"run_code",
                  {{"code", "if (x) { return \"}\"; } // </tool_call>"},
                   {"note", "naïve — ok"},
                   {"n", -3}}}}});
}

TEST(HermesParser, PlainTextWithAngleBracketsIsContent) {
  const std::string text = "Use <b>bold</b> or <tool> tags; 3 < 4 and <tool_cal is not a call.";
  ExpectParsed(ToolFormat::kHermes, text, {text, {}});
}

TEST(HermesParser, ArgumentsStreamBeforeTheCallEnds) {
  auto parser = MakeToolCallParser(ToolFormat::kHermes);
  ParsedDelta d = parser->Feed("<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"best ");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].name, "search");
  EXPECT_EQ(d.tool_calls[0].index, 0);
  EXPECT_EQ(d.tool_calls[0].arguments, "{\"query\": \"best ");
  ParsedDelta d2 = parser->Feed("pizza\"}}\n</tool_call>");
  ASSERT_EQ(d2.tool_calls.size(), 1u);
  EXPECT_TRUE(d2.tool_calls[0].name.empty());  // continuation delta: no name/id
  EXPECT_TRUE(d2.tool_calls[0].id.empty());
  EXPECT_EQ(d2.tool_calls[0].arguments, "pizza\"}");
  EXPECT_EQ(parser->num_calls(), 1);
}

TEST(HermesParser, ForcedNamedCall) {
  // tool_choice {"function": {"name": "get_weather"}}: the prompt ends with the forced prefix and
  // the model continues from the arguments value.
  ExpectParsed(ToolFormat::kHermes, "{\"location\": \"Oslo\"}}\n</tool_call>",
               {"", {{"get_weather", {{"location", "Oslo"}}}}}, "get_weather", true);
  auto parser = MakeToolCallParser(ToolFormat::kHermes);
  const std::string prefix = parser->ForceCall("get_weather");
  EXPECT_EQ(prefix, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ");
}

// A named call whose arguments are constrained to a schema ends at the arguments' last byte (the
// output's EOS follows it): every format reports the call from the arguments alone.
TEST(ToolCallParsers, ForcedNamedCallEndingAtTheArguments) {
  for (ToolFormat f : {ToolFormat::kHermes, ToolFormat::kLlama31, ToolFormat::kDeepSeekV3, ToolFormat::kKimiK2}) {
    SCOPED_TRACE(ToolFormatName(f));
    ExpectParsed(f, "{\"location\": \"Oslo\", \"days\": [1, 2]}",
                 {"", {{"get_weather", {{"location", "Oslo"}, {"days", {1, 2}}}}}}, "get_weather", true);
  }
}

// tool_choice "required" under a schema: the prompt ends before the call's object, which the
// output then is in full (EOS right after it).
TEST(ToolCallParsers, ForcedCallObject) {
  for (ToolFormat f : {ToolFormat::kHermes, ToolFormat::kLlama31}) {
    SCOPED_TRACE(ToolFormatName(f));
    const std::string key(MakeToolCallParser(f)->call_object_key());
    ASSERT_FALSE(key.empty());
    const std::string text = "{\"name\": \"get_time\", \"" + key + "\": {\"tz\": \"UTC\"}}";
    for (uint64_t seed = 0; seed < 20; ++seed) {
      auto parser = MakeToolCallParser(f);
      const std::string prefix = parser->ForceCallObject();
      EXPECT_EQ(prefix, f == ToolFormat::kHermes ? "<tool_call>\n" : "");
      ToolCallAccumulator acc;
      for (const auto& piece : testing::RandomSplit(text, seed)) acc.Add(parser->Feed(piece));
      acc.Add(parser->Finish());
      EXPECT_EQ(acc.content, "");
      ASSERT_EQ(acc.calls.size(), 1u);
      EXPECT_EQ(acc.calls[0].name, "get_time");
      EXPECT_EQ(json::parse(acc.calls[0].arguments), json({{"tz", "UTC"}}));
    }
  }
  EXPECT_TRUE(MakeToolCallParser(ToolFormat::kDeepSeekV3)->call_object_key().empty());
  EXPECT_TRUE(MakeToolCallParser(ToolFormat::kKimiK2)->call_object_key().empty());
}

TEST(HermesParser, ForcedRequiredCallModelPicksName) {
  ExpectParsed(ToolFormat::kHermes,
               "get_time\", \"arguments\": {\"tz\": \"UTC\"}}\n</tool_call>",
               {"", {{"get_time", {{"tz", "UTC"}}}}}, "", true);
}

TEST(HermesParser, TruncatedCallKeepsPartialArguments) {
  Outcome got = RunParser(ToolFormat::kHermes,
                    "<tool_call>\n{\"name\": \"write\", \"arguments\": {\"text\": \"abc", 3);
  ASSERT_EQ(got.acc.calls.size(), 1u);
  EXPECT_EQ(got.acc.calls[0].name, "write");
  EXPECT_EQ(got.acc.calls[0].arguments, "{\"text\": \"abc");
}

TEST(HermesParser, QuotedArgumentsAreDecoded) {
  ExpectParsed(ToolFormat::kHermes,
               "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}\n</tool_call>",
               {"", {{"f", {{"a", 1}}}}});
}

TEST(Llama31Parser, BareJsonCall) {
  ExpectParsed(ToolFormat::kLlama31,
               "{\"name\": \"get_weather\", \"parameters\": {\"location\": \"San Francisco, CA\", "
               "\"days\": 3}}",
               {"", {{"get_weather", {{"location", "San Francisco, CA"}, {"days", 3}}}}});
}

TEST(Llama31Parser, PythonTagAndSemicolonSeparatedCalls) {
  ExpectParsed(ToolFormat::kLlama31,
               "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": 1}}; {\"name\": \"b\", "
               "\"parameters\": {}}",
               {"", {{"a", {{"x", 1}}}, {"b", json::object()}}});
}

TEST(Llama31Parser, TextAndNonCallJsonAreContent) {
  ExpectParsed(ToolFormat::kLlama31, "The set {1, 2} has two elements.",
               {"The set {1, 2} has two elements.", {}});
  ExpectParsed(ToolFormat::kLlama31, "{\"answer\": 42, \"why\": \"{}\"}",
               {"{\"answer\": 42, \"why\": \"{}\"}", {}});
}

TEST(DeepSeekV3Parser, TemplateMarkupTwoCalls) {
  // As rendered by the DeepSeek-V3 chat template for an assistant message with tool_calls.
  const std::string text =
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
      "{\"location\": \"Hangzhou\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function"
      "<｜tool▁sep｜>get_time\n```json\n{\"city\": \"東京\", \"fmt\": \"`%H`\"}\n```"
      "<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  ExpectParsed(ToolFormat::kDeepSeekV3, text,
               {"",
                {{"get_weather", {{"location", "Hangzhou"}}},
                 {"get_time", {{"city", "東京"}, {"fmt", "`%H`"}}}}});
}

TEST(DeepSeekV3Parser, V31MarkupAfterText) {
  const std::string text =
      "I will check.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
      "{\"location\": \"Tokyo\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  ExpectParsed(ToolFormat::kDeepSeekV3, text,
               {"I will check.", {{"get_weather", {{"location", "Tokyo"}}}}});
}

TEST(DeepSeekV3Parser, ForcedNamedCall) {
  ExpectParsed(ToolFormat::kDeepSeekV3,
               "{\"q\": 7}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
               {"", {{"lookup", {{"q", 7}}}}}, "lookup", true);
}

TEST(KimiK2Parser, DocsMarkupTwoCalls) {
  // Format of the Kimi-K2 tool-call guidance: id "functions.NAME:IDX".
  const std::string text =
      "<|tool_calls_section_begin|>\n<|tool_call_begin|>functions.get_weather:0\n"
      "<|tool_call_argument_begin|>{\"city\": \"Beijing\"}<|tool_call_end|>\n"
      "<|tool_call_begin|>functions.get_weather:1<|tool_call_argument_begin|>"
      "{\"city\": \"Shanghai\"}<|tool_call_end|>\n<|tool_calls_section_end|>";
  ExpectParsed(ToolFormat::kKimiK2, text,
               {"", {{"get_weather", {{"city", "Beijing"}}}, {"get_weather", {{"city", "Shanghai"}}}}});
  Outcome got = RunParser(ToolFormat::kKimiK2, text, 5);
  ASSERT_EQ(got.acc.calls.size(), 2u);
  EXPECT_EQ(got.acc.calls[0].id, "functions.get_weather:0");
  EXPECT_EQ(got.acc.calls[1].id, "functions.get_weather:1");
}

TEST(KimiK2Parser, ContentThenForcedCall) {
  ExpectParsed(ToolFormat::kKimiK2,
               "{\"path\": \"/tmp/a b\"}<|tool_call_end|><|tool_calls_section_end|>",
               {"", {{"read_file", {{"path", "/tmp/a b"}}}}}, "read_file", true);
  ExpectParsed(ToolFormat::kKimiK2, "No tools needed: 2 + 2 = 4 <|im", {"No tools needed: 2 + 2 = 4 <|im", {}});
}

TEST(ToolFormat, Names) {
  EXPECT_EQ(ToolFormatFromName("qwen"), ToolFormat::kHermes);
  EXPECT_EQ(ToolFormatFromName("kimi_k2"), ToolFormat::kKimiK2);
  EXPECT_STREQ(ToolFormatName(ToolFormat::kDeepSeekV3), "deepseek_v3");
  EXPECT_THROW(ToolFormatFromName("mistral7"), pg::Error);
  EXPECT_EQ(PartialMarkerSuffix("abc<tool_", "<tool_call>"), 6u);
  EXPECT_EQ(PartialMarkerSuffix("abc", "<tool_call>"), 0u);
}

}  // namespace
}  // namespace pg::parsers
