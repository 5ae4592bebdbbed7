#include "tokenizer/parsers/json_call_scanner.h"

#include <nlohmann/json.hpp>

namespace pg::parsers {
namespace {
bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// Decodes a complete JSON string literal (with quotes); on malformed input returns the body.
std::string DecodeJsonString(const std::string& literal) {
  try {
    auto j = nlohmann::json::parse(literal);
    if (j.is_string()) return j.get<std::string>();
  } catch (const nlohmann::json::exception&) {
  }
  return literal.size() >= 2 ? literal.substr(1, literal.size() - 2) : literal;
}
}  // namespace

std::string JsonCallScanner::TakeArguments() {
  std::string out;
  out.swap(args_pending_);
  return out;
}

void JsonCallScanner::EndValue() {
  if (value_is_name_ && !value_raw_.empty()) {
    name_ = DecodeJsonString(value_raw_);
    has_name_ = true;
  }
  if (value_is_args_ && args_quoted_) args_pending_ += DecodeJsonString(value_raw_);
  in_value_ = false;
  value_is_args_ = value_is_name_ = args_quoted_ = value_begun_ = false;
  value_raw_.clear();
}

size_t JsonCallScanner::Feed(std::string_view text) {
  size_t i = 0;
  for (; i < text.size() && !done_ && !failed_; ++i) {
    const char c = text[i];
    if (depth_ == 0) {
      if (IsSpace(c)) continue;
      if (c != '{') {
        failed_ = true;
        break;
      }
      raw_ += c;
      depth_ = 1;
      continue;
    }
    // A markup tag at the call object's own level (the model wrote "</tool_call>" without
    // closing the object): the object ends here, and the tag is left for the caller.
    if (depth_ == 1 && !in_string_ && c == '<') {
      if (in_value_) EndValue();
      done_ = true;
      break;
    }
    raw_ += c;
    // Bytes of the arguments value: everything inside it, and primitive bytes at depth 1.
    const bool value_end = depth_ == 1 && !in_string_ && (c == ',' || c == '}');
    if (in_value_ && value_is_args_ && !value_end && !(depth_ == 1 && !in_string_ && IsSpace(c))) {
      if (!value_begun_) {
        value_begun_ = true;
        args_quoted_ = (c == '"');
      }
      if (args_quoted_) {
        value_raw_ += c;
      } else {
        args_pending_ += c;
      }
    }
    if (in_string_) {
      if (escape_) {
        escape_ = false;
      } else if (c == '\\') {
        escape_ = true;
      } else if (c == '"') {
        in_string_ = false;
        if (in_key_) in_key_ = false;
      }
      if (in_key_ && in_string_) key_ += c;
      if (depth_ == 1 && in_value_ && value_is_name_) value_raw_ += c;
      continue;
    }
    switch (c) {
      case '"':
        in_string_ = true;
        if (depth_ == 1 && expecting_key_) {
          in_key_ = true;
          key_.clear();
        } else if (depth_ == 1 && in_value_ && value_is_name_) {
          value_raw_ += c;
        }
        break;
      case ':':
        if (depth_ == 1 && expecting_key_) {
          expecting_key_ = false;
          in_value_ = true;
          value_is_name_ = (key_ == "name");
          value_is_args_ = (key_ == "arguments" || key_ == "parameters");
        }
        break;
      case ',':
        if (depth_ == 1) {
          EndValue();
          expecting_key_ = true;
        }
        break;
      case '{':
      case '[':
        ++depth_;
        break;
      case '}':
      case ']':
        if (--depth_ == 0) {
          if (in_value_) EndValue();
          done_ = true;
        }
        break;
      default:
        break;
    }
  }
  return i;
}

}  // namespace pg::parsers
