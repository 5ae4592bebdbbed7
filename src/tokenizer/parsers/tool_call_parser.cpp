#include "tokenizer/parsers/tool_call_parser.h"

#include <random>

#include "core/status.h"
#include "tokenizer/parsers/parser_base.h"

namespace pg::parsers {

ToolFormat ToolFormatFromName(std::string_view name) {
  if (name == "hermes" || name == "qwen") return ToolFormat::kHermes;
  if (name == "llama3" || name == "llama31" || name == "llama3_json") return ToolFormat::kLlama31;
  if (name == "deepseek_v3" || name == "deepseek") return ToolFormat::kDeepSeekV3;
  if (name == "kimi_k2" || name == "kimi") return ToolFormat::kKimiK2;
  if (name == "none" || name.empty()) return ToolFormat::kNone;
  Throw(ErrorCode::kInvalidArgument,
        "unknown tool-call format '{}' (expected hermes, llama3, deepseek_v3, kimi_k2 or none)",
        name);
}

const char* ToolFormatName(ToolFormat format) {
  switch (format) {
    case ToolFormat::kNone: return "none";
    case ToolFormat::kHermes: return "hermes";
    case ToolFormat::kLlama31: return "llama3";
    case ToolFormat::kDeepSeekV3: return "deepseek_v3";
    case ToolFormat::kKimiK2: return "kimi_k2";
  }
  return "?";
}

void ParsedDelta::Append(ParsedDelta&& other) {
  content += other.content;
  for (auto& d : other.tool_calls) {
    if (!tool_calls.empty() && tool_calls.back().index == d.index && d.name.empty() &&
        d.id.empty()) {
      tool_calls.back().arguments += d.arguments;
    } else {
      tool_calls.push_back(std::move(d));
    }
  }
}

void ToolCallAccumulator::Add(const ParsedDelta& delta) {
  content += delta.content;
  for (const auto& d : delta.tool_calls) {
    PG_CHECK(d.index >= 0 && d.index <= static_cast<int>(calls.size()), "call index {} out of order",
             d.index);
    if (d.index == static_cast<int>(calls.size())) calls.push_back({d.id, d.name, ""});
    calls[d.index].arguments += d.arguments;
  }
}

size_t PartialMarkerSuffix(std::string_view text, std::string_view marker) {
  const size_t max_len = std::min(text.size(), marker.size() - 1);
  for (size_t len = max_len; len > 0; --len) {
    if (text.substr(text.size() - len) == marker.substr(0, len)) return len;
  }
  return 0;
}

std::string ToolCallParser::NewCallId() {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlphabet[rng() % (sizeof(kAlphabet) - 1)];
  return id;
}

namespace detail {

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && s.substr(0, prefix.size()) == prefix;
}

size_t SkipSpace(std::string_view s, size_t pos) {
  while (pos < s.size() && (s[pos] == ' ' || s[pos] == '\n' || s[pos] == '\t' || s[pos] == '\r'))
    ++pos;
  return pos;
}

ParsedDelta StreamingToolParser::Feed(std::string_view text) {
  buf_.append(text);
  while (Step()) {
  }
  ParsedDelta out;
  std::swap(out, out_);
  return out;
}

ParsedDelta StreamingToolParser::Finish() {
  finishing_ = true;
  while (Step()) {
  }
  FinishState();
  ParsedDelta out;
  std::swap(out, out_);
  return out;
}

void StreamingToolParser::EmitContent(std::string_view text) { out_.content.append(text); }

void StreamingToolParser::BeginCall(std::string id, std::string name) {
  current_ = num_calls_++;
  out_.tool_calls.push_back({current_, std::move(id), std::move(name), ""});
}

void StreamingToolParser::AppendArguments(std::string_view text) {
  if (text.empty()) return;
  PG_CHECK(current_ >= 0, "arguments before a call was opened");
  if (!out_.tool_calls.empty() && out_.tool_calls.back().index == current_) {
    out_.tool_calls.back().arguments.append(text);
  } else {
    out_.tool_calls.push_back({current_, "", "", std::string(text)});
  }
}

void StreamingToolParser::PumpScanner(JsonCallScanner& scanner, bool& opened) {
  if (!opened && scanner.has_name()) {
    BeginCall(NewCallId(), scanner.name());
    opened = true;
  }
  if (opened) AppendArguments(scanner.TakeArguments());
}

}  // namespace detail
}  // namespace pg::parsers
