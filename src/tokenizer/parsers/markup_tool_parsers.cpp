// Tool-call parsers whose calls are delimited by special-token markup: DeepSeek-V3 (and V3.1)
// and Kimi-K2. Both have the shape
//   SECTION_BEGIN (CALL_BEGIN header HEADER_END arguments CALL_END)+ SECTION_END
// and differ in the header: DeepSeek-V3 writes "function<sep>NAME\n```json\n" (V3.1 just
// "NAME<sep>"), Kimi-K2 writes "functions.NAME:IDX" (its own call id) before
// <|tool_call_argument_begin|>.
#include "tokenizer/parsers/parser_base.h"

namespace pg::parsers {
namespace detail {
namespace {

bool IsSpaceOrFence(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '`';
}

std::string Trim(std::string_view s) {
  size_t b = SkipSpace(s);
  size_t e = s.size();
  while (e > b && IsSpaceOrFence(s[e - 1]) && s[e - 1] != '`') --e;
  return std::string(s.substr(b, e - b));
}

struct Markup {
  std::string_view section_begin;
  std::string_view section_end;
  std::string_view call_begin;
  std::string_view header_end;
  std::string_view call_end;
  bool deepseek;  // header "function" is followed by NAME\n and an optional ```json fence
};

class MarkupToolParser final : public StreamingToolParser {
 public:
  explicit MarkupToolParser(Markup m) : m_(m) {}

  std::string ForceCall(std::string_view function_name) override {
    std::string prefix = std::string(m_.section_begin) + std::string(m_.call_begin);
    if (m_.deepseek) {
      prefix += "function" + std::string(m_.header_end);
      if (!function_name.empty()) prefix += std::string(function_name) + "\n```json\n";
    } else {
      prefix += "functions.";
      if (!function_name.empty())
        prefix += std::string(function_name) + ":" + std::to_string(num_calls_) +
                  std::string(m_.header_end);
    }
    buf_ += prefix;
    while (Step()) {
    }
    return prefix;
  }

 protected:
  bool Step() override {
    switch (state_) {
      case State::kText: {
        size_t pos = buf_.find(m_.section_begin);
        size_t skip = m_.section_begin.size();
        const size_t call_pos = buf_.find(m_.call_begin);  // a call without its section
        if (call_pos < pos) {
          pos = call_pos;
          skip = 0;
        }
        if (pos != std::string::npos) {
          EmitContent(std::string_view(buf_).substr(0, pos));
          buf_.erase(0, pos + skip);
          state_ = State::kSection;
          return true;
        }
        const size_t hold = finishing_ ? 0
                                       : std::max(PartialMarkerSuffix(buf_, m_.section_begin),
                                                  PartialMarkerSuffix(buf_, m_.call_begin));
        if (buf_.size() == hold) return false;
        EmitContent(std::string_view(buf_).substr(0, buf_.size() - hold));
        buf_.erase(0, buf_.size() - hold);
        return true;
      }
      case State::kSection: {
        const size_t pos = SkipSpace(buf_);
        const std::string_view rest = std::string_view(buf_).substr(pos);
        if (StartsWith(rest, m_.call_begin)) {
          buf_.erase(0, pos + m_.call_begin.size());
          state_ = State::kHeader;
          return true;
        }
        if (StartsWith(rest, m_.section_end)) {
          buf_.erase(0, pos + m_.section_end.size());
          state_ = State::kText;
          return true;
        }
        if (rest.empty() || (!finishing_ && (StartsWith(m_.call_begin, rest) ||
                                             StartsWith(m_.section_end, rest)))) {
          return false;
        }
        state_ = State::kText;  // unexpected text inside the section: treat as content
        return true;
      }
      case State::kHeader: {
        const size_t pos = buf_.find(m_.header_end);
        if (pos == std::string::npos) return false;
        const std::string header = Trim(std::string_view(buf_).substr(0, pos));
        buf_.erase(0, pos + m_.header_end.size());
        if (m_.deepseek && header == "function") {
          state_ = State::kName;
        } else if (m_.deepseek) {
          BeginCall(NewCallId(), header);  // V3.1: NAME<sep>{...}
          StartArgs();
        } else {
          BeginCall(header, KimiName(header));
          StartArgs();
        }
        return true;
      }
      case State::kName: {
        const size_t pos = buf_.find('\n');
        if (pos == std::string::npos) return false;
        BeginCall(NewCallId(), Trim(std::string_view(buf_).substr(0, pos)));
        buf_.erase(0, pos + 1);
        StartArgs();
        return true;
      }
      case State::kFence: {
        const size_t pos = SkipSpace(buf_);
        const std::string_view rest = std::string_view(buf_).substr(pos);
        static constexpr std::string_view kFenceOpen = "```json";
        if (StartsWith(rest, kFenceOpen)) {
          buf_.erase(0, pos + kFenceOpen.size());
          state_ = State::kArgs;
          return true;
        }
        if (!finishing_ && StartsWith(kFenceOpen, rest)) return false;
        buf_.erase(0, pos);
        state_ = State::kArgs;
        return true;
      }
      case State::kArgs: {
        const size_t pos = buf_.find(m_.call_end);
        if (pos != std::string::npos) {
          AppendArguments(TrimTail(std::string_view(buf_).substr(0, pos)));
          buf_.erase(0, pos + m_.call_end.size());
          state_ = State::kSection;
          return true;
        }
        // Hold back a possible start of CALL_END and trailing whitespace / closing fence.
        std::string_view safe = std::string_view(buf_).substr(
            0, buf_.size() - PartialMarkerSuffix(buf_, m_.call_end));
        safe = TrimTail(safe);
        if (safe.empty()) return false;
        AppendArguments(safe);
        buf_.erase(0, safe.size());
        return true;
      }
    }
    return false;
  }

  void FinishState() override {
    if (state_ == State::kArgs) AppendArguments(TrimTail(buf_));
    buf_.clear();
  }

 private:
  enum class State { kText, kSection, kHeader, kName, kFence, kArgs };

  void StartArgs() { state_ = m_.deepseek ? State::kFence : State::kArgs; }

  static std::string_view TrimTail(std::string_view s) {
    size_t e = s.size();
    while (e > 0 && IsSpaceOrFence(s[e - 1])) --e;
    return s.substr(0, e);
  }

  // "functions.get_weather:0" -> "get_weather".
  static std::string KimiName(const std::string& header) {
    std::string name = header;
    const size_t colon = name.rfind(':');
    if (colon != std::string::npos) name.erase(colon);
    static constexpr std::string_view kPrefix = "functions.";
    if (StartsWith(name, kPrefix)) name.erase(0, kPrefix.size());
    return name;
  }

  Markup m_;
  State state_ = State::kText;
};

}  // namespace

std::unique_ptr<ToolCallParser> MakeDeepSeekV3Parser() {
  return std::make_unique<MarkupToolParser>(Markup{
      "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
      "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", true});
}

std::unique_ptr<ToolCallParser> MakeKimiK2Parser() {
  return std::make_unique<MarkupToolParser>(Markup{
      "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
      "<|tool_call_argument_begin|>", "<|tool_call_end|>", false});
}

std::unique_ptr<ToolCallParser> MakeHermesParser();
std::unique_ptr<ToolCallParser> MakeLlama31Parser();

}  // namespace detail

std::unique_ptr<ToolCallParser> MakeToolCallParser(ToolFormat format) {
  switch (format) {
    case ToolFormat::kHermes: return detail::MakeHermesParser();
    case ToolFormat::kLlama31: return detail::MakeLlama31Parser();
    case ToolFormat::kDeepSeekV3: return detail::MakeDeepSeekV3Parser();
    case ToolFormat::kKimiK2: return detail::MakeKimiK2Parser();
    case ToolFormat::kNone: return nullptr;
  }
  return nullptr;
}

}  // namespace pg::parsers
