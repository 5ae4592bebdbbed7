#include "models/moe_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/status.h"
#include "io/gguf.h"
#include "kernels/rope_freq.h"

namespace pg::models {
namespace {

// The rope parameters object (transformers 5 "rope_parameters", 4.x "rope_scaling").
nlohmann::json RopeObject(const nlohmann::json& j) {
  for (const char* k : {"rope_parameters", "rope_scaling"})
    if (auto it = j.find(k); it != j.end() && it->is_object()) return *it;
  return nlohmann::json::object();
}

double YarnMscale(double factor, double mscale) {
  return factor <= 1 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

}  // namespace

bool IsMoeModelType(const std::string& t) {
  // deepseek_v2 (DeepSeek-V2-Lite) is DeepSeek-V3's architecture with softmax scoring and
  // greedy top-k (V2's group_limited_greedy is refused below).
  return t == "qwen3_moe" || t == "deepseek_v3" || t == "kimi_k2" || t == "deepseek_v2";
}

bool MoeModelConfig::IsMoeLayer(int layer) const {
  if (num_experts <= 0) return false;
  if (arch == MoeArch::kDeepseekV3) return layer >= first_k_dense_replace;
  return std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) ==
             mlp_only_layers.end() &&
         (layer + 1) % decoder_sparse_step == 0;
}

void MoeModelConfig::Validate() const {
  auto bad = [&](const std::string& what) {
    Throw(ErrorCode::kMalformed, "model config ({}): {}", model_type, what);
  };
  if (num_experts <= 0 || top_k <= 0 || top_k > num_experts)
    bad(fmt::format("num_experts {} / num_experts_per_tok {} invalid", num_experts, top_k));
  if (moe_intermediate_size <= 0) bad("moe_intermediate_size must be > 0");
  if (n_group <= 0 || num_experts % n_group != 0)
    bad(fmt::format("n_group {} must divide n_routed_experts {}", n_group, num_experts));
  if (topk_group <= 0 || topk_group > n_group)
    bad(fmt::format("topk_group {} must be in [1, n_group {}]", topk_group, n_group));
  if (top_k > topk_group * (num_experts / n_group))
    bad(fmt::format("num_experts_per_tok {} exceeds topk_group {} x {} experts per group", top_k,
                    topk_group, num_experts / n_group));
  if (decoder_sparse_step <= 0) bad("decoder_sparse_step must be > 0");
  if (arch == MoeArch::kDeepseekV3) {
    if (kv_lora_rank <= 0 || qk_nope_head_dim <= 0 || v_head_dim <= 0 || qk_rope_head_dim < 0 ||
        qk_rope_head_dim % 2 != 0 || q_lora_rank < 0)
      bad(fmt::format("MLA dims invalid: kv_lora_rank {} q_lora_rank {} nope {} rope {} v {}",
                      kv_lora_rank, q_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim));
    if (first_k_dense_replace < 0) bad("first_k_dense_replace must be >= 0");
  }
}

std::string MoeModelConfig::Summary() const {
  std::string s = fmt::format(
      "{} ({}): {} layers, hidden {}, heads {}, vocab {}, experts {} (top {}, ffn {}, shared {}), "
      "router {}{}, groups {}/{}, scaling {}",
      base.name, model_type, base.num_layers, base.hidden_size, base.num_heads, base.vocab_size,
      num_experts, top_k, moe_intermediate_size, num_shared_experts,
      scoring == ops::MoeScoring::kSoftmax ? "softmax" : "sigmoid",
      has_score_bias ? "+bias" : "", topk_group, n_group, routed_scaling_factor);
  if (arch == MoeArch::kDeepseekV3)
    s += fmt::format(", MLA q_lora {} kv_lora {} nope {} rope {} v {} (latent cache {} values/token)",
                     q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim,
                     latent_dim());
  if (mla_use_nope) s += ", NoPE (no rotary)";
  return s;
}

MoeModelConfig MoeConfigFromHf(const nlohmann::json& j) {
  PG_ENSURE(j.is_object(), kMalformed, "config.json: not a JSON object");
  MoeModelConfig c;
  c.model_type = ConfigField<std::string>(j, "model_type", "");
  PG_ENSURE(IsMoeModelType(c.model_type), kUnsupported,
            "config.json: model_type '{}' is not a MoE architecture (qwen3_moe, deepseek_v3, "
            "kimi_k2, deepseek_v2)",
            c.model_type);
  c.arch = c.model_type == "qwen3_moe" ? MoeArch::kQwen3Moe : MoeArch::kDeepseekV3;
  // The shared fields through the dense parser, on a copy presented as its nearest dense
  // relative (qwen3: q/k norm; llama: rope over head_dim = the rope dims of MLA).
  nlohmann::json d = j;
  if (c.arch == MoeArch::kQwen3Moe) {
    d["model_type"] = "qwen3";
    if (!d.contains("intermediate_size") || d["intermediate_size"].is_null())
      d["intermediate_size"] = ConfigField<int>(j, "moe_intermediate_size", 0);
  } else {
    d["model_type"] = "llama";
    d["head_dim"] = ConfigField<int>(j, "qk_rope_head_dim", 0);
    d["num_key_value_heads"] = ConfigField<int>(j, "num_attention_heads", 0);
    d.erase("partial_rotary_factor");
    d["attention_bias"] = false;
  }
  c.base = ConfigFromHf(d);
  c.base.architecture = c.model_type;
  c.top_k = ConfigField<int>(j, "num_experts_per_tok", 0);
  c.moe_intermediate_size = ConfigField<int>(j, "moe_intermediate_size", 0);
  c.norm_topk_prob = ConfigField<bool>(j, "norm_topk_prob", c.arch == MoeArch::kDeepseekV3);
  if (c.arch == MoeArch::kQwen3Moe) {
    // Published Qwen3-MoE configs say "num_experts"; transformers 5 writes "num_local_experts".
    c.num_experts = ConfigField<int>(j, "num_experts", ConfigField<int>(j, "num_local_experts", 0));
    c.decoder_sparse_step = ConfigField<int>(j, "decoder_sparse_step", 1);
    c.mlp_only_layers = ConfigField<std::vector<int>>(j, "mlp_only_layers", {});
    c.scoring = ops::MoeScoring::kSoftmax;
  } else {
    c.num_experts = ConfigField<int>(j, "n_routed_experts", 0);
    c.num_shared_experts = ConfigField<int>(j, "n_shared_experts", 0);
    c.routed_scaling_factor = ConfigField<float>(j, "routed_scaling_factor", 1.0f);
    c.n_group = ConfigField<int>(j, "n_group", 1);
    c.topk_group = ConfigField<int>(j, "topk_group", 1);
    c.first_k_dense_replace = ConfigField<int>(j, "first_k_dense_replace", 0);
    const std::string scoring = ConfigField<std::string>(j, "scoring_func", "sigmoid");
    if (scoring == "sigmoid") c.scoring = ops::MoeScoring::kSigmoid;
    else if (scoring == "softmax") c.scoring = ops::MoeScoring::kSoftmax;
    else Throw(ErrorCode::kUnsupported, "config.json: scoring_func '{}' is not supported", scoring);
    const std::string method = ConfigField<std::string>(j, "topk_method", "noaux_tc");
    PG_ENSURE(method == "noaux_tc" || method == "greedy", kUnsupported,
              "config.json: topk_method '{}' is not supported (noaux_tc, greedy)", method);
    c.has_score_bias = method == "noaux_tc";
    c.q_lora_rank = ConfigField<int>(j, "q_lora_rank", 0);
    c.kv_lora_rank = ConfigField<int>(j, "kv_lora_rank", 0);
    c.qk_nope_head_dim = ConfigField<int>(j, "qk_nope_head_dim", 0);
    c.qk_rope_head_dim = ConfigField<int>(j, "qk_rope_head_dim", 0);
    c.v_head_dim = ConfigField<int>(j, "v_head_dim", 0);
    // HF's DeepseekV3Config defaults rope_interleave to true (the original checkpoints rotate
    // pairs (2i, 2i+1)); q and k use the same pairing, so scores do not depend on the layout.
    c.base.rope.neox = !ConfigField<bool>(j, "rope_interleave", true);
    c.softmax_scale = 1.0f / std::sqrt(float(c.qk_nope_head_dim + c.qk_rope_head_dim));
    const nlohmann::json rp = RopeObject(j);
    // As HF's yarn_apply_mscale: any rope_type but "default" with a non-zero mscale_all_dim
    // (absent: 0, no change) multiplies the softmax scale by mscale(factor, mscale_all_dim)^2.
    const double mscale_all_dim = ConfigField<double>(rp, "mscale_all_dim", 0.0);
    c.mla_use_nope = ConfigField<bool>(j, "mla_use_nope", false);
    if (c.base.rope.scaling != ops::RopeScaling::kNone && mscale_all_dim != 0.0 && !c.mla_use_nope) {
      const double m = YarnMscale(c.base.rope.factor, mscale_all_dim);
      c.softmax_scale = float(c.softmax_scale * m * m);
    }
    c.base.rope.rotary_dim = c.qk_rope_head_dim;
    c.rope_q_scale = c.mla_use_nope ? 1.0f : ops::RopeAttentionScale(c.base.rope);
    if (auto it = j.find("quantization_config"); it != j.end() && it->is_object()) {
      const std::string method_q = ConfigField<std::string>(*it, "quant_method", "");
      PG_ENSURE(method_q == "fp8", kUnsupported,
                "config.json: quantization method '{}' is not supported (fp8 block-scaled is)",
                method_q);
      auto bs = ConfigField<std::vector<int>>(*it, "weight_block_size", {128, 128});
      PG_ENSURE(bs.size() == 2 && bs[0] > 0 && bs[1] > 0, kMalformed,
                "config.json: weight_block_size must be two positive sizes");
      c.fp8_block_rows = bs[0];
      c.fp8_block_cols = bs[1];
    }
    // The runtime's cache shape: the latent row split over K and V (ops_moe.h).
    c.base.num_kv_heads = 1;
    c.base.head_dim = int(ops::MlaCacheHalfDim(c.kv_lora_rank, c.qk_rope_head_dim));
  }
  c.Validate();
  return c;
}

bool IsMoeGgufArch(const std::string& arch) {
  return arch == "qwen3moe" || arch == "deepseek2";
}

namespace {

// "<arch>.expert_feed_forward_length": a number, or (newer llama.cpp files) a per-layer array
// accepted when every layer has one size.
int ExpertFfnLength(const io::GgufFile& g, const std::string& a) {
  if (const io::GgufValue* ff = g.Find(a + "expert_feed_forward_length");
      ff != nullptr && ff->type == io::GgufType::kArray) {
    const io::GgufArray& sizes = ff->AsArray();
    PG_ENSURE(!sizes.empty(), kMalformed, "{}: {}expert_feed_forward_length is empty", g.path(), a);
    for (const io::GgufValue& v : sizes)
      PG_ENSURE(v.AsInt() == sizes[0].AsInt(), kUnsupported,
                "{}: experts of different sizes per layer are not supported", g.path());
    return int(sizes[0].AsInt());
  }
  return int(g.GetInt(a + "expert_feed_forward_length"));
}

// The keys every llama.cpp MoE architecture has: expert_count, expert_used_count and the
// expert size.
void ReadExpertCounts(const io::GgufFile& g, const std::string& a, MoeModelConfig& c) {
  c.num_experts = int(g.GetInt(a + "expert_count"));
  c.top_k = int(g.GetInt(a + "expert_used_count"));
  c.moe_intermediate_size = ExpertFfnLength(g, a);
}

MoeModelConfig Qwen3MoeConfigFromGguf(const io::GgufFile& g) {
  MoeModelConfig c;
  const std::string a = "qwen3moe.";
  c.arch = MoeArch::kQwen3Moe;
  c.model_type = "qwen3_moe";
  c.base = ConfigFromGgufAs(g, "qwen3");
  c.base.architecture = c.model_type;
  ReadExpertCounts(g, a, c);
  // llama.cpp's qwen3moe graph always renormalises the top-k weights (HF: norm_topk_prob).
  const io::GgufValue* norm = g.Find(a + "expert_weights_norm");
  c.norm_topk_prob = norm == nullptr || norm->AsBool();
  c.scoring = ops::MoeScoring::kSoftmax;
  // A layer without a router (blk.N.ffn_gate_inp) is a dense SwiGLU block (HF mlp_only_layers).
  for (int i = 0; i < c.base.num_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    if (g.FindTensor(p + "ffn_gate_inp.weight")) continue;
    PG_ENSURE(g.FindTensor(p + "ffn_gate.weight"), kMalformed,
              "{}: layer {} has neither a router ({}ffn_gate_inp.weight) nor a dense MLP "
              "({}ffn_gate.weight)",
              g.path(), i, p, p);
    c.mlp_only_layers.push_back(i);
  }
  return c;
}

// llama.cpp's deepseek2 (src/models/deepseek2.cpp), onto the DeepSeek-V3 model:
//  * MLA dims: attention.kv_lora_rank, attention.q_lora_rank (absent / 0: attn_q, as
//    DeepSeek-V2-Lite), rope.dimension_count = qk_rope_head_dim. Files from the current
//    converter describe the absorbed form (head_count_kv 1, key_length = kv_lora + rope,
//    value_length = kv_lora) and give the per-head sizes as key_length_mla (nope + rope) and
//    value_length_mla (v); older files have key_length / value_length = those sizes.
//  * Routing: expert_gating_func 1 softmax / 2 sigmoid (absent: softmax, llama.cpp's
//    default for old V2 files); blk.N.exp_probs_b.bias the selection bias; groups
//    expert_group_count / expert_group_used_count (group score: the best two, as V3);
//    expert_weights_norm (absent: false); expert_weights_scale (absent or 0: 1);
//    leading_dense_block_count dense layers first.
//  * Rope: interleaved pairs (llama.cpp's "norm" rope; the converter permutes nothing). YaRN
//    as llama.cpp computes it: the rotation keeps unit magnitude (it assumes mscale ==
//    mscale_all_dim) and the softmax scale is mscale^2 / sqrt(nope + rope) with
//    mscale = 1 + 0.1 * m * ln(factor), m = rope.scaling.yarn_log_multiplier / 0.1 (the
//    converter writes 0.1 * mscale_all_dim). Beta fast / slow are llama.cpp's 32 / 1.
//  * Trailing nextn_predict_layers (multi-token prediction) are not run, as llama.cpp.
MoeModelConfig Deepseek2ConfigFromGguf(const io::GgufFile& g) {
  MoeModelConfig c;
  const std::string a = "deepseek2.";
  auto key_error = [&](ErrorCode code, const std::string& key, const std::string& what) {
    Throw(code, "{}: {}{} {}", g.path(), a, key, what);
  };
  constexpr ErrorCode kMalformed = ErrorCode::kMalformed, kUnsupported = ErrorCode::kUnsupported;
  c.arch = MoeArch::kDeepseekV3;
  c.model_type = "deepseek2";
  // The shared fields as the llama family (rope pairs (2i, 2i + 1)); head_dim / kv heads are
  // replaced below by the latent cache's.
  c.base = ConfigFromGgufAs(g, "llama");
  c.base.architecture = c.model_type;
  c.base.name = g.GetStringOr("general.name", c.model_type);
  if (const int64_t nextn = g.GetIntOr(a + "nextn_predict_layers", 0); nextn > 0) {
    if (nextn >= c.base.num_layers)
      key_error(kMalformed, "nextn_predict_layers", "exceeds block_count");
    c.base.num_layers -= int(nextn);
  }
  c.kv_lora_rank = int(g.GetInt(a + "attention.kv_lora_rank"));
  c.q_lora_rank = int(g.GetIntOr(a + "attention.q_lora_rank", 0));
  c.qk_rope_head_dim = int(g.GetInt(a + "rope.dimension_count"));
  const bool mla_keys = g.Find(a + "attention.key_length_mla") != nullptr;
  if (mla_keys != (g.Find(a + "attention.value_length_mla") != nullptr))
    key_error(kMalformed, mla_keys ? "attention.value_length_mla" : "attention.key_length_mla",
              "is missing (key_length_mla and value_length_mla come together)");
  const std::string sfx = mla_keys ? "_mla" : "";
  const int qk = int(g.GetInt(a + "attention.key_length" + sfx));
  c.v_head_dim = int(g.GetInt(a + "attention.value_length" + sfx));
  c.qk_nope_head_dim = qk - c.qk_rope_head_dim;
  if (c.qk_nope_head_dim <= 0)
    key_error(kMalformed, "attention.key_length" + sfx,
              fmt::format("{} leaves no non-rope dims beside rope.dimension_count {}", qk,
                          c.qk_rope_head_dim));

  ReadExpertCounts(g, a, c);
  c.num_shared_experts = int(g.GetInt(a + "expert_shared_count"));
  c.first_k_dense_replace = int(g.GetIntOr(a + "leading_dense_block_count", 0));
  const double scale = g.GetFloatOr(a + "expert_weights_scale", 0.0);
  c.routed_scaling_factor = scale == 0.0 ? 1.0f : float(scale);
  const io::GgufValue* norm = g.Find(a + "expert_weights_norm");
  c.norm_topk_prob = norm != nullptr && norm->AsBool();
  switch (const int64_t f = g.GetIntOr(a + "expert_gating_func", 1)) {
    case 1:
      c.scoring = ops::MoeScoring::kSoftmax;
      break;
    case 2:
      c.scoring = ops::MoeScoring::kSigmoid;
      break;
    default:
      key_error(kUnsupported, "expert_gating_func",
                fmt::format("{} is not supported (1 softmax, 2 sigmoid)", f));
  }
  c.n_group = std::max(1, int(g.GetIntOr(a + "expert_group_count", 1)));
  c.topk_group = c.n_group > 1 ? int(g.GetInt(a + "expert_group_used_count")) : 1;
  // The selection bias: every routed layer has one or none does.
  for (int i = c.first_k_dense_replace; i < c.base.num_layers; ++i) {
    const std::string bias = "blk." + std::to_string(i) + ".exp_probs_b.bias";
    const bool has = g.FindTensor(bias) != nullptr;
    if (i == c.first_k_dense_replace) c.has_score_bias = has;
    PG_ENSURE(has == c.has_score_bias, kUnsupported,
              "{}: '{}' is {} while layer {} {} one (a bias on some MoE layers only)", g.path(),
              bias, has ? "present" : "absent", c.first_k_dense_replace,
              c.has_score_bias ? "has" : "has no");
  }

  const ops::RopeScaling rs = c.base.rope.scaling;
  if (rs != ops::RopeScaling::kNone && rs != ops::RopeScaling::kYarn)
    key_error(kUnsupported, "rope.scaling.type", "is not supported for deepseek2 (none, yarn)");
  if (const double af = g.GetFloatOr(a + "rope.scaling.attn_factor", 1.0); af != 1.0)
    key_error(kUnsupported, "rope.scaling.attn_factor", fmt::format("{} is not supported (1)", af));
  if (g.GetFloatOr(a + "attention.temperature_scale", 0.0) != 0.0)
    key_error(kUnsupported, "attention.temperature_scale",
              "(attention temperature tuning) is not supported");
  c.base.rope.rotary_dim = c.qk_rope_head_dim;
  c.base.rope.beta_fast = 32.0f;
  c.base.rope.beta_slow = 1.0f;
  const double m = g.GetFloatOr(a + "rope.scaling.yarn_log_multiplier", 0.0) / 0.1;
  c.base.rope.mscale = c.base.rope.mscale_all_dim = float(m);
  c.softmax_scale = 1.0f / std::sqrt(float(qk));
  if (rs == ops::RopeScaling::kYarn) {
    const double ms = YarnMscale(c.base.rope.factor, m);
    c.softmax_scale = float(c.softmax_scale * ms * ms);
  }
  c.rope_q_scale = 1.0f;
  c.base.num_kv_heads = 1;
  c.base.head_dim = int(ops::MlaCacheHalfDim(c.kv_lora_rank, c.qk_rope_head_dim));
  return c;
}

}  // namespace

MoeModelConfig MoeConfigFromGguf(const io::GgufFile& g) {
  const std::string arch = g.GetString("general.architecture");
  PG_ENSURE(IsMoeGgufArch(arch), kUnsupported,
            "{}: GGUF architecture '{}' is not a MoE architecture Peregrine reads (qwen3moe, "
            "deepseek2)",
            g.path(), arch);
  MoeModelConfig c = arch == "qwen3moe" ? Qwen3MoeConfigFromGguf(g) : Deepseek2ConfigFromGguf(g);
  c.Validate();
  return c;
}

}  // namespace pg::models
