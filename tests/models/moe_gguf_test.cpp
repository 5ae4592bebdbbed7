// llama.cpp "qwen3moe" and "deepseek2" GGUFs that are wrong in one way each: the loader must refuse
// them with an error naming what is wrong (and not crash, nor load a model that computes garbage).
// The valid file of the same builder loads and runs, so each refusal is the one change's doing.
// (The numbers of real files are checked in moe_golden_test.cpp against HF and llama.cpp.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "models/loader.h"
#include "models/model.h"
#include "runtime/sequence_runner.h"
#include "unit/io/gguf_builder.h"

namespace pg {
namespace {

using io::testing::BuilderTensor;
using io::testing::GgufBuilder;

// hidden 64, 1 layer, 2 heads of 32 (1 kv head), 4 experts of ffn 32, top 2, vocab 40; f32.
struct Shape {
  uint64_t hidden = 64, heads = 2, kv_heads = 1, head_dim = 32, experts = 4, top_k = 2,
           ffn = 32, vocab = 40;
};

BuilderTensor F32(std::string name, std::vector<uint64_t> ne, float value = 0.01f) {
  uint64_t n = 1;
  for (uint64_t d : ne) n *= d;
  std::vector<uint8_t> data(n * 4);
  for (uint64_t i = 0; i < n; ++i) {
    const float v = value * float(1 + i % 7);
    std::memcpy(data.data() + i * 4, &v, 4);
  }
  return {std::move(name), std::move(ne), 0, std::move(data)};
}

// `edit` may change the metadata / tensors before they are added (names as keys).
struct Edits {
  std::function<bool(const std::string& key)> drop_key = [](const std::string&) { return false; };
  std::function<void(BuilderTensor&)> tensor = [](BuilderTensor&) {};
  uint64_t top_k_override = 0;
  std::map<std::string, uint64_t> set_u32;  // u32 keys' values replaced
};

// Adds `ts` (after e.tensor; a cleared name drops one) and writes the file to the temp dir.
std::string Finish(GgufBuilder& b, std::vector<BuilderTensor> ts, const Edits& e,
                   const std::string& name) {
  for (BuilderTensor& t : ts) {
    e.tensor(t);
    if (!t.name.empty()) b.AddTensor(std::move(t));
  }
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("pg_moe_gguf_" + name + "." + std::to_string(::getpid()) + ".gguf"))
                               .string();
  const std::vector<uint8_t> bytes = b.Build().bytes;
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  return path;
}

std::string Write(const Edits& e, const std::string& name) {
  const Shape s;
  GgufBuilder b;
  auto u32 = [&](const std::string& key, uint64_t v) {
    if (!e.drop_key(key)) b.AddU32(key, uint32_t(v));
  };
  b.AddString("general.architecture", "qwen3moe");
  u32("qwen3moe.embedding_length", s.hidden);
  u32("qwen3moe.block_count", 1);
  u32("qwen3moe.attention.head_count", s.heads);
  u32("qwen3moe.attention.head_count_kv", s.kv_heads);
  u32("qwen3moe.attention.key_length", s.head_dim);
  u32("qwen3moe.expert_count", s.experts);
  u32("qwen3moe.expert_used_count", e.top_k_override ? e.top_k_override : s.top_k);
  u32("qwen3moe.expert_feed_forward_length", s.ffn);
  b.AddF32("qwen3moe.attention.layer_norm_rms_epsilon", 1e-6f);
  const uint64_t q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
  std::vector<BuilderTensor> ts = {
      F32("token_embd.weight", {s.hidden, s.vocab}), F32("output_norm.weight", {s.hidden}, 1.0f),
      F32("blk.0.attn_norm.weight", {s.hidden}, 1.0f), F32("blk.0.ffn_norm.weight", {s.hidden}, 1.0f),
      F32("blk.0.attn_q.weight", {s.hidden, q}), F32("blk.0.attn_k.weight", {s.hidden, kv}),
      F32("blk.0.attn_v.weight", {s.hidden, kv}), F32("blk.0.attn_output.weight", {q, s.hidden}),
      F32("blk.0.attn_q_norm.weight", {s.head_dim}, 1.0f),
      F32("blk.0.attn_k_norm.weight", {s.head_dim}, 1.0f),
      F32("blk.0.ffn_gate_inp.weight", {s.hidden, s.experts}),
      F32("blk.0.ffn_gate_exps.weight", {s.hidden, s.ffn, s.experts}),
      F32("blk.0.ffn_up_exps.weight", {s.hidden, s.ffn, s.experts}),
      F32("blk.0.ffn_down_exps.weight", {s.ffn, s.hidden, s.experts}),
  };
  return Finish(b, std::move(ts), e, name);
}

// deepseek2 (the absorbed-MLA layout of llama.cpp's converter): hidden 64, 3 layers (0 dense
// of ffn 96, then MoE), 2 heads, attn_q (no q_lora), kv_lora 32, nope 16, rope 16, v 16;
// 4 experts of ffn 32 in 2 groups (top 1 group), top 2, 1 shared, sigmoid + bias; vocab 40.
std::string WriteDeepseek2(const Edits& e, const std::string& name) {
  const uint64_t h = 64, heads = 2, rank = 32, nope = 16, rope = 16, v = 16, experts = 4, ffn = 32,
                 dense_ffn = 96, vocab = 40;
  GgufBuilder b;
  auto u32 = [&](const std::string& key, uint64_t value) {
    const std::string k = "deepseek2." + key;
    if (e.drop_key(k)) return;
    auto it = e.set_u32.find(k);
    b.AddU32(k, uint32_t(it == e.set_u32.end() ? value : it->second));
  };
  b.AddString("general.architecture", "deepseek2");
  u32("embedding_length", h);
  u32("block_count", 3);
  u32("feed_forward_length", dense_ffn);
  u32("attention.head_count", heads);
  u32("attention.head_count_kv", 1);
  u32("attention.key_length", rank + rope);
  u32("attention.value_length", rank);
  u32("attention.key_length_mla", nope + rope);
  u32("attention.value_length_mla", v);
  u32("attention.q_lora_rank", 0);
  u32("attention.kv_lora_rank", rank);
  u32("rope.dimension_count", rope);
  u32("leading_dense_block_count", 1);
  u32("expert_count", experts);
  u32("expert_used_count", 2);
  u32("expert_shared_count", 1);
  u32("expert_feed_forward_length", ffn);
  u32("expert_group_count", 2);
  u32("expert_group_used_count", 1);
  u32("expert_gating_func", 2);
  b.AddF32("deepseek2.attention.layer_norm_rms_epsilon", 1e-6f);
  std::vector<BuilderTensor> ts = {F32("token_embd.weight", {h, vocab}),
                                   F32("output_norm.weight", {h}, 1.0f)};
  for (int i = 0; i < 3; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    for (BuilderTensor& t : std::vector<BuilderTensor>{
             F32(p + "attn_norm.weight", {h}, 1.0f), F32(p + "ffn_norm.weight", {h}, 1.0f),
             F32(p + "attn_q.weight", {h, heads * (nope + rope)}),
             F32(p + "attn_kv_a_mqa.weight", {h, rank + rope}),
             F32(p + "attn_kv_a_norm.weight", {rank}, 1.0f),
             F32(p + "attn_k_b.weight", {nope, rank, heads}),
             F32(p + "attn_v_b.weight", {rank, v, heads}),
             F32(p + "attn_output.weight", {heads * v, h})})
      ts.push_back(std::move(t));
    const std::vector<BuilderTensor> ffn_ts =
        i == 0 ? std::vector<BuilderTensor>{F32(p + "ffn_gate.weight", {h, dense_ffn}),
                                            F32(p + "ffn_up.weight", {h, dense_ffn}),
                                            F32(p + "ffn_down.weight", {dense_ffn, h})}
               : std::vector<BuilderTensor>{F32(p + "ffn_gate_inp.weight", {h, experts}),
                                            F32(p + "exp_probs_b.bias", {experts}),
                                            F32(p + "ffn_gate_exps.weight", {h, ffn, experts}),
                                            F32(p + "ffn_up_exps.weight", {h, ffn, experts}),
                                            F32(p + "ffn_down_exps.weight", {ffn, h, experts}),
                                            F32(p + "ffn_gate_shexp.weight", {h, ffn}),
                                            F32(p + "ffn_up_shexp.weight", {h, ffn}),
                                            F32(p + "ffn_down_shexp.weight", {ffn, h})};
    for (const BuilderTensor& t : ffn_ts) ts.push_back(t);
  }
  return Finish(b, std::move(ts), e, name);
}

// Loads `path`; returns the error's text ("" when it loaded), checking its code.
std::string LoadError(const std::string& path, ErrorCode want) {
  try {
    auto m = models::LoadModel({.path = path});
    std::remove(path.c_str());
    return "";
  } catch (const Error& e) {
    std::remove(path.c_str());
    EXPECT_EQ(e.code(), want) << e.what();
    std::printf("  refused: %s\n", e.what());  // what a user sees
    return e.what();
  }
}

// The valid file of a builder loads as `arch` and gives finite logits over its 40 tokens.
void ExpectLoadsAndRuns(const std::string& path, const std::string& arch) {
  auto model = models::LoadModel({.path = path});
  EXPECT_EQ(model->config().architecture, arch);
  runtime::SequenceRunner runner(*model, {.max_context = 64, .page_size = 16});
  const std::vector<int32_t> prompt = {1, 5, 9};
  std::span<float> logits = runner.Append(prompt);
  ASSERT_EQ(logits.size(), 40u);
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  std::remove(path.c_str());
}

TEST(MoeGguf, ValidFileLoadsAndRuns) {
  ExpectLoadsAndRuns(Write({}, "valid"), "qwen3_moe");
}

TEST(MoeGguf, Deepseek2ValidFileLoadsAndRuns) {
  ExpectLoadsAndRuns(WriteDeepseek2({}, "ds2_valid"), "deepseek2");
}

TEST(MoeGguf, Deepseek2MissingKvLoraRankIsNamed) {
  Edits e;
  e.drop_key = [](const std::string& k) { return k == "deepseek2.attention.kv_lora_rank"; };
  EXPECT_NE(LoadError(WriteDeepseek2(e, "ds2_no_rank"), ErrorCode::kNotFound)
                .find("deepseek2.attention.kv_lora_rank"),
            std::string::npos);
}

TEST(MoeGguf, Deepseek2KeyLengthMlaWithoutValueLengthMlaIsNamed) {
  Edits e;
  e.drop_key = [](const std::string& k) { return k == "deepseek2.attention.value_length_mla"; };
  const std::string err = LoadError(WriteDeepseek2(e, "ds2_no_vmla"), ErrorCode::kMalformed);
  EXPECT_NE(err.find("deepseek2.attention.value_length_mla is missing"), std::string::npos) << err;
}

TEST(MoeGguf, Deepseek2UnknownGatingFuncIsNamed) {
  Edits e;  // 4: llama.cpp's sqrt(softplus), which no DeepSeek model uses
  e.set_u32["deepseek2.expert_gating_func"] = 4;
  const std::string err = LoadError(WriteDeepseek2(e, "ds2_gating"), ErrorCode::kUnsupported);
  EXPECT_NE(err.find("deepseek2.expert_gating_func 4 is not supported"), std::string::npos) << err;
}

TEST(MoeGguf, Deepseek2KBWithoutVBIsNamed) {
  Edits e;
  e.tensor = [](BuilderTensor& t) {
    if (t.name == "blk.1.attn_v_b.weight") t.name.clear();
  };
  const std::string err = LoadError(WriteDeepseek2(e, "ds2_no_vb"), ErrorCode::kMalformed);
  EXPECT_NE(err.find("'blk.1.attn_k_b.weight' without 'blk.1.attn_v_b.weight'"), std::string::npos)
      << err;
}

TEST(MoeGguf, Deepseek2UntransposedKBIsRefused) {
  Edits e;  // k_b as HF's W_UK rows [heads, nope, rank], not the converter's [heads, rank, nope]
  e.tensor = [](BuilderTensor& t) {
    if (t.name == "blk.2.attn_k_b.weight") t = F32(t.name, {32, 16, 2});
  };
  const std::string err = LoadError(WriteDeepseek2(e, "ds2_kb_shape"), ErrorCode::kMalformed);
  EXPECT_NE(err.find("blk.2: attn_k_b [2, 16, 32]"), std::string::npos) << err;
}

TEST(MoeGguf, Deepseek2BiasOnSomeMoeLayersIsRefused) {
  Edits e;
  e.tensor = [](BuilderTensor& t) {
    if (t.name == "blk.2.exp_probs_b.bias") t.name.clear();
  };
  const std::string err = LoadError(WriteDeepseek2(e, "ds2_bias"), ErrorCode::kUnsupported);
  EXPECT_NE(err.find("'blk.2.exp_probs_b.bias' is absent while layer 1 has one"), std::string::npos)
      << err;
}

TEST(MoeGguf, MissingExpertCountIsNamed) {
  Edits e;
  e.drop_key = [](const std::string& k) { return k == "qwen3moe.expert_count"; };
  EXPECT_NE(LoadError(Write(e, "no_count"), ErrorCode::kNotFound).find("qwen3moe.expert_count"),
            std::string::npos);
}

TEST(MoeGguf, TopKAboveExpertsIsRefused) {
  Edits e;
  e.top_k_override = 9;
  EXPECT_NE(LoadError(Write(e, "topk"), ErrorCode::kMalformed).find("num_experts_per_tok 9"),
            std::string::npos);
}

TEST(MoeGguf, TwoDimensionalExpertTensorIsRefused) {
  Edits e;
  e.tensor = [](BuilderTensor& t) {
    if (t.name == "blk.0.ffn_up_exps.weight") t = F32(t.name, {64, 32 * 4});
  };
  EXPECT_NE(LoadError(Write(e, "2d"), ErrorCode::kMalformed).find("blk.0.ffn_up_exps.weight"),
            std::string::npos);
}

TEST(MoeGguf, ExpertOfTheWrongShapeIsNamed) {
  Edits e;  // down stored [experts, ffn, hidden] instead of [experts, hidden, ffn]
  e.tensor = [](BuilderTensor& t) {
    if (t.name == "blk.0.ffn_down_exps.weight") t = F32(t.name, {64, 32, 4});
  };
  const std::string err = LoadError(Write(e, "down_shape"), ErrorCode::kMalformed);
  EXPECT_NE(err.find("'blk.0.ffn_down_exps.weight[0]' has shape"), std::string::npos) << err;
}

TEST(MoeGguf, LayerWithoutRouterOrMlpIsNamed) {
  // Without ffn_gate_inp a layer is a dense SwiGLU (HF mlp_only_layers), so its ffn_gate /
  // ffn_up / ffn_down must then exist.
  Edits e;
  e.tensor = [](BuilderTensor& t) {
    if (t.name == "blk.0.ffn_gate_inp.weight") t.name.clear();
  };
  const std::string err = LoadError(Write(e, "no_router"), ErrorCode::kMalformed);
  EXPECT_NE(err.find("layer 0 has neither a router (blk.0.ffn_gate_inp.weight)"),
            std::string::npos) << err;
}

}  // namespace
}  // namespace pg
