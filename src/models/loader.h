// Finding a model on disk. "embedded" (or empty) names the embedded default model,
// SmolLM2-135M-Instruct Q4_1, fetched into <source>/models/ by scripts/lib/setup.sh.
#pragma once

#include <string>
#include <string_view>

namespace pg::models {

std::string EmbeddedModelPath();
// "embedded"/"" -> EmbeddedModelPath(); anything else unchanged. Throws kNotFound with a hint
// when the path does not exist.
std::string ResolveModelPath(std::string_view model);

}  // namespace pg::models
