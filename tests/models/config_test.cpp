#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "models/config.h"
#include "models/loader.h"
#include "models/model.h"
#include "models/weights.h"

namespace pg::models {
namespace {

TEST(ModelConfig, FromHfTransformers5RopeParameters) {
  auto j = nlohmann::json::parse(R"({"model_type":"llama","vocab_size":100,"hidden_size":64,
    "intermediate_size":96,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,
    "max_position_embeddings":128,"rms_norm_eps":1e-5,
    "rope_parameters":{"rope_theta":500000.0,"rope_type":"llama3","factor":8.0,
      "low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":64},
    "eos_token_id":[5,6]})");
  ModelConfig c = ConfigFromHf(j);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rope.scaling, ops::RopeScaling::kLlama3);
  EXPECT_FLOAT_EQ(c.rope.theta, 500000.0f);
  EXPECT_EQ(c.rope.original_max_position, 64);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{5, 6}));
  EXPECT_TRUE(c.rope.neox);
}

TEST(ModelConfig, RejectsBadConfigsWithClearErrors) {
  auto base = nlohmann::json::parse(R"({"model_type":"llama","vocab_size":100,"hidden_size":64,
    "intermediate_size":96,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":3})");
  try {
    ConfigFromHf(base);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kMalformed);
    EXPECT_NE(std::string(e.what()).find("num_kv_heads"), std::string::npos) << e.what();
  }
  base["num_key_value_heads"] = 2;
  base["model_type"] = "mamba";
  EXPECT_THROW(ConfigFromHf(base), Error);
  base["model_type"] = "llama";
  base["hidden_size"] = "sixty-four";
  try {
    ConfigFromHf(base);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("hidden_size"), std::string::npos) << e.what();
  }
}

TEST(ModelLoader, MissingAndUnsupportedFiles) {
  try {
    LoadModel({.path = "/nonexistent/model.gguf"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  }
  try {
    LoadModel({.path = "tests/data/models/tiny-llama/golden.json"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
  }
  EXPECT_THROW(ResolveModelPath("/nonexistent"), Error);
}

TEST(ModelLoader, DummyWeightsHaveTheRealShapes) {
  auto m = LoadModel({.path = "tests/data/models/tiny-qwen3/config.json",
                      .format = LoadFormat::kDummy, .dummy_dtype = DType::kBF16});
  EXPECT_EQ(m->config().num_layers, 2);
  EXPECT_EQ(m->config().head_dim, 40);
  // bf16 weights: embeddings 384x96 + 2 layers of (q 240x96, k,v 80x96, o 96x240, ffn 3x224x96).
  int64_t per_layer = (240 * 96 + 2 * 80 * 96 + 96 * 240 + 3 * 224 * 96) * 2 + (96 * 2 + 40 * 2) * 4;
  EXPECT_EQ(m->weight_bytes(), 384 * 96 * 2 + 96 * 4 + 2 * per_layer);
}

TEST(Weights, HfNamesMapToCanonical) {
  EXPECT_EQ(CanonicalNameFromHf("model.layers.12.self_attn.k_proj.weight"), "blk.12.attn_k.weight");
  EXPECT_EQ(CanonicalNameFromHf("model.layers.0.self_attn.q_proj.bias"), "blk.0.attn_q.bias");
  EXPECT_EQ(CanonicalNameFromHf("model.layers.3.mlp.down_proj.weight"), "blk.3.ffn_down.weight");
  EXPECT_EQ(CanonicalNameFromHf("lm_head.weight"), "output.weight");
  EXPECT_EQ(CanonicalNameFromHf("something.else"), "something.else");
}

}  // namespace
}  // namespace pg::models
