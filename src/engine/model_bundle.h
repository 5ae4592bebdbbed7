// Everything that comes with a model: the network, its tokenizer, its chat template and
// generation defaults, loaded from one --model argument (a GGUF file, an HF folder, or
// "embedded"). For --load-format dummy there may be no tokenizer (token-id-only use).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/model.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace pg::engine {

struct BundleOptions {
  std::string model = "embedded";
  models::LoadFormat format = models::LoadFormat::kAuto;
  DType dummy_dtype = DType::kBF16;
  bool progress_bar = true;  // on stderr while weights are paged in
  // Loads the network (default: models::LoadModel, on the host). A device executor passes its
  // own (engine/cuda/cuda_executor.h: placed on the GPU, or dummy weights made there).
  std::function<std::unique_ptr<models::Model>(const models::LoadOptions&)> load_model;
  // A tokenizer.json to use instead of the model's own (dummy weights without a tokenizer).
  std::string tokenizer_path;
};

struct ModelBundle {
  std::string path;
  std::unique_ptr<models::Model> model;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;   // may be null (dummy weights)
  std::unique_ptr<jinja::ChatTemplate> chat_template; // may be null (no template)
  std::string chat_template_source;
  std::vector<int32_t> eos_ids;  // model + tokenizer + generation_config, deduplicated

  // Name to serve under: the model file's stem ("SmolLM2-135M-Instruct.Q4_1") or the HF
  // folder's name; the config's own name for dummy weights.
  std::string name() const;
};

// Throws pg::Error with a clear message for a missing or unsupported model.
ModelBundle LoadBundle(const BundleOptions& options);

}  // namespace pg::engine
