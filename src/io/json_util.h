// Strict JSON parsing for model files: a syntax error, invalid UTF-8 or a duplicate key (at
// any depth; nlohmann would silently keep the last) throws pg::Error(kMalformed,
// "<name>: ... at byte N").
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace pg::io {

nlohmann::json ParseJsonStrict(std::string_view text, const std::string& name);

// Reads and parses a whole JSON file. kNotFound if absent, kIo if unreadable.
nlohmann::json LoadJsonFile(const std::string& path);

// "object", "array", "string", "integer", "number", "boolean", "null" — for error messages.
std::string_view JsonTypeName(const nlohmann::json& j);

}  // namespace pg::io
