// Encode/decode goldens made by PyPI's `tokenizers` (tools/golden/tokenizer_goldens.py) for
// SmolLM2 (from the embedded GGUF's vocab with HF's SmolLM2 config), Qwen2/3, Llama-3, and a
// SmolLM2 variant with lstrip/rstrip/single_word/normalized added tokens and a BOS template.
#include <memory>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "tok_test_util.h"

namespace pg::tokenizer::testing {
namespace {

std::string Show(const std::string& text) { return nlohmann::json(text).dump(); }

// Index of the first difference, for a readable failure.
size_t FirstDiff(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

void CheckCases(const Tokenizer& tok, const nlohmann::json& goldens, const std::string& label) {
  const auto& cases = goldens.at("cases");
  ASSERT_GT(cases.size(), 10u);
  for (const auto& c : cases) {
    const std::string text = c["text"];
    EncodeOptions opts;
    opts.add_bos = c["add_special"];
    opts.parse_special = c["parse_special"];
    const auto expected = c["ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> ids = tok.Encode(text, opts);
    EXPECT_EQ(ids, expected) << label << " text=" << Show(text) << " add_bos=" << opts.add_bos
                             << " parse_special=" << opts.parse_special
                             << " first diff at " << FirstDiff(ids, expected);
    EXPECT_EQ(tok.Decode(expected), c["decoded"].get<std::string>()) << label << Show(text);
    EXPECT_EQ(tok.Decode(expected, /*skip_special=*/true),
              c["decoded_skip_special"].get<std::string>())
        << label << Show(text);
  }
}

class HfGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(HfGolden, EncodeAndDecodeMatchHfTokenizers) {
  CheckCases(HfTokenizer(GetParam()), Goldens(GetParam()), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Families, HfGolden,
                         ::testing::Values("smollm2", "qwen", "llama3", "smollm2_added"));

// Families with full goldens (raw id decode and the ~50K-token prompt).
class HfFamily : public ::testing::TestWithParam<std::string> {};

TEST_P(HfFamily, RawIdDecodeMatchesHf) {
  const auto& g = Goldens(GetParam());
  const Tokenizer& tok = HfTokenizer(GetParam());
  for (const auto& c : g["raw_decode"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok.Decode(ids), c["decoded"].get<std::string>()) << nlohmann::json(ids).dump();
    if (c.contains("decoded_skip_special")) {
      EXPECT_EQ(tok.Decode(ids, true), c["decoded_skip_special"].get<std::string>());
    }
  }
}

TEST_P(HfFamily, AgenticPromptIdsMatchHf) {
  const auto& g = Goldens(GetParam());
  const std::string prompt = ReadFile(kDataDir + "agentic_prompt.txt");
  const auto expected = g["agentic_prompt_ids"].get<std::vector<int32_t>>();
  ASSERT_GT(expected.size(), 30000u);
  const std::vector<int32_t> ids =
      HfTokenizer(GetParam()).Encode(prompt, {.add_bos = false, .parse_special = true});
  EXPECT_EQ(ids.size(), expected.size());
  EXPECT_EQ(FirstDiff(ids, expected), expected.size());
}

INSTANTIATE_TEST_SUITE_P(Families, HfFamily, ::testing::Values("smollm2", "qwen", "llama3"));

// The GGUF loader must reproduce HF's SmolLM2 tokenizer exactly: same goldens, no tokenizer.json.
TEST(GgufGolden, EmbeddedSmolLM2MatchesHfGoldens) {
  std::unique_ptr<io::GgufFile> gguf = io::GgufFile::Open(kEmbeddedModel);
  std::unique_ptr<Tokenizer> tok = Tokenizer::FromGguf(*gguf);
  EXPECT_EQ(tok->vocab_size(), 49152);
  EXPECT_EQ(tok->bos_id(), std::optional<int32_t>(1));
  EXPECT_TRUE(tok->IsEos(2));
  EXPECT_EQ(tok->pad_id(), std::optional<int32_t>(2));
  CheckCases(*tok, Goldens("smollm2"), "gguf");
  const std::string prompt = ReadFile(kDataDir + "agentic_prompt.txt");
  const auto expected = Goldens("smollm2")["agentic_prompt_ids"].get<std::vector<int32_t>>();
  EXPECT_EQ(tok->Encode(prompt, {.add_bos = false}), expected);
}

}  // namespace
}  // namespace pg::tokenizer::testing
