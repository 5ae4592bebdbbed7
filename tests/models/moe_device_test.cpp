// The MoE models' device placement, checked on the CPU (no GPU needed): a counting
// DeviceMemory that hands out fake addresses. Placing the real published shapes
// (configs/*) must allocate exactly the bytes the shapes imply (bf16 matrices, f32 norms,
// fp8 matrices + f32 128x128 block scales), and the bytes a decode step touches count the
// distinct routed experts only.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "models/loader.h"
#include "models/moe_config.h"
#include "models/moe_device.h"
#include "models/moe_layer.h"
#include "models/moe_loader.h"

namespace pg::models {
namespace {

// Device memory that allocates nothing: addresses are offsets into an imaginary arena.
class CountingMemory final : public DeviceMemory {
 public:
  Device device() const override { return Device::kCuda; }
  void* Allocate(size_t bytes) override {
    const size_t at = used_;
    used_ += (bytes + 255) / 256 * 256;
    return reinterpret_cast<void*>(uintptr_t(0x100000) + at);
  }
  void CopyToDevice(void*, const void*, size_t bytes) override { copied_ += int64_t(bytes); }
  void CopyToHost(void*, const void*, size_t) override { ADD_FAILURE() << "unexpected read"; }
  void FillRandom(void*, DType dtype, int64_t count, float, float, uint64_t) override {
    EXPECT_TRUE(dtype == DType::kBF16 || dtype == DType::kF32 || dtype == DType::kF8E4M3);
    filled_ += count * Info(dtype).block_bytes;
  }
  size_t used_ = 0;
  int64_t copied_ = 0, filled_ = 0;
};

MoeModelConfig ReadConfig(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return MoeConfigFromHf(nlohmann::json::parse(in));
}

int64_t Blocks(int64_t rows, int64_t cols) {
  return ((rows + 127) / 128) * ((cols + 127) / 128);
}
// Bytes of a projection [rows, cols]: bf16, or fp8 + f32 block scales.
int64_t Proj(int64_t rows, int64_t cols, bool fp8) {
  return fp8 ? rows * cols + 4 * Blocks(rows, cols) : 2 * rows * cols;
}

// The weight bytes of a DeepSeek-V3-architecture model computed from its config alone.
int64_t DeepseekBytes(const MoeModelConfig& c, bool fp8) {
  const ModelConfig& b = c.base;
  const int64_t h = b.hidden_size, nh = b.num_heads, qk = c.qk_nope_head_dim + c.qk_rope_head_dim;
  int64_t total = 2 * 2 * int64_t(b.vocab_size) * h + 4 * h;  // embed, lm_head, final norm
  for (int i = 0; i < b.num_layers; ++i) {
    int64_t l = 2 * 4 * h;  // two norms
    if (c.q_lora_rank > 0)
      l += Proj(c.q_lora_rank, h, fp8) + 4 * c.q_lora_rank + Proj(nh * qk, c.q_lora_rank, fp8);
    else
      l += Proj(nh * qk, h, fp8);
    l += Proj(c.latent_dim(), h, fp8) + 4 * c.kv_lora_rank;
    l += 2 * nh * (c.qk_nope_head_dim + c.v_head_dim) * c.kv_lora_rank;  // kv_b bf16
    l += Proj(h, nh * c.v_head_dim, fp8);
    auto mlp = [&](int64_t inter) { return 2 * Proj(inter, h, fp8) + Proj(h, inter, fp8); };
    if (c.IsMoeLayer(i)) {
      l += 2 * int64_t(c.num_experts) * h + (c.has_score_bias ? 4 * c.num_experts : 0);
      l += c.num_experts * mlp(c.moe_intermediate_size);
      if (c.num_shared_experts > 0) l += mlp(int64_t(c.moe_intermediate_size) * c.num_shared_experts);
    } else {
      l += mlp(b.intermediate_size);
    }
    total += l;
  }
  return total;
}

TEST(MoeDevicePlacement, Qwen3_30B_A3B_RealShapes) {
  MoeModelConfig c = ReadConfig("configs/qwen3-30b-a3b/config.json");
  CountingMemory mem;
  auto m = CreateDummyMoeModelOnDevice(c, mem, {.max_batch_tokens = 32}, 1, false);
  ASSERT_TRUE(m->on_device());
  const int64_t h = 2048, vocab = 151936, layers = 48;
  const int64_t attn = 2 * (4096 * h + 2 * 512 * h + h * 4096) + 4 * (2 * h + 2 * 128);
  const int64_t experts = 128 * 2 * 3 * 768 * h, router = 2 * 128 * h;
  const int64_t expect = 2 * 2 * vocab * h + 4 * h + layers * (attn + experts + router);
  EXPECT_EQ(m->weight_bytes(), expect);
  EXPECT_NEAR(double(expect) / 2, 30.5e9, 0.1e9);  // the published 30.5B parameters
  EXPECT_EQ(m->streamed_weight_bytes(), expect - 2 * vocab * h);
  EXPECT_EQ(mem.filled_, expect);  // every weight byte made on the device, none copied
  EXPECT_EQ(mem.copied_, 0);
  // Before any forward the touched bytes are the whole stream (no routes yet).
  EXPECT_EQ(m->last_forward_weight_bytes(), m->streamed_weight_bytes());
}

TEST(MoeDevicePlacement, MoonlightAndDeepseekV3RealShapes) {
  for (bool fp8 : {false, true}) {
    MoeModelConfig c = ReadConfig("configs/moonlight-16b-a3b/config.json");
    CountingMemory mem;
    auto m = CreateDummyMoeModelOnDevice(c, mem, {.max_batch_tokens = 8}, 1, fp8);
    EXPECT_EQ(m->weight_bytes(), DeepseekBytes(c, fp8)) << "moonlight fp8=" << fp8;
    if (!fp8) {
      EXPECT_NEAR(double(m->weight_bytes()) / 2, 16.0e9, 0.1e9);
    }
  }
  MoeModelConfig v3 = ReadConfig("configs/deepseek-v3/config.json");
  EXPECT_EQ(v3.q_lora_rank, 1536);
  CountingMemory mem;
  auto m = CreateDummyMoeModelOnDevice(v3, mem, {.max_batch_tokens = 8}, 1, true);
  EXPECT_EQ(m->weight_bytes(), DeepseekBytes(v3, true));
  // 671B parameters (without the MTP layer) at about one byte each, kv_b and
  // embeddings in bf16.
  EXPECT_GT(m->weight_bytes(), 660e9);
  EXPECT_LT(m->weight_bytes(), 700e9);
  // DeepSeek-V2-Lite: the same architecture with softmax greedy routing, 15.7B parameters.
  MoeModelConfig v2 = ReadConfig("configs/deepseek-v2-lite/config.json");
  EXPECT_EQ(v2.scoring, ops::MoeScoring::kSoftmax);
  EXPECT_FALSE(v2.has_score_bias);
  EXPECT_FALSE(v2.norm_topk_prob);
  CountingMemory mem2;
  auto lite = CreateDummyMoeModelOnDevice(v2, mem2, {.max_batch_tokens = 8}, 1, false);
  EXPECT_EQ(lite->weight_bytes(), DeepseekBytes(v2, false));
  EXPECT_NEAR(double(lite->weight_bytes()) / 2, 15.7e9, 0.1e9);
  // Kimi K2 parses onto the same architecture.
  EXPECT_EQ(ReadConfig("configs/kimi-k2/config.json").num_experts, 384);
}

TEST(MoeDevicePlacement, QwenFp8DummyIsRefused) {
  MoeModelConfig c = ReadConfig("configs/qwen3-30b-a3b/config.json");
  CountingMemory mem;
  EXPECT_THROW(CreateDummyMoeModelOnDevice(c, mem, {.max_batch_tokens = 8}, 1, true), Error);
}

// A checkpoint placed from the host: every weight byte copied (fp8 kept fp8 with scales).
TEST(MoeDevicePlacement, CheckpointsCopyEveryByte) {
  for (const char* dir : {"tests/data/models/tiny-qwen3-moe", "tests/data/models/tiny-deepseek-v3",
                          "tests/data/models/tiny-deepseek-v3-fp8"}) {
    auto m = LoadModel({.path = dir});
    CountingMemory mem;
    m->PlaceOnDevice(mem, {.max_batch_tokens = 16});
    EXPECT_TRUE(m->on_device());
    EXPECT_EQ(mem.filled_, 0) << dir;
    EXPECT_EQ(mem.copied_, m->weight_bytes()) << dir;
    if (std::string(dir).find("deepseek") != std::string::npos) {
      std::ifstream in(std::string(dir) + "/config.json");
      const nlohmann::json j = nlohmann::json::parse(in);
      EXPECT_EQ(m->weight_bytes(), DeepseekBytes(MoeConfigFromHf(j), DeclaresFp8Weights(j)))
          << dir;
    }
  }
}

TEST(MoeDevicePlacement, CountDistinctExperts) {
  const int32_t ids[] = {3, 1, 3, -1, 7, 1, 0, 7};
  EXPECT_EQ(CountDistinctExperts(ids, 8), 4);
  EXPECT_EQ(CountDistinctExperts({}, 8), 0);
  const int32_t out_of_range[] = {8, 9, -1};
  EXPECT_EQ(CountDistinctExperts(out_of_range, 8), 0);
}

// RoutingMargin: the gap a perturbation of the choice scores must close to change a token's
// experts, on hand-computed cases.
TEST(MoeRouting, MarginOfHandMadeScores) {
  MoeFfnWeights w;
  MoeModelConfig c;
  // Softmax, one group, top-2 of 4: probabilities 0.5, 0.3, 0.15, 0.05 -> 0.3 - 0.15.
  c.num_experts = 4, c.top_k = 2, c.n_group = 1, c.topk_group = 1;
  c.scoring = ops::MoeScoring::kSoftmax;
  const float lg[] = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  EXPECT_NEAR(RoutingMargin(lg, w, c), 0.15f, 1e-6f);
  // Sigmoid with a bias, 2 groups of 2, one group kept, top-1: choice = sigmoid(0) + bias =
  // {0.6, 0.5, 0.55, 0.5}; group scores 1.1 and 1.05 (margin 0.05); inside group 0 the top-1
  // margin is 0.1; so 0.05.
  c.scoring = ops::MoeScoring::kSigmoid;
  c.n_group = 2, c.topk_group = 1, c.top_k = 1;
  float bias[] = {0.1f, 0.0f, 0.05f, 0.0f};
  w.score_bias = TensorView::Contiguous(bias, DType::kF32, {4});
  const float zeros[] = {0, 0, 0, 0};
  EXPECT_NEAR(RoutingMargin(zeros, w, c), 0.05f, 1e-6f);
  // Every expert chosen: nothing competes.
  c.n_group = 1, c.top_k = 4;
  EXPECT_TRUE(std::isinf(RoutingMargin(zeros, w, c)));
}

}  // namespace
}  // namespace pg::models
