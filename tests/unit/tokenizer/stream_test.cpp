// Streaming detokenizer: never emits a partial UTF-8 sequence, and its output concatenated
// equals Decode() (whose own correctness is checked against HF in golden_test).
#include <random>
#include <string>
#include <vector>

#include "tok_test_util.h"
#include "tokenizer/unicode.h"

namespace pg::tokenizer::testing {
namespace {

std::string StreamAll(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip,
                      bool check_each = true) {
  StreamDecoder dec(tok, skip);
  std::string all;
  for (int32_t id : ids) {
    const std::string part = dec.Push(id);
    if (check_each) {
      EXPECT_TRUE(IsValidUtf8(part)) << "partial UTF-8 emitted for id " << id;
    }
    all += part;
  }
  all += dec.Flush();
  return all;
}

TEST(StreamDecoder, MatchesDecodeOnGoldenCorpus) {
  for (const char* name : {"smollm2", "qwen", "llama3"}) {
    const Tokenizer& tok = HfTokenizer(name);
    for (const auto& c : Goldens(name)["cases"]) {
      const auto ids = c["ids"].get<std::vector<int32_t>>();
      EXPECT_EQ(StreamAll(tok, ids, false), c["decoded"].get<std::string>()) << name;
      EXPECT_EQ(StreamAll(tok, ids, true), c["decoded_skip_special"].get<std::string>()) << name;
    }
  }
}

TEST(StreamDecoder, HoldsSplitCharacterUntilComplete) {
  const Tokenizer& tok = HfTokenizer("smollm2");
  // "👍" is F0 9F 91 8D: feed it as four single-byte tokens.
  const std::string emoji = "\xF0\x9F\x91\x8D";
  StreamDecoder dec(tok);
  EXPECT_EQ(dec.Push(tok.FindToken("a")), "a");
  for (size_t i = 0; i + 1 < emoji.size(); ++i) {
    EXPECT_EQ(dec.Push(tok.FindToken(emoji.substr(i, 1))), "");
    EXPECT_EQ(dec.pending_bytes(), i + 1);
  }
  EXPECT_EQ(dec.Push(tok.FindToken(emoji.substr(3, 1))), emoji);
  EXPECT_EQ(dec.Push(tok.FindToken("\xF0")), "");
  EXPECT_EQ(dec.Push(tok.FindToken("b")), "\xEF\xBF\xBD" "b");  // broken sequence -> U+FFFD once
  EXPECT_EQ(dec.Push(tok.FindToken("\xE6")), "");
  EXPECT_EQ(dec.Flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(dec.pending_bytes(), 0u);
}

TEST(StreamDecoder, RandomIdsMatchDecode) {
  const Tokenizer& tok = HfTokenizer("qwen");
  std::mt19937 rng(5);
  // Bias towards single-byte tokens so sequences are often split and often broken.
  std::vector<int32_t> byte_ids;
  for (int b = 0; b < 256; ++b) byte_ids.push_back(tok.FindToken(std::string(1, char(b))));
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int32_t> ids(1 + rng() % 40);
    for (int32_t& id : ids)
      id = rng() % 3 ? byte_ids[0x80 + rng() % 0x78] : int32_t(rng() % tok.vocab_size());
    EXPECT_EQ(StreamAll(tok, ids, false), tok.Decode(ids));
    EXPECT_EQ(StreamAll(tok, ids, true), tok.Decode(ids, true));
  }
}

}  // namespace
}  // namespace pg::tokenizer::testing
