#include "io/hf_config.h"

#include <charconv>
#include <cmath>
#include <filesystem>

namespace pg::io {
namespace {

using nlohmann::json;

AddedToken ParseAddedToken(const json& v, std::string_view where, std::string_view key) {
  AddedToken t;
  if (v.is_string()) {
    t.content = v.get<std::string>();
    return t;
  }
  if (!v.is_object())
    Throw(ErrorCode::kMalformed, "{}: '{}' is {}, expected a string or an AddedToken object",
          where, key, JsonTypeName(v));
  std::string w = fmt::format("{} '{}'", where, key);
  t.content = Get<std::string>(v, "content", w);
  t.special = GetOr<bool>(v, "special", false, w);
  t.lstrip = GetOr<bool>(v, "lstrip", false, w);
  t.rstrip = GetOr<bool>(v, "rstrip", false, w);
  t.single_word = GetOr<bool>(v, "single_word", false, w);
  t.normalized = GetOr<bool>(v, "normalized", false, w);
  return t;
}

std::optional<AddedToken> OptionalToken(const json& j, const char* key, std::string_view where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  return ParseAddedToken(*it, where, key);
}

template <typename T>
std::optional<T> Optional(const json& j, std::string_view key, std::string_view where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  return Get<T>(j, key, where);
}

void RequireObject(const json& j, std::string_view where) {
  if (!j.is_object())
    Throw(ErrorCode::kMalformed, "{}: top level is a JSON {}, expected an object", where,
          JsonTypeName(j));
}

}  // namespace

GenerationConfig ParseGenerationConfig(const json& j, std::string_view where) {
  RequireObject(j, where);
  GenerationConfig g;
  g.raw = j;
  if (auto it = j.find("eos_token_id"); it != j.end() && !it->is_null()) {
    if (it->is_array()) {
      for (size_t i = 0; i < it->size(); ++i) {
        std::optional<int64_t> id = detail::Convert<int64_t>((*it)[i]);
        if (!id)
          Throw(ErrorCode::kMalformed, "{}: eos_token_id[{}] is {}, expected an integer", where,
                i, JsonTypeName((*it)[i]));
        g.eos_token_ids.push_back(*id);
      }
    } else {
      g.eos_token_ids.push_back(Get<int64_t>(j, "eos_token_id", where));
    }
  }
  g.bos_token_id = Optional<int64_t>(j, "bos_token_id", where);
  g.pad_token_id = Optional<int64_t>(j, "pad_token_id", where);
  g.do_sample = Optional<bool>(j, "do_sample", where);
  g.temperature = Optional<double>(j, "temperature", where);
  g.top_p = Optional<double>(j, "top_p", where);
  g.top_k = Optional<int64_t>(j, "top_k", where);
  g.min_p = Optional<double>(j, "min_p", where);
  g.repetition_penalty = Optional<double>(j, "repetition_penalty", where);
  g.max_new_tokens = Optional<int64_t>(j, "max_new_tokens", where);
  g.max_length = Optional<int64_t>(j, "max_length", where);
  if (g.temperature && *g.temperature < 0)
    Throw(ErrorCode::kMalformed, "{}: temperature {} is negative", where, *g.temperature);
  if (g.top_p && !(*g.top_p > 0 && *g.top_p <= 1))
    Throw(ErrorCode::kMalformed, "{}: top_p {} is outside (0, 1]", where, *g.top_p);
  if (g.top_k && *g.top_k < 0)
    Throw(ErrorCode::kMalformed, "{}: top_k {} is negative", where, *g.top_k);
  return g;
}

GenerationConfig LoadGenerationConfig(const std::string& path) {
  return ParseGenerationConfig(LoadJsonFile(path), path);
}

const std::string* TokenizerConfig::DefaultChatTemplate() const {
  if (auto it = chat_templates.find("default"); it != chat_templates.end()) return &it->second;
  if (chat_templates.size() == 1) return &chat_templates.begin()->second;
  return nullptr;
}

TokenizerConfig ParseTokenizerConfig(const json& j, std::string_view where) {
  RequireObject(j, where);
  TokenizerConfig t;
  t.raw = j;
  t.bos_token = OptionalToken(j, "bos_token", where);
  t.eos_token = OptionalToken(j, "eos_token", where);
  t.pad_token = OptionalToken(j, "pad_token", where);
  t.unk_token = OptionalToken(j, "unk_token", where);
  t.add_bos_token = Optional<bool>(j, "add_bos_token", where);
  t.add_eos_token = Optional<bool>(j, "add_eos_token", where);
  t.tokenizer_class = Optional<std::string>(j, "tokenizer_class", where);
  if (auto it = j.find("model_max_length"); it != j.end() && !it->is_null()) {
    // transformers writes 1e30 ("VERY_LARGE_INTEGER") when there is no limit.
    if (auto v = detail::Convert<int64_t>(*it)) {
      t.model_max_length = *v;
    } else if (!it->is_number_float()) {
      Throw(ErrorCode::kMalformed, "{}: model_max_length is {}, expected a number", where,
            JsonTypeName(*it));
    } else if (double d = it->get<double>(); d >= 0 && d < 9.2e18 && d == std::floor(d)) {
      t.model_max_length = int64_t(d);
    }
  }
  if (auto it = j.find("chat_template"); it != j.end() && !it->is_null()) {
    if (it->is_string()) {
      t.chat_templates["default"] = it->get<std::string>();
    } else if (it->is_array()) {
      for (size_t i = 0; i < it->size(); ++i) {
        std::string w = fmt::format("{} chat_template[{}]", where, i);
        const json& e = (*it)[i];
        if (!e.is_object())
          Throw(ErrorCode::kMalformed, "{} is {}, expected {{\"name\", \"template\"}}", w,
                JsonTypeName(e));
        std::string name = Get<std::string>(e, "name", w);
        if (!t.chat_templates.emplace(name, Get<std::string>(e, "template", w)).second)
          Throw(ErrorCode::kMalformed, "{}: duplicate chat template name '{}'", where, name);
      }
    } else {
      Throw(ErrorCode::kMalformed, "{}: chat_template is {}, expected a string or a list", where,
            JsonTypeName(*it));
    }
  }
  if (auto it = j.find("added_tokens_decoder"); it != j.end() && !it->is_null()) {
    if (!it->is_object())
      Throw(ErrorCode::kMalformed, "{}: added_tokens_decoder is {}, expected an object", where,
            JsonTypeName(*it));
    for (const auto& [id_str, tok] : it->items()) {
      int64_t id = -1;
      auto [p, ec] = std::from_chars(id_str.data(), id_str.data() + id_str.size(), id);
      if (ec != std::errc() || p != id_str.data() + id_str.size() || id < 0)
        Throw(ErrorCode::kMalformed, "{}: added_tokens_decoder key '{}' is not a token id", where,
              id_str);
      t.added_tokens_decoder[id] =
          ParseAddedToken(tok, where, fmt::format("added_tokens_decoder.{}", id_str));
    }
  }
  return t;
}

TokenizerConfig LoadTokenizerConfig(const std::string& path) {
  return ParseTokenizerConfig(LoadJsonFile(path), path);
}

HfModelConfigs LoadHfModelConfigs(const std::string& dir) {
  namespace fs = std::filesystem;
  HfModelConfigs out;
  const fs::path d(dir);
  out.config = LoadJsonFile((d / "config.json").string());
  RequireObject(out.config, (d / "config.json").string());
  std::error_code ec;
  if (fs::exists(d / "generation_config.json", ec))
    out.generation = LoadGenerationConfig((d / "generation_config.json").string());
  if (fs::exists(d / "tokenizer_config.json", ec))
    out.tokenizer = LoadTokenizerConfig((d / "tokenizer_config.json").string());
  return out;
}

}  // namespace pg::io
