#include "io/json_util.h"

#include <set>
#include <vector>

#include "core/status.h"
#include "io/mapped_file.h"

namespace pg::io {

using nlohmann::json;

nlohmann::json ParseJsonStrict(std::string_view text, const std::string& name) {
  // One key set per open object; a key seen twice in the same object is an error.
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  auto cb = [&](int /*depth*/, json::parse_event_t ev, json& parsed) {
    switch (ev) {
      case json::parse_event_t::object_start: open_objects.emplace_back(); break;
      case json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case json::parse_event_t::key:
        if (!open_objects.empty() && !open_objects.back().insert(parsed.get<std::string>()).second &&
            duplicate.empty())
          duplicate = parsed.get<std::string>();
        break;
      default: break;
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text.begin(), text.end(), cb);
  } catch (const json::parse_error& e) {
    // e.what() carries line/column and the lexer's reason.
    Throw(ErrorCode::kMalformed, "{}: invalid JSON at byte {}: {}", name, e.byte, e.what());
  } catch (const json::exception& e) {
    // Not only parse_error: a number too large for a double throws out_of_range (406).
    Throw(ErrorCode::kMalformed, "{}: invalid JSON: {}", name, e.what());
  }
  if (!duplicate.empty())
    Throw(ErrorCode::kMalformed, "{}: duplicate JSON key '{}'", name, duplicate);
  return j;
}

nlohmann::json LoadJsonFile(const std::string& path) {
  MappedFile f(path);
  std::string_view text(reinterpret_cast<const char*>(f.data()), f.size());
  return ParseJsonStrict(text, path);
}

std::string_view JsonTypeName(const nlohmann::json& j) {
  switch (j.type()) {
    case json::value_t::object: return "object";
    case json::value_t::array: return "array";
    case json::value_t::string: return "string";
    case json::value_t::boolean: return "boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "integer";
    case json::value_t::number_float: return "number";
    case json::value_t::null: return "null";
    default: return "value";
  }
}

}  // namespace pg::io
