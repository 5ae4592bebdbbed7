#include "tokenizer/parsers/reasoning_parser.h"

#include <gtest/gtest.h>

#include "split_feed.h"

namespace pg::parsers {
namespace {

ReasoningDelta RunSplit(std::string_view text, bool starts_in_reasoning, uint64_t seed) {
  ReasoningParser parser(starts_in_reasoning);
  ReasoningDelta all;
  for (const auto& piece : testing::RandomSplit(text, seed)) {
    ReasoningDelta d = parser.Feed(piece);
    all.reasoning += d.reasoning;
    all.content += d.content;
  }
  ReasoningDelta d = parser.Finish();
  all.reasoning += d.reasoning;
  all.content += d.content;
  return all;
}

void Expect(std::string_view text, bool starts, std::string_view reasoning, std::string_view content) {
  for (uint64_t seed = 0; seed < 30; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    ReasoningDelta got = RunSplit(text, starts, seed);
    EXPECT_EQ(got.reasoning, reasoning);
    EXPECT_EQ(got.content, content);
  }
}

TEST(ReasoningParser, ThinkBlockThenAnswer) {
  Expect("<think>\nThe user asks 2+2. That is 4.\n</think>\n\nThe answer is 4.", false,
         "\nThe user asks 2+2. That is 4.\n", "The answer is 4.");
}

TEST(ReasoningParser, TemplateOpenedThink) {
  // Qwen3 / DeepSeek-R1 templates end the prompt with "<think>\n": output starts inside it.
  Expect("Compare 9.11 and 9.9 < 10.</think>9.9 is larger.", true, "Compare 9.11 and 9.9 < 10.",
         "9.9 is larger.");
}

TEST(ReasoningParser, NoThinkIsAllContent) {
  Expect("  Hello <thin world", false, "", "  Hello <thin world");
  Expect("<thinking is not a tag", false, "", "<thinking is not a tag");
}

TEST(ReasoningParser, UnclosedThinkStaysReasoning) {
  Expect("<think>still going </thi", false, "still going </thi", "");
}

TEST(ReasoningParser, LaterThinkTagIsContent) {
  Expect("Answer: use <think> tags", false, "", "Answer: use <think> tags");
}

}  // namespace
}  // namespace pg::parsers
