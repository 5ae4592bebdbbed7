// JSON mode: the byte-level matcher against hand-written JSON (valid objects, every kind of
// invalid prefix), checked prefix by prefix with nlohmann::json's own parser as the oracle of
// the complete texts, and the token mask / sampler on a small token table.
#include "runtime/json_constraint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mask_checks.h"
#include "runtime/sampler.h"

namespace pg::runtime {
namespace {

// The oracle: nlohmann::json's parser (any JSON text, not only objects).
bool ParsesAsJson(const std::string& text) {
  return !nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false).is_discarded();
}

// The longest prefix the matcher accepts; == text.size() when all of it is.
size_t AcceptedPrefix(const std::string& text, bool* done = nullptr) {
  JsonMatcher m;
  size_t i = 0;
  while (i < text.size() && m.Accept(uint8_t(text[i]))) ++i;
  if (done) *done = m.done();
  return i;
}

TEST(JsonMatcher, AcceptsObjectsNlohmannParses) {
  const std::vector<std::string> ok = {
      "{}",
      " \n{ }",
      R"({"a":1})",
      R"({"a": -0.5e+10, "b": [1, 2.25, -3E-2, 0], "c": {"d": [true, false, null, {}]}})",
      R"({"s": "esc \" \\ \/ \b \f \n \r \t \u00e9 \uD83D\uDE00", "u": "héllo ✓"})",
      R"({"empty": [], "nested": [[[]], [{}]], "k": ""})",
      R"({"n":0,"m":10,"f":1.0e5})",
  };
  for (const std::string& t : ok) {
    SCOPED_TRACE(t);
    ASSERT_TRUE(ParsesAsJson(t));  // the oracle agrees it is JSON
    bool done = false;
    EXPECT_EQ(AcceptedPrefix(t, &done), t.size());
    EXPECT_TRUE(done);
  }
}

TEST(JsonMatcher, RejectsAtTheFirstBadByte) {
  // text, length of its longest valid prefix
  // JSON, but not an object at the top level: JSON mode asks for an object.
  EXPECT_EQ(AcceptedPrefix("[1]"), 0u);
  EXPECT_EQ(AcceptedPrefix("\"s\""), 0u);
  EXPECT_EQ(AcceptedPrefix("{} "), 2u);  // nothing, not even whitespace, after the object
  const std::vector<std::pair<std::string, size_t>> bad = {
      {"{a:1}", 1},               // unquoted key
      {R"({"a" 1})", 5},          // missing colon
      {R"({"a":01})", 6},         // leading zero
      {R"({"a":1.})", 7},         // '.' without a digit
      {R"({"a":-})", 6},          // '-' without a digit
      {R"({"a":1e})", 7},         // exponent without a digit
      {R"({"a":tru})", 8},        // broken literal
      {R"({"a":1,})", 7},         // trailing comma
      {R"({"a":[1,]})", 8},
      {R"({"a":"x\q"})", 8},      // bad escape
      {R"({"a":"\u12G4"})", 10},  // bad hex digit
      {"{\"a\":\"x\ny\"}", 7},    // control byte in a string
      {R"({"a":1]})", 6},         // wrong closer
      {R"({}x)", 2},              // nothing after the object
  };
  for (const auto& [t, n] : bad) {
    SCOPED_TRACE(t);
    EXPECT_FALSE(ParsesAsJson(t));  // the oracle agrees
    EXPECT_EQ(AcceptedPrefix(t), n);
  }
}

TEST(JsonMatcher, BoundsWhitespaceAndDepth) {
  std::string ws = "{" + std::string(JsonMatcher::kMaxWhitespace, ' ');
  EXPECT_EQ(AcceptedPrefix(ws), ws.size());
  EXPECT_EQ(AcceptedPrefix(ws + " "), ws.size());  // one more whitespace byte: rejected
  std::string deep = "{\"a\":" + std::string(JsonMatcher::kMaxDepth - 1, '[');
  EXPECT_EQ(AcceptedPrefix(deep), deep.size());
  EXPECT_EQ(AcceptedPrefix(deep + "["), deep.size());
}

// Token ids: 0 EOS (special), 1 "<tool>" (special), then text pieces.
std::shared_ptr<const TokenTable> SmallTable() {
  std::vector<std::string> pieces = {"</s>", "<tool>", "{", "}", "{\"", "\":", "name", " ",
                                     "\"", "1", "12}", "x", "\"}", ",", "\n", "[", "]", ":"};
  std::vector<uint8_t> special(pieces.size(), 0);
  special[0] = special[1] = 1;
  return std::make_shared<const TokenTable>(TokenTable::Make(pieces, special, {0}));
}

TEST(JsonConstraint, MasksByTokenBytes) {
  auto table = SmallTable();
  const size_t vocab = table->bytes.size() + 3;  // logits wider than the table: extra ids masked
  JsonConstraint c(table);
  EXPECT_EQ(AllowedIds(c, vocab), (std::vector<int32_t>{2, 4, 7, 14}));  // "{", "{\"", " ", "\n"
  c.Accept(4);  // {"
  // In a key: every plain piece, and those whose '"' closes the key before a ':' ('{"', '":',
  // '"'), but not '"}' (a key needs ':') nor a control byte ('\n').
  EXPECT_EQ(AllowedIds(c, vocab), (std::vector<int32_t>{2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 16, 17}));
  c.Accept(6);   // name
  c.Accept(5);   // ":
  c.Accept(10);  // 12}
  EXPECT_TRUE(c.can_end());
  EXPECT_EQ(AllowedIds(c, vocab), (std::vector<int32_t>{0}));  // only EOS once closed
}

TEST(JsonConstraint, GreedySamplingFollowsTheMask) {
  // The raw logits prefer "x" (invalid everywhere outside a string) and then "}"; JSON mode
  // must still produce an object and stop with EOS.
  auto table = SmallTable();
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_logprobs = 0;
  p.token_table = table;
  SamplerState st(p, {}, 1);
  std::string text;
  for (int step = 0; step < 8; ++step) {
    std::vector<float> logits(table->bytes.size(), 0.0f);
    logits[11] = 9.0f;  // "x"
    logits[3] = 8.0f;   // "}"
    logits[2] = 7.0f;   // "{"
    const SampledToken t = Sample(logits, st);
    if (t.token == 0) break;
    text += table->bytes[size_t(t.token)];
    // logprobs are the raw logits' (the mask does not renormalise them)
    EXPECT_LT(t.logprob, -1.0f);
  }
  EXPECT_EQ(text, "{}");
  EXPECT_TRUE(st.constraint()->can_end());
  EXPECT_TRUE(ParsesAsJson(text));
}

// Also checks, at every step of 50 seeded walks, the mask against Allowed() token by token.
TEST(JsonConstraint, SeededSamplingAlwaysYieldsAnObject) {
  auto table = SmallTable();
  for (uint64_t seed = 0; seed < 50; ++seed) {
    SamplingParams p;
    p.token_table = table;
    // "}" favoured: an object closes in a few steps on most draws.
    const Walk w = CheckedWalk(p, seed, 400, [](std::vector<float>& row) { row[3] = 2.0f; }, "JSON mode");
    SCOPED_TRACE(w.text);
    ASSERT_TRUE(w.ended);
    EXPECT_TRUE(ParsesAsJson(w.text));
  }
}

TEST(JsonConstraint, TextEosOnlyAfterTheObject) {
  // An EOS whose bytes are plain text and not marked special (some GGUF vocabularies): it must
  // not pass as string content.
  auto table =
      std::make_shared<const TokenTable>(TokenTable::Make({"END", "{\"", "a", "\":1}"}, {0, 0, 0, 0}, {0}));
  JsonConstraint c(table);
  c.Accept(1);  // {"
  EXPECT_EQ(AllowedIds(c, 4), (std::vector<int32_t>{1, 2, 3}));  // key text and its close, not "END"
  c.Accept(3);
  EXPECT_EQ(AllowedIds(c, 4), (std::vector<int32_t>{0}));  // closed: EOS alone
}

TEST(JsonConstraint, EqualSpellingsAreAllKept) {
  // Two ids with one spelling (vocabularies have such duplicates) share a trie node.
  auto table = std::make_shared<const TokenTable>(
      TokenTable::Make({"</s>", "{", "{", "{}", "x"}, {1, 0, 0, 0, 0}, {0}));
  JsonConstraint c(table);
  EXPECT_EQ(AllowedIds(c, 5), (std::vector<int32_t>{1, 2, 3}));
}

TEST(JsonConstraint, NoContinuationFallsBackToEos) {
  // A vocabulary without '{': nothing can start the object, so only EOS stays drawable.
  auto table = std::make_shared<const TokenTable>(TokenTable::Make({"</s>", "a", "b"}, {1, 0, 0}, {0}));
  JsonConstraint c(table);
  EXPECT_EQ(AllowedIds(c, 3), (std::vector<int32_t>{0}));
}

}  // namespace
}  // namespace pg::runtime
