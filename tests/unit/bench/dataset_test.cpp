// The evalscope SWE-smith file format: a valid file, a round trip, and malformed inputs.
#include <gtest/gtest.h>

#include "bench/dataset.h"
#include "core/status.h"

namespace pg::bench {
namespace {

TEST(EvalscopeDataset, ParsesFile) {
  Dataset d = LoadEvalscopeFile("tests/data/bench/evalscope_small.json");
  ASSERT_EQ(d.conversations.size(), 2u);
  EXPECT_EQ(d.num_skipped_empty, 1);
  const Conversation& c0 = d.conversations[0];
  ASSERT_EQ(c0.turns.size(), 2u);
  ASSERT_EQ(c0.turns[0].messages.size(), 2u);
  EXPECT_EQ(c0.turns[0].messages[0].role, "system");
  EXPECT_EQ(c0.turns[0].messages[1].content, "Fix the bug in parse_config.");
  EXPECT_EQ(c0.turns[0].prompt_tokens, 17);
  EXPECT_EQ(c0.turns[1].messages[0].content, "$ pytest\n1 failed");
  EXPECT_EQ(c0.turns[1].prompt_tokens, 40);
  const Conversation& c1 = d.conversations[1];
  EXPECT_EQ(c1.turns[0].messages[0].content, "part one\npart two");  // image part dropped
  EXPECT_EQ(c1.turns[0].prompt_tokens, -1);
  EXPECT_EQ(c1.turns[1].messages[0].role, "tool");
  EXPECT_EQ(c1.turns[1].prompt_tokens, -1);
}

TEST(EvalscopeDataset, RoundTrip) {
  Dataset d = LoadEvalscopeFile("tests/data/bench/evalscope_small.json");
  Dataset again = ParseEvalscopeJson(DatasetToEvalscopeJson(d), "round trip");
  ASSERT_EQ(again.conversations.size(), d.conversations.size());
  for (size_t c = 0; c < d.conversations.size(); ++c) {
    ASSERT_EQ(again.conversations[c].turns.size(), d.conversations[c].turns.size());
    for (size_t t = 0; t < d.conversations[c].turns.size(); ++t) {
      const Turn& a = d.conversations[c].turns[t];
      const Turn& b = again.conversations[c].turns[t];
      EXPECT_EQ(a.prompt_tokens, b.prompt_tokens);
      ASSERT_EQ(a.messages.size(), b.messages.size());
      for (size_t m = 0; m < a.messages.size(); ++m) {
        EXPECT_EQ(a.messages[m].role, b.messages[m].role);
        EXPECT_EQ(a.messages[m].content, b.messages[m].content);
      }
    }
  }
}

TEST(EvalscopeDataset, MissingFile) {
  try {
    LoadEvalscopeFile("tests/data/bench/no_such_file.json");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  }
}

struct MalformedCase {
  const char* name;
  const char* json;
  const char* message_part;  // the error must point at the problem
};

class EvalscopeMalformed : public ::testing::TestWithParam<MalformedCase> {};

TEST_P(EvalscopeMalformed, ThrowsMalformed) {
  const MalformedCase& c = GetParam();
  try {
    ParseEvalscopeJson(c.json, "case.json");
    FAIL() << c.name << ": expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kMalformed) << c.name;
    EXPECT_NE(std::string(e.what()).find(c.message_part), std::string::npos)
        << c.name << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find("case.json"), std::string::npos) << e.what();
  }
}

constexpr char kGoodTurn[] = R"({"messages":[{"role":"user","content":"x"}]})";

INSTANTIATE_TEST_SUITE_P(
    Cases, EvalscopeMalformed,
    ::testing::Values(
        MalformedCase{"truncated", R"({"conversations": [[{"messages": [)", "not valid JSON"},
        MalformedCase{"not an object", R"([1, 2])", "\"conversations\""},
        MalformedCase{"no conversations", R"({"convs": []})", "\"conversations\""},
        MalformedCase{"conversations not a list", R"({"conversations": {}})", "must be a list"},
        MalformedCase{"conversation not a list", R"({"conversations": [{"a": 1}]})",
                      "conversation 0"},
        MalformedCase{"turn without messages", R"({"conversations": [[{"prompt_tokens": 3}]]})",
                      "conversation 0 turn 0"},
        MalformedCase{"empty messages", R"({"conversations": [[{"messages": []}]]})",
                      "is empty"},
        MalformedCase{"message without role",
                      R"({"conversations": [[{"messages":[{"content":"x"}]}]]})", "role"},
        MalformedCase{"unknown role",
                      R"({"conversations": [[{"messages":[{"role":"robot","content":"x"}]}]]})",
                      "robot"},
        MalformedCase{"content is a number",
                      R"({"conversations": [[{"messages":[{"role":"user","content":5}]}]]})",
                      "content"},
        MalformedCase{"negative prompt_tokens",
                      R"({"conversations": [[{"messages":[{"role":"user","content":"x"}],
                         "prompt_tokens": -4}]]})",
                      "prompt_tokens"},
        MalformedCase{"second conversation bad",
                      R"({"conversations": [[{"messages":[{"role":"user","content":"x"}]}],
                                            [{"messages":[{"role":"user"}]}]]})",
                      "conversation 1 turn 0 message 0"}));

TEST(EvalscopeDataset, GoodTurnConstantIsValid) {
  // Guards the malformed cases above: they differ from a valid file only where intended.
  Dataset d = ParseEvalscopeJson(std::string(R"({"conversations": [[)") + kGoodTurn + "]]}", "ok");
  ASSERT_EQ(d.conversations.size(), 1u);
  EXPECT_EQ(d.conversations[0].turns[0].messages[0].content, "x");
}

}  // namespace
}  // namespace pg::bench
