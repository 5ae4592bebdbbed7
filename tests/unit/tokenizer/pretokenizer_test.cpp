// Pre-tokenizer splits: hand-derived expectations for the family regexes, and the fused
// SmolLM2 pattern checked piece for piece against the two-step split it replaces.
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/status.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/unicode.h"

namespace pg::tokenizer {
namespace {

std::vector<std::string> SplitWith(const PreTokenizer& pre, std::string_view text) {
  std::vector<Piece> pieces, scratch;
  pre.Split(text, &pieces, &scratch);
  std::vector<std::string> out;
  for (const Piece& p : pieces) out.emplace_back(text.substr(p.begin, p.end - p.begin));
  return out;
}

PreTokenizer Steps(std::initializer_list<std::string_view> patterns) {
  std::vector<PreTokenizeStep> steps;
  for (auto p : patterns) steps.push_back({std::make_shared<const Regex>(p), SplitBehavior::kIsolated});
  return PreTokenizer(std::move(steps));
}

using V = std::vector<std::string>;

TEST(PreTokenizer, FamilyRegexesSplitAsSpecified) {
  const PreTokenizer gpt2 = Steps({kGpt2Pattern});
  EXPECT_EQ(SplitWith(gpt2, "Hello world's   x\n\n12345!!"),
            (V{"Hello", " world", "'s", "  ", " x", "\n", "\n", "12345", "!!"}));
  const PreTokenizer smol = PreTokenizer(PreTokenizeStepsForFamily("smollm"));
  EXPECT_EQ(SplitWith(smol, "ab 123  4x"), (V{"ab", " ", "1", "2", "3", "  ", "4", "x"}));
  const PreTokenizer llama = Steps({kLlama3Pattern});
  EXPECT_EQ(SplitWith(llama, "I'M 1234567 ok\n\n  x"),
            (V{"I", "'M", " ", "123", "456", "7", " ok", "\n\n", " ", " x"}));
  const PreTokenizer qwen = Steps({kQwen2Pattern});
  EXPECT_EQ(SplitWith(qwen, "x=12;\r\n\tfoo"), (V{"x", "=", "1", "2", ";\r\n", "\tfoo"}));
  // \p{L} and \s are Unicode-aware (UCP): CJK letters, NBSP and ideographic space.
  EXPECT_EQ(SplitWith(gpt2, "日本 語\u00a0x\u3000y"),
            (V{"日本", " 語", "\u00a0", "x", "\u3000", "y"}));
}

TEST(PreTokenizer, EmptyMatchesOnlySplit) {
  const PreTokenizer b = Steps({R"(\b)"});
  EXPECT_EQ(SplitWith(b, "ab cd"), (V{"ab", " ", "cd"}));
  EXPECT_TRUE(SplitWith(b, "").empty());
}

TEST(PreTokenizer, UnknownFamilyAndBadPatternAreErrors) {
  try {
    PreTokenizeStepsForFamily("tekken9");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("tekken9"), std::string::npos);
  }
  EXPECT_THROW(Regex("(unclosed"), Error);
}

// The fused single-pass SmolLM2 pattern must equal Digits(individual) + GPT-2 regex.
TEST(PreTokenizer, FusedSmolLmEqualsTwoStepSplit) {
  const PreTokenizer two_step = Steps({R"(\p{N})", kGpt2Pattern});
  const PreTokenizer fused = Steps({kSmolLmFusedPattern});
  const std::vector<std::string> alphabet = {
      " ", " ", "  ", "\n", "\t", "\r\n", "a", "Z", "é", "日", "1", "9", "٣", "½", "Ⅻ", "'",
      "'s", "'ll", "!", ".", "_", "-", "\u00a0", "\u3000", "😀", "\u0301", "x1", "'1"};
  std::mt19937 rng(2024);
  for (int trial = 0; trial < 5000; ++trial) {
    std::string text;
    const int n = 1 + int(rng() % 24);
    for (int i = 0; i < n; ++i) text += alphabet[rng() % alphabet.size()];
    ASSERT_EQ(SplitWith(fused, text), SplitWith(two_step, text)) << "text: [" << text << "]";
  }
}

}  // namespace
}  // namespace pg::tokenizer
