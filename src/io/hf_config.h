// Hugging Face JSON configs: config.json, generation_config.json, tokenizer_config.json.
// Files are parsed strictly (io/json_util.h) into nlohmann::json; typed helpers read fields
// with clear errors naming the file, the key and the expected type.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <type_traits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "io/json_util.h"

namespace pg::io {

// ---- typed field access ----
// `where` names the document in messages (usually the file path).
// GetOr: the default when `key` is absent or null; kMalformed when present with a wrong type.
// Get:   kNotFound when absent.
// Integer targets reject fractional and out-of-range numbers; floating targets accept integers.
namespace detail {
template <typename T>
std::optional<T> Convert(const nlohmann::json& v) {
  using J = nlohmann::json;
  if constexpr (std::is_same_v<T, bool>) {
    if (v.is_boolean()) return v.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    if (v.is_number_unsigned()) {
      uint64_t u = v.get<uint64_t>();
      if (u <= uint64_t(std::numeric_limits<T>::max())) return T(u);
    } else if (v.is_number_integer()) {
      int64_t i = v.get<int64_t>();
      if (std::is_signed_v<T> ? (i >= int64_t(std::numeric_limits<T>::min()) &&
                                 i <= int64_t(std::numeric_limits<T>::max()))
                              : (i >= 0 && uint64_t(i) <= uint64_t(std::numeric_limits<T>::max())))
        return T(i);
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    if (v.is_number()) return v.get<T>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (v.is_string()) return v.get<std::string>();
  } else if constexpr (std::is_same_v<T, J>) {
    return v;
  } else {
    static_assert(sizeof(T) == 0, "unsupported type for GetOr/Get");
  }
  return std::nullopt;
}
template <typename T>
constexpr std::string_view TypeLabel() {
  if constexpr (std::is_same_v<T, bool>) return "a boolean";
  else if constexpr (std::is_integral_v<T>) return "an integer in range";
  else if constexpr (std::is_floating_point_v<T>) return "a number";
  else if constexpr (std::is_same_v<T, std::string>) return "a string";
  else return "a value";
}
}  // namespace detail

template <typename T>
T GetOr(const nlohmann::json& obj, std::string_view key, T def, std::string_view where = "json") {
  if (!obj.is_object()) return def;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return def;
  std::optional<T> v = detail::Convert<T>(*it);
  if (!v)
    Throw(ErrorCode::kMalformed, "{}: '{}' is {} ({}), expected {}", where, key,
          JsonTypeName(*it), it->dump(), detail::TypeLabel<T>());
  return *v;
}

template <typename T>
T Get(const nlohmann::json& obj, std::string_view key, std::string_view where = "json") {
  if (!obj.is_object() || !obj.contains(key))
    Throw(ErrorCode::kNotFound, "{}: required key '{}' is missing", where, key);
  const nlohmann::json& v = obj.at(std::string(key));
  std::optional<T> out = detail::Convert<T>(v);
  if (!out)
    Throw(ErrorCode::kMalformed, "{}: '{}' is {} ({}), expected {}", where, key, JsonTypeName(v),
          v.dump(), detail::TypeLabel<T>());
  return *out;
}

// ---- generation_config.json ----
// Fields the file does not set stay nullopt/empty: the engine applies its own defaults.
struct GenerationConfig {
  std::vector<int64_t> eos_token_ids;  // "eos_token_id": int or list of ints
  std::optional<int64_t> bos_token_id;
  std::optional<int64_t> pad_token_id;
  std::optional<bool> do_sample;
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<double> min_p;
  std::optional<double> repetition_penalty;
  std::optional<int64_t> max_new_tokens;
  std::optional<int64_t> max_length;
  nlohmann::json raw;
};
GenerationConfig ParseGenerationConfig(const nlohmann::json& j, std::string_view where);
GenerationConfig LoadGenerationConfig(const std::string& path);

// ---- tokenizer_config.json ----
// A token given either as a plain string or as an AddedToken object
// {"content": ..., "special", "lstrip", "rstrip", "single_word", "normalized"}.
struct AddedToken {
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

struct TokenizerConfig {
  std::optional<AddedToken> bos_token, eos_token, pad_token, unk_token;
  std::optional<bool> add_bos_token;
  std::optional<bool> add_eos_token;
  std::optional<int64_t> model_max_length;  // absent when the file uses a huge placeholder
  std::optional<std::string> tokenizer_class;
  // Chat templates by name. A plain string template is stored as "default"; the list form
  // [{"name": ..., "template": ...}] keeps its names ("default", "tool_use", ...).
  std::map<std::string, std::string> chat_templates;
  std::map<int64_t, AddedToken> added_tokens_decoder;  // id -> token
  nlohmann::json raw;

  // The "default" template, or the only one; nullptr if none.
  const std::string* DefaultChatTemplate() const;
};
TokenizerConfig ParseTokenizerConfig(const nlohmann::json& j, std::string_view where);
TokenizerConfig LoadTokenizerConfig(const std::string& path);

// ---- a model directory ----
// config.json is required; the other two are optional (absent -> nullopt).
struct HfModelConfigs {
  nlohmann::json config;
  std::optional<GenerationConfig> generation;
  std::optional<TokenizerConfig> tokenizer;
};
HfModelConfigs LoadHfModelConfigs(const std::string& dir);

}  // namespace pg::io
