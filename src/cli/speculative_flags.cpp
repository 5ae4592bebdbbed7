// --speculative-config: vLLM's JSON form of the speculative decoding settings, e.g.
//   --speculative-config '{"method": "ngram", "num_speculative_tokens": 4,
//                          "prompt_lookup_max": 4, "prompt_lookup_min": 2}'
// Only prompt-lookup drafts (method "ngram") exist so far; other methods and unknown keys are
// refused by name rather than ignored.
#include <algorithm>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/status.h"

namespace pg::cli {

scheduler::SpeculativeConfig ParseSpeculativeConfig(const std::string& text) {
  scheduler::SpeculativeConfig c;
  if (text.empty()) return c;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    Throw(ErrorCode::kInvalidArgument, "--speculative-config is not JSON: {}", e.what());
  }
  PG_ENSURE(j.is_object(), kInvalidArgument, "--speculative-config must be a JSON object");
  auto integer = [&](const char* key, int32_t* out) {
    if (!j.contains(key)) return;
    PG_ENSURE(j[key].is_number_integer(), kInvalidArgument,
              "--speculative-config: {} must be an integer", key);
    *out = j[key].get<int32_t>();
  };
  for (const auto& [key, value] : j.items()) {
    PG_ENSURE(key == "method" || key == "num_speculative_tokens" || key == "prompt_lookup_max" ||
                  key == "prompt_lookup_min",
              kInvalidArgument,
              "--speculative-config: unknown key \"{}\" (known: method, num_speculative_tokens, "
              "prompt_lookup_max, prompt_lookup_min)",
              key);
  }
  const std::string method = j.value("method", std::string("ngram"));
  PG_ENSURE(method == "ngram", kUnsupported,
            "--speculative-config: method \"{}\" is not supported; Peregrine drafts with \"ngram\" "
            "(prompt lookup) only so far",
            method);
  PG_ENSURE(j.contains("num_speculative_tokens"), kInvalidArgument,
            "--speculative-config: num_speculative_tokens is required");
  integer("num_speculative_tokens", &c.num_draft_tokens);
  integer("prompt_lookup_min", &c.min_ngram);
  integer("prompt_lookup_max", &c.max_ngram);
  // One bound given: the other's default moves to keep min <= max.
  if (!j.contains("prompt_lookup_max")) c.max_ngram = std::max(c.max_ngram, c.min_ngram);
  if (!j.contains("prompt_lookup_min")) c.min_ngram = std::min(c.min_ngram, c.max_ngram);
  scheduler::ValidateSpeculativeConfig(c);
  PG_ENSURE(c.num_draft_tokens >= 1, kInvalidArgument,
            "--speculative-config: num_speculative_tokens must be >= 1");
  return c;
}

}  // namespace pg::cli
