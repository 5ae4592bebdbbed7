// Loader behaviour: clear errors for bad inputs, special-id bookkeeping, and a GGUF tokenizer
// built in memory (so every family name of tokenizer.ggml.pre is exercised without a model).
#include <cstring>
#include <random>
#include <thread>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/gguf.h"
#include "tok_test_util.h"
#include "tokenizer/unicode.h"

namespace pg::tokenizer::testing {
namespace {

template <typename F>
void ExpectError(F&& f, ErrorCode code, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// Minimal GGUF v3 writer: metadata only, no tensors.
class GgufBuilder {
 public:
  void String(const std::string& key, const std::string& v) {
    Key(key, 8);
    Str(v);
    ++num_kv_;
  }
  void U32(const std::string& key, uint32_t v) {
    Key(key, 4);
    Raw(&v, 4);
    ++num_kv_;
  }
  void Bool(const std::string& key, bool v) {
    Key(key, 7);
    const uint8_t b = v;
    Raw(&b, 1);
    ++num_kv_;
  }
  void Strings(const std::string& key, const std::vector<std::string>& vs) {
    Key(key, 9);
    const uint32_t t = 8;
    Raw(&t, 4);
    const uint64_t n = vs.size();
    Raw(&n, 8);
    for (const auto& v : vs) Str(v);
    ++num_kv_;
  }
  void I32s(const std::string& key, const std::vector<int32_t>& vs) {
    Key(key, 9);
    const uint32_t t = 5;
    Raw(&t, 4);
    const uint64_t n = vs.size();
    Raw(&n, 8);
    for (int32_t v : vs) Raw(&v, 4);
    ++num_kv_;
  }
  std::vector<uint8_t> Finish() const {
    std::vector<uint8_t> out(24);
    std::memcpy(out.data(), "GGUF", 4);
    const uint32_t version = 3;
    const uint64_t num_tensors = 0;
    std::memcpy(out.data() + 4, &version, 4);
    std::memcpy(out.data() + 8, &num_tensors, 8);
    std::memcpy(out.data() + 16, &num_kv_, 8);
    out.insert(out.end(), body_.begin(), body_.end());
    while (out.size() % 32) out.push_back(0);
    return out;
  }

 private:
  void Raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    body_.insert(body_.end(), b, b + n);
  }
  void Str(const std::string& s) {
    const uint64_t n = s.size();
    Raw(&n, 8);
    Raw(s.data(), s.size());
  }
  void Key(const std::string& key, uint32_t type) {
    Str(key);
    Raw(&type, 4);
  }
  std::vector<uint8_t> body_;
  uint64_t num_kv_ = 0;
};

// 256 byte tokens + "he", "hel", "hell", "hello", " world"... + two control tokens.
GgufBuilder TinyGguf(const std::string& pre) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(BytesToByteLevel(std::string(1, char(b))));
  const std::vector<std::string> merges = {"h e", "l l", "he ll", "hell o", "Ġ w", "o r",
                                           "Ġw or", "Ġwor l", "Ġworl d"};
  for (const auto& m : merges) {
    const size_t sp = m.find(' ');
    tokens.push_back(m.substr(0, sp) + m.substr(sp + 1));
  }
  tokens.push_back("<|bos|>");
  tokens.push_back("<|eos|>");
  std::vector<int32_t> types(tokens.size(), 1);
  types[types.size() - 2] = types[types.size() - 1] = 3;
  GgufBuilder g;
  g.String("general.architecture", "llama");
  g.String("tokenizer.ggml.model", "gpt2");
  g.String("tokenizer.ggml.pre", pre);
  g.Strings("tokenizer.ggml.tokens", tokens);
  g.I32s("tokenizer.ggml.token_type", types);
  g.Strings("tokenizer.ggml.merges", merges);
  g.U32("tokenizer.ggml.bos_token_id", uint32_t(tokens.size() - 2));
  g.U32("tokenizer.ggml.eos_token_id", uint32_t(tokens.size() - 1));
  g.Bool("tokenizer.ggml.add_bos_token", true);
  return g;
}

TEST(GgufLoader, TinyVocabEncodesWithMergesAndBos) {
  for (const char* pre : {"gpt2", "smollm", "llama-bpe", "qwen2"}) {
    const auto bytes = TinyGguf(pre).Finish();
    auto gguf = io::GgufFile::FromMemory(bytes.data(), bytes.size(), "tiny.gguf");
    auto tok = Tokenizer::FromGguf(*gguf);
    const int32_t bos = 265, eos = 266;
    const int32_t hello = tok->FindToken("hello"), world = tok->FindToken(" world");
    ASSERT_EQ(hello, 259);
    ASSERT_EQ(world, 264);
    EXPECT_EQ(tok->Encode("hello world<|eos|>"),
              (std::vector<int32_t>{bos, hello, world, eos}))
        << pre;
    EXPECT_EQ(tok->Encode("hello", {.add_bos = false}), (std::vector<int32_t>{hello}));
    // Special token text in untrusted input is plain text when parse_special is off.
    const auto as_text = tok->Encode("<|eos|>", {.add_bos = false, .parse_special = false});
    EXPECT_EQ(as_text.size(), 7u) << pre;
    EXPECT_EQ(tok->Decode(as_text), "<|eos|>");
    EXPECT_TRUE(tok->IsSpecial(eos));
    EXPECT_TRUE(tok->IsEos(eos));
    EXPECT_EQ(tok->Decode(std::vector<int32_t>{bos, hello, eos}, true), "hello");
  }
}

TEST(GgufLoader, UnknownPreIsAClearError) {
  const auto bytes = TinyGguf("mystery-pre").Finish();
  auto gguf = io::GgufFile::FromMemory(bytes.data(), bytes.size(), "tiny.gguf");
  ExpectError([&] { Tokenizer::FromGguf(*gguf); }, ErrorCode::kUnsupported, "'mystery-pre'");
}

TEST(GgufLoader, SentencePieceModelIsUnsupported) {
  GgufBuilder g;
  g.String("tokenizer.ggml.model", "llama");
  const auto bytes = g.Finish();
  auto gguf = io::GgufFile::FromMemory(bytes.data(), bytes.size(), "spm.gguf");
  ExpectError([&] { Tokenizer::FromGguf(*gguf); }, ErrorCode::kUnsupported, "'llama'");
}

TEST(HfLoader, ErrorsAreClear) {
  ExpectError([] { Tokenizer::FromHfJson("tests/data/tokenizer/nope.json"); },
              ErrorCode::kNotFound, "nope.json");
  ExpectError([] { Tokenizer::FromHfJsonText("{\"model\": ", "broken.json"); },
              ErrorCode::kMalformed, "broken.json");
  ExpectError(
      [] {
        Tokenizer::FromHfJsonText(R"({"model": {"type": "WordPiece", "vocab": {}}})", "wp.json");
      },
      ErrorCode::kUnsupported, "WordPiece");
  ExpectError([] { Tokenizer::FromHfJsonText(R"({"model": {"type": "BPE"}})", "x.json"); },
              ErrorCode::kMalformed, "x.json");
}

TEST(Tokenizer, RejectsInvalidUtf8AndBadIds) {
  const Tokenizer& tok = HfTokenizer("smollm2");
  ExpectError([&] { tok.Encode("ok \xFF bad"); }, ErrorCode::kInvalidArgument, "offset 3");
  const std::vector<int32_t> bad = {5, 49152};
  ExpectError([&] { tok.Decode(bad); }, ErrorCode::kOutOfRange, "49152");
  ExpectError([&] { tok.TokenToPiece(-1); }, ErrorCode::kOutOfRange, "-1");
}

TEST(Tokenizer, SpecialIdsOfHfFamilies) {
  const Tokenizer& llama = HfTokenizer("llama3");
  EXPECT_EQ(llama.vocab_size(), 128256);
  EXPECT_EQ(llama.FindToken("<|eot_id|>"), 128009);
  EXPECT_TRUE(llama.IsEos(128009));
  EXPECT_TRUE(llama.IsSpecial(128000));
  EXPECT_FALSE(llama.IsSpecial(1000));
  const Tokenizer& qwen = HfTokenizer("qwen");
  EXPECT_EQ(qwen.vocab_size(), 151669);
  EXPECT_TRUE(qwen.IsEos(qwen.FindToken("<|im_end|>")));
  EXPECT_TRUE(qwen.IsSpecial(151644));
  EXPECT_FALSE(qwen.IsSpecial(qwen.FindToken("<think>")));  // non-special added token
  EXPECT_EQ(qwen.TokenToPiece(qwen.FindToken(" the")), " the");
  // Thread safety of the shared word cache: concurrent encodes agree with a serial one.
  const std::string text = ReadFile(kDataDir + "agentic_prompt.txt").substr(0, 20000);
  const auto expected = qwen.Encode(text);
  std::vector<std::thread> threads;
  std::vector<std::vector<int32_t>> results(4);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] { results[t] = qwen.Encode(text); });
  for (auto& th : threads) th.join();
  for (const auto& r : results) EXPECT_EQ(r, expected);
}

}  // namespace
}  // namespace pg::tokenizer::testing

namespace pg::tokenizer::testing {
namespace {

// Decode(Encode(s)) == s for random text over an NFC-stable alphabet, in every family, and
// for pathological long runs (the heap merge path, the regex lookahead over long whitespace).
TEST(Tokenizer, RoundTripsRandomAndPathologicalText) {
  const std::vector<std::string> alphabet = {
      " ", "  ", "\n", "\t", "\r\n", "a", "Q", "é", "日本", "1", "٣", "'s", "!", "<|", "|>",
      "<|im_end|>", "😀", "👨‍👩‍👧", "\u00a0", "क्ष", "مر", "{\"k\": [1, 2]}", "_", "\\"};
  std::mt19937 rng(99);
  for (const char* name : {"smollm2", "qwen", "llama3"}) {
    const Tokenizer& tok = HfTokenizer(name);
    for (int trial = 0; trial < 300; ++trial) {
      std::string text;
      const int n = int(rng() % 40);
      for (int i = 0; i < n; ++i) text += alphabet[rng() % alphabet.size()];
      const auto ids = tok.Encode(text, {.add_bos = false});
      ASSERT_EQ(tok.Decode(ids), text) << name;
      // With special parsing off the ids differ but the text still round-trips.
      ASSERT_EQ(tok.Decode(tok.Encode(text, {.add_bos = false, .parse_special = false})), text);
    }
    const std::string long_runs = std::string(200000, ' ') + "x" + std::string(50000, 'a') +
                                  std::string(30000, '\n') + std::string(20000, '7');
    const auto ids = tok.Encode(long_runs, {.add_bos = false});
    EXPECT_LT(ids.size(), long_runs.size());
    EXPECT_EQ(tok.Decode(ids), long_runs) << name;
  }
}

}  // namespace
}  // namespace pg::tokenizer::testing
