// HF config files: typed access, generation_config, tokenizer_config, a model directory.
#include <gtest/gtest.h>

#include <fstream>

#include "io/hf_config.h"
#include "unit/io/test_util.h"

namespace pg::io {
namespace {

using nlohmann::json;
using testing::ExpectError;

void ExpectContains(const std::string& msg, std::string_view part) {
  EXPECT_NE(msg.find(part), std::string::npos) << "message: " << msg << "\nmissing: " << part;
}

TEST(HfConfigTest, GetOrAndGet) {
  json j = json::parse(R"({"hidden_size": 576, "rms_norm_eps": 1e-5, "tie": true,
      "name": "llama", "neg": -3, "big": 5000000000, "frac": 2.5, "nul": null})");
  EXPECT_EQ(GetOr<int64_t>(j, "hidden_size", 0), 576);
  EXPECT_EQ(GetOr<int64_t>(j, "absent", 7), 7);
  EXPECT_EQ(GetOr<int64_t>(j, "nul", 9), 9);  // null counts as absent
  EXPECT_DOUBLE_EQ(GetOr<double>(j, "rms_norm_eps", 0), 1e-5);
  EXPECT_DOUBLE_EQ(GetOr<double>(j, "hidden_size", 0), 576.0);  // integers widen
  EXPECT_TRUE(GetOr<bool>(j, "tie", false));
  EXPECT_EQ(GetOr<std::string>(j, "name", ""), "llama");
  EXPECT_EQ(Get<int32_t>(j, "neg"), -3);
  EXPECT_EQ(Get<int64_t>(j, "big"), 5000000000);
  std::string msg = ExpectError([&] { GetOr<int32_t>(j, "big", 0, "config.json"); },
                                ErrorCode::kMalformed);  // out of int32 range
  ExpectContains(msg, "config.json");
  ExpectContains(msg, "'big'");
  ExpectError([&] { GetOr<uint32_t>(j, "neg", 0); }, ErrorCode::kMalformed);
  ExpectError([&] { GetOr<int64_t>(j, "frac", 0); }, ErrorCode::kMalformed);
  ExpectError([&] { GetOr<int64_t>(j, "name", 0); }, ErrorCode::kMalformed);
  ExpectError([&] { GetOr<std::string>(j, "tie", ""); }, ErrorCode::kMalformed);
  ExpectError([&] { GetOr<bool>(j, "hidden_size", false); }, ErrorCode::kMalformed);
  ExpectContains(ExpectError([&] { Get<int64_t>(j, "vocab_size", "config.json"); },
                             ErrorCode::kNotFound), "vocab_size");
}

TEST(HfConfigTest, GenerationConfig) {
  auto g = ParseGenerationConfig(json::parse(R"({"bos_token_id": 1, "eos_token_id": [2, 7, 128009],
      "do_sample": true, "temperature": 0.6, "top_p": 0.9, "top_k": 20, "pad_token_id": null})"),
      "generation_config.json");
  EXPECT_EQ(g.eos_token_ids, (std::vector<int64_t>{2, 7, 128009}));
  EXPECT_EQ(g.bos_token_id, 1);
  EXPECT_FALSE(g.pad_token_id.has_value());
  EXPECT_EQ(g.do_sample, true);
  EXPECT_DOUBLE_EQ(*g.temperature, 0.6);
  EXPECT_DOUBLE_EQ(*g.top_p, 0.9);
  EXPECT_EQ(g.top_k, 20);
  EXPECT_FALSE(g.min_p.has_value());
  auto single = ParseGenerationConfig(json::parse(R"({"eos_token_id": 2})"), "g");
  EXPECT_EQ(single.eos_token_ids, (std::vector<int64_t>{2}));
  auto none = ParseGenerationConfig(json::parse("{}"), "g");
  EXPECT_TRUE(none.eos_token_ids.empty());
  EXPECT_FALSE(none.temperature.has_value());
  ExpectContains(ExpectError([] { ParseGenerationConfig(json::parse(R"({"eos_token_id": [2, "x"]})"), "g"); },
                             ErrorCode::kMalformed), "eos_token_id[1]");
  ExpectError([] { ParseGenerationConfig(json::parse(R"({"top_p": 1.5})"), "g"); },
              ErrorCode::kMalformed);
  ExpectError([] { ParseGenerationConfig(json::parse(R"({"temperature": -1})"), "g"); },
              ErrorCode::kMalformed);
  ExpectError([] { ParseGenerationConfig(json::parse("[1]"), "g"); }, ErrorCode::kMalformed);
}

TEST(HfConfigTest, TokenizerConfigStringsAndAddedTokens) {
  auto t = ParseTokenizerConfig(json::parse(R"({
      "add_bos_token": false, "add_eos_token": false,
      "bos_token": "<|im_start|>",
      "eos_token": {"__type": "AddedToken", "content": "<|im_end|>", "lstrip": false,
                    "normalized": false, "rstrip": true, "single_word": false, "special": true},
      "pad_token": null,
      "model_max_length": 1000000000000000019884624838656,
      "tokenizer_class": "GPT2Tokenizer",
      "chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}",
      "added_tokens_decoder": {
        "0": {"content": "<|endoftext|>", "lstrip": false, "normalized": false, "rstrip": false,
              "single_word": false, "special": true},
        "49152": {"content": "<think>", "special": false}}})"),
      "tokenizer_config.json");
  ASSERT_TRUE(t.bos_token.has_value());
  EXPECT_EQ(t.bos_token->content, "<|im_start|>");
  EXPECT_FALSE(t.bos_token->special);
  ASSERT_TRUE(t.eos_token.has_value());
  EXPECT_EQ(t.eos_token->content, "<|im_end|>");
  EXPECT_TRUE(t.eos_token->special);
  EXPECT_TRUE(t.eos_token->rstrip);
  EXPECT_FALSE(t.pad_token.has_value());
  EXPECT_FALSE(t.model_max_length.has_value());  // the "no limit" placeholder
  EXPECT_EQ(t.add_bos_token, false);
  EXPECT_EQ(t.tokenizer_class, "GPT2Tokenizer");
  ASSERT_NE(t.DefaultChatTemplate(), nullptr);
  EXPECT_EQ(*t.DefaultChatTemplate(), "{% for m in messages %}{{ m['content'] }}{% endfor %}");
  ASSERT_EQ(t.added_tokens_decoder.size(), 2u);
  EXPECT_EQ(t.added_tokens_decoder.at(0).content, "<|endoftext|>");
  EXPECT_TRUE(t.added_tokens_decoder.at(0).special);
  EXPECT_EQ(t.added_tokens_decoder.at(49152).content, "<think>");
  EXPECT_FALSE(t.added_tokens_decoder.at(49152).special);
}

TEST(HfConfigTest, TokenizerConfigTemplateListAndErrors) {
  auto t = ParseTokenizerConfig(json::parse(R"({"model_max_length": 8192, "chat_template": [
      {"name": "default", "template": "A"}, {"name": "tool_use", "template": "B"}]})"), "tc");
  EXPECT_EQ(t.model_max_length, 8192);
  EXPECT_EQ(t.chat_templates.size(), 2u);
  EXPECT_EQ(*t.DefaultChatTemplate(), "A");
  EXPECT_EQ(t.chat_templates.at("tool_use"), "B");
  auto only = ParseTokenizerConfig(json::parse(R"({"chat_template": [{"name": "rag", "template": "R"}]})"), "tc");
  EXPECT_EQ(*only.DefaultChatTemplate(), "R");
  EXPECT_EQ(ParseTokenizerConfig(json::parse("{}"), "tc").DefaultChatTemplate(), nullptr);
  ExpectError([] { ParseTokenizerConfig(json::parse(R"({"chat_template": 3})"), "tc"); },
              ErrorCode::kMalformed);
  ExpectError([] { ParseTokenizerConfig(json::parse(R"({"chat_template": [{"name": "a"}]})"), "tc"); },
              ErrorCode::kNotFound);
  ExpectError([] { ParseTokenizerConfig(json::parse(R"({"chat_template": [{"name":"a","template":"x"},{"name":"a","template":"y"}]})"), "tc"); },
              ErrorCode::kMalformed);
  ExpectError([] { ParseTokenizerConfig(json::parse(R"({"eos_token": 5})"), "tc"); },
              ErrorCode::kMalformed);
  ExpectError([] { ParseTokenizerConfig(json::parse(R"({"eos_token": {"special": true}})"), "tc"); },
              ErrorCode::kNotFound);
  ExpectContains(ExpectError([] { ParseTokenizerConfig(json::parse(R"({"added_tokens_decoder": {"x1": {"content": "a"}}})"), "tc"); },
                             ErrorCode::kMalformed), "x1");
}

TEST(HfConfigTest, ModelDirectory) {
  testing::TempDir dir;
  ExpectError([&] { LoadHfModelConfigs(dir.path().string()); }, ErrorCode::kNotFound);
  std::ofstream(dir.File("config.json"))
      << R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 576, "vocab_size": 49152})";
  auto only = LoadHfModelConfigs(dir.path().string());
  EXPECT_EQ(Get<int64_t>(only.config, "vocab_size"), 49152);
  EXPECT_FALSE(only.generation.has_value());
  EXPECT_FALSE(only.tokenizer.has_value());
  std::ofstream(dir.File("generation_config.json")) << R"({"eos_token_id": 2})";
  std::ofstream(dir.File("tokenizer_config.json")) << R"({"eos_token": "<|im_end|>"})";
  auto all = LoadHfModelConfigs(dir.path().string());
  ASSERT_TRUE(all.generation && all.tokenizer);
  EXPECT_EQ(all.generation->eos_token_ids, (std::vector<int64_t>{2}));
  EXPECT_EQ(all.tokenizer->eos_token->content, "<|im_end|>");
  // Broken JSON names the file and the byte.
  std::ofstream(dir.File("generation_config.json")) << "{\"eos_token_id\": 2,, }";
  std::string msg = ExpectError([&] { LoadHfModelConfigs(dir.path().string()); },
                                ErrorCode::kMalformed);
  ExpectContains(msg, "generation_config.json");
  ExpectContains(msg, "at byte");
  std::ofstream(dir.File("generation_config.json")) << R"({"eos_token_id": 2, "eos_token_id": 3})";
  ExpectContains(ExpectError([&] { LoadHfModelConfigs(dir.path().string()); },
                             ErrorCode::kMalformed), "duplicate JSON key 'eos_token_id'");
  // A number beyond double range (found by fuzz_hf_config): pg::Error, not a json exception.
  std::ofstream(dir.File("generation_config.json")) << R"({"bos_token_id": 133.3E886})";
  ExpectContains(ExpectError([&] { LoadHfModelConfigs(dir.path().string()); },
                             ErrorCode::kMalformed), "generation_config.json");
  std::ofstream(dir.File("config.json")) << "";
  ExpectError([&] { LoadHfModelConfigs(dir.path().string()); }, ErrorCode::kMalformed);
}

}  // namespace
}  // namespace pg::io
