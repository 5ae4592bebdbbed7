// MoE / MLA models without the HF goldens: config parsing (a Kimi K2 config.json maps onto
// DeepSeek-V3), fp8 block-scaled dequantization on partial blocks, and forward consistency on
// dummy weights: one-shot prefill, chunked prefill over a cached prefix (MLA expanded) and
// token-by-token decode (MLA absorbed) must give the same logits.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "core/status.h"
#include "models/loader.h"
#include "models/model.h"
#include "models/moe_config.h"
#include "models/moe_weights.h"
#include "runtime/sequence_runner.h"

namespace pg {
namespace {

nlohmann::json ReadJson(const std::string& p) {
  std::ifstream in(p);
  EXPECT_TRUE(in.good()) << p;
  return nlohmann::json::parse(in);
}

TEST(MoeConfig, KimiK2MapsOntoDeepseekV3) {
  auto c = models::MoeConfigFromHf(
      ReadJson("tests/data/models/tiny-deepseek-v3-kimi-k2-config/config.json"));
  EXPECT_EQ(c.arch, models::MoeArch::kDeepseekV3);
  EXPECT_EQ(c.num_experts, 384);
  EXPECT_EQ(c.top_k, 8);
  EXPECT_EQ(c.num_shared_experts, 1);
  EXPECT_EQ(c.n_group, 1);
  EXPECT_EQ(c.scoring, ops::MoeScoring::kSigmoid);
  EXPECT_TRUE(c.has_score_bias);
  EXPECT_FLOAT_EQ(c.routed_scaling_factor, 2.827f);
  EXPECT_EQ(c.latent_dim(), 576);
  // The runtime's cache: 1 "head" of 288 values in each of K and V = 576 per token.
  EXPECT_EQ(c.base.num_kv_heads, 1);
  EXPECT_EQ(c.base.head_dim, 288);
  EXPECT_EQ(c.q_lora_rank, 1536);
  EXPECT_FALSE(c.base.rope.neox);  // interleaved rope (HF rope_interleave default)
  EXPECT_EQ(c.base.rope.scaling, ops::RopeScaling::kYarn);
  EXPECT_FLOAT_EQ(c.base.rope.factor, 32.0f);
  EXPECT_EQ(c.base.rope.rotary_dim, 64);
  const double m = 0.1 * std::log(32.0) + 1.0;  // yarn mscale(factor, mscale_all_dim = 1)
  EXPECT_NEAR(c.softmax_scale, m * m / std::sqrt(192.0), 1e-6);
  EXPECT_FLOAT_EQ(c.rope_q_scale, 1.0f);  // mscale / mscale_all_dim = 1
  EXPECT_EQ(c.fp8_block_rows, 128);
  EXPECT_FALSE(c.IsMoeLayer(0));
  EXPECT_TRUE(c.IsMoeLayer(1));
  EXPECT_TRUE(c.IsMoeLayer(60));
}

nlohmann::json TinyDeepseek(bool q_lora);

// HF deepseek_v3 (yarn_apply_mscale) with rope_scaling lacking mscale_all_dim: the softmax
// scale stays qk^-0.5; the q rope factor is yarn's mscale(factor)^2 (HF attention_factor).
TEST(MoeConfig, MscaleAllDimAbsentOrAloneMatchesHf) {
  const double q = 1.0 / std::sqrt(16.0), f = 4.0, m1 = 0.1 * std::log(f) + 1.0;
  auto j = TinyDeepseek(false);
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", f}, {"original_max_position_embeddings", 64}};
  auto c = models::MoeConfigFromHf(j);
  EXPECT_NEAR(c.softmax_scale, q, 1e-7);
  EXPECT_NEAR(c.rope_q_scale, m1 * m1, 1e-6);
  // mscale_all_dim without mscale (HF: mscale None): the softmax scale gets
  // mscale(f, all_dim)^2, the q rope factor stays mscale(f) (no ratio without both).
  j["rope_scaling"]["mscale_all_dim"] = 0.5;
  c = models::MoeConfigFromHf(j);
  const double ma = 0.1 * 0.5 * std::log(f) + 1.0;
  EXPECT_NEAR(c.softmax_scale, q * ma * ma, 1e-7);
  EXPECT_NEAR(c.rope_q_scale, m1 * m1, 1e-6);
  // Both: the ratio (DeepSeek-V3's published config has mscale = mscale_all_dim: 1).
  j["rope_scaling"]["mscale"] = 0.75;
  c = models::MoeConfigFromHf(j);
  const double r = (0.1 * 0.75 * std::log(f) + 1.0) / ma;
  EXPECT_NEAR(c.rope_q_scale, r * r, 1e-6);
  EXPECT_FALSE(c.mla_use_nope);
}

// Kimi Linear's MLA ("mla_use_nope"): no rotary, and no YaRN factor on either scale.
TEST(MoeConfig, MlaUseNopeDropsTheRopeFactors) {
  auto j = TinyDeepseek(true);
  j["mla_use_nope"] = true;
  const auto c = models::MoeConfigFromHf(j);
  EXPECT_TRUE(c.mla_use_nope);
  EXPECT_NEAR(c.softmax_scale, 1.0 / std::sqrt(16.0), 1e-7);
  EXPECT_FLOAT_EQ(c.rope_q_scale, 1.0f);
}

nlohmann::json TinyQwen3Moe() {
  return {{"model_type", "qwen3_moe"}, {"vocab_size", 97}, {"hidden_size", 48},
          {"intermediate_size", 72}, {"moe_intermediate_size", 24}, {"num_hidden_layers", 4},
          {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"head_dim", 16},
          {"num_experts", 6}, {"num_experts_per_tok", 2}, {"norm_topk_prob", true},
          {"decoder_sparse_step", 2}, {"mlp_only_layers", {3}}, {"rope_theta", 10000.0},
          {"max_position_embeddings", 256}, {"rms_norm_eps", 1e-6}};
}

nlohmann::json TinyDeepseek(bool q_lora) {
  nlohmann::json j = {
      {"model_type", "deepseek_v3"}, {"vocab_size", 89}, {"hidden_size", 40},
      {"intermediate_size", 56}, {"moe_intermediate_size", 20}, {"num_hidden_layers", 3},
      {"first_k_dense_replace", 1}, {"num_attention_heads", 3}, {"num_key_value_heads", 3},
      {"kv_lora_rank", 21}, {"qk_nope_head_dim", 10}, {"qk_rope_head_dim", 6},
      {"v_head_dim", 12}, {"n_routed_experts", 8}, {"n_group", 4}, {"topk_group", 2},
      {"num_experts_per_tok", 3}, {"n_shared_experts", 1}, {"routed_scaling_factor", 2.5},
      {"norm_topk_prob", true}, {"max_position_embeddings", 256}, {"rope_theta", 10000.0},
      {"rope_scaling", {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 64},
                        {"mscale", 1.0}, {"mscale_all_dim", 1.0}}},
      {"rms_norm_eps", 1e-6}};
  j["q_lora_rank"] = q_lora ? nlohmann::json(18) : nlohmann::json(nullptr);
  return j;
}

TEST(MoeConfig, QwenSparseStepAndMlpOnlyLayers) {
  auto c = models::MoeConfigFromHf(TinyQwen3Moe());
  EXPECT_FALSE(c.IsMoeLayer(0));  // (0 + 1) % 2 != 0
  EXPECT_TRUE(c.IsMoeLayer(1));
  EXPECT_FALSE(c.IsMoeLayer(2));
  EXPECT_FALSE(c.IsMoeLayer(3));  // listed in mlp_only_layers
}

TEST(MoeConfig, RejectsInconsistentRouting) {
  nlohmann::json j = TinyDeepseek(true);
  j["n_group"] = 3;  // does not divide 8 experts
  EXPECT_THROW(models::MoeConfigFromHf(j), Error);
  j = TinyDeepseek(true);
  j["num_experts_per_tok"] = 5;  // > topk_group 2 x 2 experts per group
  EXPECT_THROW(models::MoeConfigFromHf(j), Error);
  j = TinyDeepseek(true);
  j["scoring_func"] = "tanh";
  EXPECT_THROW(models::MoeConfigFromHf(j), Error);
}

TEST(MoeWeights, Fp8BlockScaledDequantizationOnPartialBlocks) {
  // [5, 7] weight in 2x3 blocks -> scale_inv [3, 3]; the last block row/col are partial.
  const int64_t out = 5, in = 7;
  Tensor w(DType::kF8E4M3, {out, in}), s(DType::kF32, {3, 3});
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> byte(0, 0x7e);  // finite e4m3 values of both signs
  for (int64_t i = 0; i < out * in; ++i)
    w.data<uint8_t>()[i] = uint8_t(byte(rng) | ((i % 3 == 0) ? 0x80 : 0));
  for (int i = 0; i < 9; ++i) s.data<float>()[i] = 0.25f * float(i + 1);
  Tensor d = models::DequantizeFp8BlockScaled(w.view(), s.view(), 2, 3, "w");
  for (int64_t r = 0; r < out; ++r)
    for (int64_t c = 0; c < in; ++c)
      EXPECT_EQ(d.data<float>()[r * in + c],
                F8E4M3ToF32(w.data<uint8_t>()[r * in + c]) * (0.25f * float((r / 2) * 3 + c / 3 + 1)))
          << r << "," << c;
  Tensor bad(DType::kF32, {2, 3});
  EXPECT_THROW(models::DequantizeFp8BlockScaled(w.view(), bad.view(), 2, 3, "w"), Error);
}

// Writes `config` into a fresh folder and loads it with dummy weights (f32, so all three
// schedules see the same weights exactly).
std::unique_ptr<models::Model> DummyModel(const nlohmann::json& config, const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("pg_moe_" + name);
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << config.dump();
  return models::LoadModel({.path = dir.string(), .format = models::LoadFormat::kDummy,
                            .dummy_dtype = DType::kF32, .dummy_seed = 11});
}

void ExpectSameLogitsForEverySchedule(models::Model& model) {
  std::vector<int32_t> prompt;
  std::mt19937 rng(3);
  for (int i = 0; i < 29; ++i) prompt.push_back(int32_t(rng() % uint32_t(model.config().vocab_size)));
  auto run = [&](int chunk) {
    runtime::SequenceRunner r(model, {.max_context = 64, .page_size = 4, .prefill_chunk = chunk});
    std::span<float> l = r.Append(prompt);
    return std::vector<float>(l.begin(), l.end());
  };
  const std::vector<float> one_shot = run(64), chunked = run(7), decode = run(1);
  double mean = 0, var = 0;
  for (float v : one_shot) mean += v;
  mean /= double(one_shot.size());
  for (float v : one_shot) var += (v - mean) * (v - mean);
  const double sd = std::sqrt(var / double(one_shot.size()));
  ASSERT_GT(sd, 0.0);
  double d_chunk = 0, d_dec = 0;
  for (size_t i = 0; i < one_shot.size(); ++i) {
    d_chunk = std::max(d_chunk, std::fabs(double(chunked[i]) - one_shot[i]));
    d_dec = std::max(d_dec, std::fabs(double(decode[i]) - one_shot[i]));
  }
  EXPECT_LE(d_chunk / sd, 1e-4) << "chunked prefill vs one shot (logit std " << sd << ")";
  EXPECT_LE(d_dec / sd, 1e-4) << "token-by-token decode vs one shot (logit std " << sd << ")";
}

TEST(MoeModel, Qwen3MoeDummyPrefillChunkedAndDecodeAgree) {
  auto model = DummyModel(TinyQwen3Moe(), "qwen3_moe");
  EXPECT_EQ(model->config().architecture, "qwen3_moe");
  ExpectSameLogitsForEverySchedule(*model);
}

TEST(MoeModel, DeepseekV3DummyPrefillChunkedAndDecodeAgree) {
  for (bool q_lora : {true, false}) {
    SCOPED_TRACE(q_lora ? "q_lora" : "q_proj");
    auto model = DummyModel(TinyDeepseek(q_lora), q_lora ? "dsv3_qlora" : "dsv3");
    // Latent cache: (21 + 6) values per token, split 14 + 14 (one padding value).
    EXPECT_EQ(model->kv_spec().num_kv_heads, 1);
    EXPECT_EQ(model->kv_spec().head_dim, 14);
    ExpectSameLogitsForEverySchedule(*model);
  }
}


std::vector<float> OneShotLogits(models::Model& model) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < 23; ++i) prompt.push_back(int32_t((i * 37 + 5) % model.config().vocab_size));
  runtime::SequenceRunner r(model, {.max_context = 64, .page_size = 4, .prefill_chunk = 64});
  std::span<float> l = r.Append(prompt);
  return std::vector<float>(l.begin(), l.end());
}

// NoPE: the rope dims carry no position, so the rope settings cannot change the logits (they
// do without NoPE); and prefill, chunked prefill and decode still agree.
TEST(MoeModel, DeepseekV3NopeIgnoresRopeSettings) {
  for (bool nope : {true, false}) {
    SCOPED_TRACE(nope ? "mla_use_nope" : "rotary");
    auto j = TinyDeepseek(false);
    j.erase("rope_scaling");
    j["mla_use_nope"] = nope;
    auto a = DummyModel(j, nope ? "dsv3_nope_a" : "dsv3_rope_a");
    j["rope_theta"] = 37.0;
    auto b = DummyModel(j, nope ? "dsv3_nope_b" : "dsv3_rope_b");
    const std::vector<float> la = OneShotLogits(*a), lb = OneShotLogits(*b);
    ASSERT_EQ(la.size(), lb.size());
    double diff = 0;
    for (size_t i = 0; i < la.size(); ++i) diff = std::max(diff, std::fabs(double(la[i]) - lb[i]));
    if (nope) {
      EXPECT_EQ(diff, 0.0);
      ExpectSameLogitsForEverySchedule(*a);
    } else {
      EXPECT_GT(diff, 1e-4);
    }
  }
}

}  // namespace
}  // namespace pg
