// Stop strings, UTF-8 holdback and the parser chain, against simple oracles computed on the
// whole text (std::string::find), with the output pushed one token (byte) at a time.
#include "server/output_pipeline.h"

#include <gtest/gtest.h>

#include <random>

#include "fake_engine.h"

namespace pg::server {
namespace {

using testing::ByteTextModel;

// Oracle: grow the text one byte at a time; the first prefix that ends with a stop string
// (the longest one on a tie) decides where the output ends.
std::string Truncate(const std::string& text, const std::vector<std::string>& stops, bool& hit) {
  for (size_t end = 1; end <= text.size(); ++end) {
    size_t best_len = 0;
    for (const auto& s : stops)
      if (s.size() <= end && text.compare(end - s.size(), s.size(), s) == 0) best_len = std::max(best_len, s.size());
    if (best_len > 0) {
      hit = true;
      return text.substr(0, end - best_len);
    }
  }
  hit = false;
  return text;
}

std::string RandomText(std::mt19937& rng, size_t n) {
  static const std::vector<std::string> pieces = {"a", "b", "ab", "ba", " ", "é", "€", "😀", "\n", "<", ">"};
  std::string s;
  while (s.size() < n) s += pieces[rng() % pieces.size()];
  return s;
}

TEST(OutputPipeline, StopStringsMatchOracleOnRandomText) {
  ByteTextModel text;
  std::mt19937 rng(7);
  int num_hits = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const std::string out = RandomText(rng, 5 + rng() % 60);
    std::vector<std::string> stops;
    const int num_stops = 1 + rng() % 3;
    for (int k = 0; k < num_stops; ++k) stops.push_back(RandomText(rng, 1 + rng() % 4));
    bool hit = false;
    const std::string want = Truncate(out, stops, hit);
    num_hits += hit;

    OutputPipeline pipe(text, PipelineConfig{stops, {}, false, false, parsers::ToolFormat::kNone});
    std::string got;
    bool matched = false;
    for (unsigned char c : out) {
      const int32_t tok[1] = {c};
      got += pipe.Push(tok, matched).content;
      if (matched) break;
    }
    if (!matched) got += pipe.Finish().content;
    std::string all_stops;
    for (const auto& st : stops) all_stops += "[" + st + "]";
    ASSERT_EQ(matched, hit) << "text=" << out << " stops=" << all_stops;
    ASSERT_EQ(got, want) << "text=" << out << " stops=" << all_stops;
  }
  EXPECT_GT(num_hits, 50);  // the random cases exercise both outcomes
  EXPECT_LT(num_hits, 390);
}

TEST(OutputPipeline, NeverEmitsPartialUtf8OrHiddenTokens) {
  ByteTextModel text;
  OutputPipeline pipe(text, PipelineConfig{{}, {testing::kEos}, false, false, parsers::ToolFormat::kNone});
  const std::string s = "naïve 😀 ok";
  std::string got;
  bool matched = false;
  for (unsigned char c : s) {
    const int32_t tok[1] = {c};
    std::string piece = pipe.Push(tok, matched).content;
    // Every emitted piece is valid UTF-8 on its own: it ends on a sequence boundary.
    if (!piece.empty()) {
      const unsigned char last = piece.back();
      EXPECT_TRUE(last < 0x80 || (last & 0xC0) == 0x80);
    }
    got += piece;
  }
  const int32_t eos[1] = {testing::kEos};
  got += pipe.Push(eos, matched).content;
  got += pipe.Finish().content;
  EXPECT_EQ(got, s);
}

TEST(OutputPipeline, ReasoningThenToolCallThroughStopMatcher) {
  ByteTextModel text;
  PipelineConfig pc;
  pc.stop = {"<|im_end|>"};
  pc.parse_reasoning = true;
  pc.tool_format = parsers::ToolFormat::kHermes;
  OutputPipeline pipe(text, pc);
  const std::string out =
      "<think>need weather</think>\n\nChecking.<tool_call>\n{\"name\": \"w\", \"arguments\": {\"c\": \"Oslo\"}}\n"
      "</tool_call><|im_end|>ignored";
  std::string reasoning, content;
  parsers::ToolCallAccumulator acc;
  bool matched = false;
  for (unsigned char c : out) {
    const int32_t tok[1] = {c};
    OutputDelta d = pipe.Push(tok, matched);
    reasoning += d.reasoning;
    content += d.content;
    parsers::ParsedDelta p;
    p.tool_calls = d.tool_calls;
    acc.Add(p);
    if (matched) break;
  }
  EXPECT_TRUE(matched);
  EXPECT_EQ(reasoning, "need weather");
  EXPECT_EQ(content, "Checking.");
  ASSERT_EQ(acc.calls.size(), 1u);
  EXPECT_EQ(acc.calls[0].name, "w");
  EXPECT_EQ(nlohmann::json::parse(acc.calls[0].arguments), nlohmann::json({{"c", "Oslo"}}));
  EXPECT_TRUE(pipe.saw_tool_calls());
}

}  // namespace
}  // namespace pg::server
