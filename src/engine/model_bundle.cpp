#include "engine/model_bundle.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <unistd.h>

#include "core/log.h"
#include "core/status.h"
#include "io/gguf.h"
#include "io/hf_config.h"
#include "models/loader.h"

namespace pg::engine {
namespace fs = std::filesystem;
namespace {

// A one-line progress bar on stderr (only when stderr is a terminal).
struct ProgressBar {
  bool enabled = isatty(2);
  int last = -1;
  void operator()(int64_t done, int64_t total) {
    if (!enabled || total <= 0) return;
    int pct = int(done * 100 / total);
    if (pct == last) return;
    last = pct;
    int filled = pct / 4;
    std::fprintf(stderr, "\rloading weights [%.*s%*s] %3d%% (%.0f MiB)", filled,
                 "#########################", 25 - filled, "", pct, double(total) / (1 << 20));
    if (pct == 100) std::fprintf(stderr, "\n");
  }
};

std::string PieceOrEmpty(const tokenizer::Tokenizer& t, std::optional<int32_t> id) {
  return id ? std::string(t.TokenToPiece(*id)) : std::string();
}

void AddUnique(std::vector<int32_t>& v, int32_t id) {
  if (id >= 0 && std::find(v.begin(), v.end(), id) == v.end()) v.push_back(id);
}

}  // namespace

std::string ModelBundle::name() const {
  const fs::path p(path);
  if (fs::is_regular_file(p) && p.extension() == ".gguf") return p.stem().string();
  if (fs::is_directory(p)) return fs::absolute(p).lexically_normal().filename().string();
  return model ? model->config().name : p.stem().string();
}

ModelBundle LoadBundle(const BundleOptions& o) {
  ModelBundle b;
  const bool dummy = o.format == models::LoadFormat::kDummy;
  b.path = dummy ? o.model : models::ResolveModelPath(o.model);
  ProgressBar bar;
  bar.enabled = bar.enabled && o.progress_bar;
  models::LoadOptions lo{.path = b.path, .format = o.format, .dummy_dtype = o.dummy_dtype};
  lo.progress = [&bar](int64_t d, int64_t t) { bar(d, t); };
  b.model = o.load_model ? o.load_model(lo) : models::LoadModel(lo);
  if (!o.load_model) b.model->PrepareHost();  // a host model: pack its weights before serving
  for (int id : b.model->config().eos_token_ids) AddUnique(b.eos_ids, id);

  const fs::path p(b.path);
  if (!dummy && fs::is_regular_file(p)) {  // GGUF: tokenizer and template from metadata
    auto gguf = io::GgufFile::Open(b.path);
    b.tokenizer = tokenizer::Tokenizer::FromGguf(*gguf);
    b.chat_template_source = gguf->GetStringOr("tokenizer.chat_template", "");
  } else {
    const fs::path dir = fs::is_directory(p) ? p : p.parent_path();
    if (fs::exists(dir / "tokenizer.json")) {
      b.tokenizer = tokenizer::Tokenizer::FromHfJson((dir / "tokenizer.json").string());
      if (fs::exists(dir / "tokenizer_config.json")) {
        io::TokenizerConfig tc = io::LoadTokenizerConfig((dir / "tokenizer_config.json").string());
        if (const std::string* t = tc.DefaultChatTemplate()) b.chat_template_source = *t;
      }
      if (fs::exists(dir / "chat_template.jinja") && b.chat_template_source.empty()) {
        std::FILE* f = std::fopen((dir / "chat_template.jinja").c_str(), "rb");
        if (f) {
          char buf[4096];
          size_t n;
          while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) b.chat_template_source.append(buf, n);
          std::fclose(f);
        }
      }
    }
    if (fs::exists(dir / "generation_config.json")) {
      io::GenerationConfig gc = io::LoadGenerationConfig((dir / "generation_config.json").string());
      for (int64_t id : gc.eos_token_ids) AddUnique(b.eos_ids, int32_t(id));
    }
  }
  if (!o.tokenizer_path.empty()) {
    b.tokenizer = tokenizer::Tokenizer::FromHfJson(o.tokenizer_path);
    const fs::path tc = fs::path(o.tokenizer_path).parent_path() / "tokenizer_config.json";
    if (b.chat_template_source.empty() && fs::exists(tc))
      if (const std::string* t = io::LoadTokenizerConfig(tc.string()).DefaultChatTemplate())
        b.chat_template_source = *t;
  }
  if (b.tokenizer) {
    for (int32_t id : b.tokenizer->eos_ids()) AddUnique(b.eos_ids, id);
    if (!b.chat_template_source.empty()) {
      b.chat_template = std::make_unique<jinja::ChatTemplate>(
          b.chat_template_source, PieceOrEmpty(*b.tokenizer, b.tokenizer->bos_id()),
          PieceOrEmpty(*b.tokenizer, b.tokenizer->eos_ids().empty()
                                         ? std::nullopt
                                         : std::optional<int32_t>(b.tokenizer->eos_ids()[0])));
    }
  }
  PG_LOG_INFO("loaded {} from {} ({:.1f} MiB of weights{}{})", b.name(), b.path,
              double(b.model->weight_bytes()) / (1 << 20), b.tokenizer ? ", tokenizer" : "",
              b.chat_template ? ", chat template" : "");
  return b;
}

}  // namespace pg::engine
