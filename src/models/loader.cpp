#include "models/loader.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/log.h"
#include "core/status.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "models/llama.h"
#include "models/model.h"
#include "models/moe_config.h"
#include "models/moe_loader.h"
#include "models/weights.h"

#ifndef PEREGRINE_SOURCE_DIR
#define PEREGRINE_SOURCE_DIR "."
#endif

namespace pg::models {
namespace fs = std::filesystem;

std::string EmbeddedModelPath() {
  return std::string(PEREGRINE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

std::string ResolveModelPath(std::string_view model) {
  std::string path = (model.empty() || model == "embedded") ? EmbeddedModelPath() : std::string(model);
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    if (model.empty() || model == "embedded")
      Throw(ErrorCode::kNotFound,
            "the embedded model is not at {}; run scripts/run (or scripts/lib/setup.sh) to fetch it",
            path);
    Throw(ErrorCode::kNotFound, "model not found: {}", path);
  }
  return path;
}

namespace {

nlohmann::json ReadJson(const fs::path& p) {
  std::ifstream in(p);
  PG_ENSURE(in.good(), kNotFound, "cannot open {}", p.string());
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    Throw(ErrorCode::kMalformed, "{}: invalid JSON: {}", p.string(), e.what());
  }
}

bool IsGguf(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && std::string_view(magic, 4) == "GGUF";
}

// Touches every page of the weights so the first request does not pay for page faults, and
// reports progress.
void PageIn(const LoadOptions& o, const std::vector<TensorView>& views) {
  int64_t total = 0, done = 0;
  for (const auto& v : views) total += v.nbytes();
  volatile uint8_t sink = 0;
  for (const auto& v : views) {
    const uint8_t* p = static_cast<const uint8_t*>(v.data);
    for (int64_t i = 0; i < v.nbytes(); i += 4096) sink = uint8_t(sink + p[i]);
    done += v.nbytes();
    if (o.progress) o.progress(done, total);
  }
}

}  // namespace

std::unique_ptr<Model> LoadModel(const LoadOptions& o) {
  fs::path path(o.path);
  ModelConfig config;
  std::unique_ptr<WeightStore> weights;
  // MoE architectures (qwen3_moe, deepseek_v3, kimi_k2) have their own loader (moe_loader.h).
  {
    fs::path cfg = fs::is_directory(path) ? path / "config.json" : path;
    if ((o.format == LoadFormat::kDummy || fs::is_directory(path)) && fs::exists(cfg)) {
      nlohmann::json j = ReadJson(cfg);
      if (j.is_object() && j.contains("model_type") && j["model_type"].is_string() &&
          IsMoeModelType(j["model_type"].get<std::string>()))
        return LoadMoeModel(o, j, cfg.parent_path().string());
    }
  }
  if (o.format == LoadFormat::kDummy) {
    fs::path cfg = fs::is_directory(path) ? path / "config.json" : path;
    config = ConfigFromHf(ReadJson(cfg));
    config.name = cfg.parent_path().filename().string() + " (dummy weights)";
    weights = WeightStore::Dummy(config, o.dummy_dtype, o.dummy_seed);
  } else if (fs::is_regular_file(path) && IsGguf(path)) {
    auto gguf = io::GgufFile::Open(path.string());
    if (IsMoeGgufArch(gguf->GetStringOr("general.architecture", ""))) {
      std::vector<TensorView> views;  // the matrices; the mapping lives as long as the model
      for (const auto& t : gguf->tensors())
        if (t.ndim >= 2) views.push_back(t.view());
      std::unique_ptr<Model> m = LoadMoeModelFromGguf(std::move(gguf));
      PageIn(o, views);
      return m;
    }
    config = ConfigFromGguf(*gguf);
    weights = WeightStore::FromGguf(std::move(gguf));
  } else if (fs::is_directory(path) && fs::exists(path / "config.json")) {
    config = ConfigFromHf(ReadJson(path / "config.json"));
    config.name = path.filename().string();
    weights = WeightStore::FromSafetensors(io::SafetensorsModel::Open(path.string()));
  } else if (fs::is_regular_file(path)) {
    Throw(ErrorCode::kUnsupported,
          "{}: not a GGUF file (expected a .gguf file or a folder with config.json and "
          "*.safetensors)",
          path.string());
  } else {
    Throw(ErrorCode::kNotFound, "{}: no config.json in this folder", path.string());
  }
  std::vector<TensorView> views;
  for (const char* name : {"token_embd.weight", "output.weight"})
    if (const TensorView* v = weights->Find(name)) views.push_back(*v);
  for (int i = 0; i < config.num_layers; ++i)
    for (const char* s : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"})
      if (const TensorView* v = weights->Find("blk." + std::to_string(i) + "." + s + ".weight"))
        views.push_back(*v);
  PageIn(o, views);
  PG_LOG_INFO("model: {}", config.Summary());
  return CreateLlama(std::move(config), std::move(weights));
}

}  // namespace pg::models
