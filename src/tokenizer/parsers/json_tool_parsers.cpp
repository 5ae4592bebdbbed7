// Tool-call parsers whose calls are JSON objects: Hermes/Qwen (<tool_call> blocks) and
// Llama 3.1 (bare JSON, optionally after <|python_tag|>).
#include <nlohmann/json.hpp>

#include "tokenizer/parsers/parser_base.h"

namespace pg::parsers {
namespace detail {
namespace {

std::string JsonQuote(std::string_view s) { return nlohmann::json(std::string(s)).dump(); }

bool AllSpace(std::string_view s) { return SkipSpace(s) == s.size(); }

// <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>, possibly several, possibly
// after some plain text. Whitespace between and after calls is not reported as content.
class HermesParser final : public StreamingToolParser {
 public:
  std::string_view call_object_key() const override { return "arguments"; }
  std::string ForceCallObject() override {
    std::string prefix = std::string(kOpen) + "\n";
    buf_ += prefix;
    while (Step()) {
    }
    return prefix;
  }
  std::string ForceCall(std::string_view function_name) override {
    std::string prefix = std::string(kOpen) + "\n{\"name\": ";
    if (!function_name.empty()) {
      prefix += JsonQuote(function_name) + ", \"arguments\": ";
    } else {
      prefix += "\"";
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
        const size_t pos = buf_.find(kOpen);
        if (pos != std::string::npos) {
          EmitText(std::string_view(buf_).substr(0, pos));
          buf_.erase(0, pos + kOpen.size());
          state_ = State::kCall;
          scanner_ = JsonCallScanner{};
          opened_ = false;
          return true;
        }
        const size_t hold = finishing_ ? 0 : PartialMarkerSuffix(buf_, kOpen);
        if (buf_.size() == hold) return false;
        EmitText(std::string_view(buf_).substr(0, buf_.size() - hold));
        buf_.erase(0, buf_.size() - hold);
        return true;
      }
      case State::kCall: {
        if (buf_.empty()) return false;
        const size_t n = scanner_.Feed(buf_);
        buf_.erase(0, n);
        PumpScanner(scanner_, opened_);
        if (scanner_.done() || scanner_.failed()) {
          state_ = State::kAfterCall;
          return true;
        }
        return n > 0;
      }
      case State::kAfterCall: {
        // Anything between the JSON object and </tool_call> is markup noise.
        const size_t pos = buf_.find(kClose);
        if (pos != std::string::npos) {
          buf_.erase(0, pos + kClose.size());
          state_ = State::kText;
          return true;
        }
        const size_t hold = PartialMarkerSuffix(buf_, kClose);
        if (buf_.size() == hold) return false;
        buf_.erase(0, buf_.size() - hold);
        return true;
      }
    }
    return false;
  }

  void FinishState() override {}

 private:
  enum class State { kText, kCall, kAfterCall };
  static constexpr std::string_view kOpen = "<tool_call>";
  static constexpr std::string_view kClose = "</tool_call>";

  void EmitText(std::string_view text) {
    if (num_calls_ == 0) {
      EmitContent(text);
      return;
    }
    pending_space_.append(text);
    if (!AllSpace(pending_space_)) {
      EmitContent(pending_space_);
      pending_space_.clear();
    }
  }

  State state_ = State::kText;
  JsonCallScanner scanner_;
  bool opened_ = false;
  std::string pending_space_;  // whitespace after a call, dropped unless text follows
};

// Llama 3.1 / 3.2 custom-tool calls: the whole reply is {"name": f, "parameters": {...}}
// (several separated by ';' are accepted), optionally preceded by <|python_tag|>. A reply that
// does not start with '{' or the tag is plain content; a JSON object without "name" is content.
class Llama31Parser final : public StreamingToolParser {
 public:
  std::string_view call_object_key() const override { return "parameters"; }
  std::string ForceCallObject() override { return ""; }  // the reply is the object
  std::string ForceCall(std::string_view function_name) override {
    std::string prefix = "{\"name\": ";
    if (!function_name.empty()) {
      prefix += JsonQuote(function_name) + ", \"parameters\": ";
    } else {
      prefix += "\"";
    }
    buf_ += prefix;
    while (Step()) {
    }
    return prefix;
  }

 protected:
  bool Step() override {
    switch (state_) {
      case State::kStart: {
        const size_t pos = SkipSpace(buf_);
        if (pos == buf_.size()) return false;
        const std::string_view rest = std::string_view(buf_).substr(pos);
        if (StartsWith(rest, kPythonTag)) {
          buf_.erase(0, pos + kPythonTag.size());
          state_ = State::kBetween;
          return true;
        }
        if (!finishing_ && StartsWith(kPythonTag, rest)) return false;  // maybe the tag
        state_ = rest[0] == '{' ? State::kBetween : State::kContent;
        return true;
      }
      case State::kBetween: {
        size_t pos = 0;
        while (pos < buf_.size() && (buf_[pos] == ';' || SkipSpace(buf_, pos) != pos))
          pos = buf_[pos] == ';' ? pos + 1 : SkipSpace(buf_, pos);
        if (pos == buf_.size()) {
          between_space_ += buf_;
          buf_.clear();
          return false;
        }
        between_space_.clear();
        if (buf_[pos] == '{') {
          buf_.erase(0, pos);
          scanner_ = JsonCallScanner{};
          opened_ = false;
          state_ = State::kJson;
        } else {
          state_ = State::kContent;
        }
        return true;
      }
      case State::kJson: {
        if (buf_.empty()) return false;
        const size_t n = scanner_.Feed(buf_);
        buf_.erase(0, n);
        PumpScanner(scanner_, opened_);
        if (scanner_.done()) {
          if (!opened_) EmitContent(scanner_.raw());
          state_ = State::kBetween;
          return true;
        }
        return n > 0;
      }
      case State::kContent:
        if (buf_.empty()) return false;
        EmitContent(buf_);
        buf_.clear();
        return true;
    }
    return false;
  }

  void FinishState() override {
    if (state_ == State::kJson && !opened_) EmitContent(scanner_.raw());
    if (!buf_.empty()) EmitContent(buf_);
    buf_.clear();
  }

 private:
  enum class State { kStart, kBetween, kJson, kContent };
  static constexpr std::string_view kPythonTag = "<|python_tag|>";

  State state_ = State::kStart;
  JsonCallScanner scanner_;
  bool opened_ = false;
  std::string between_space_;
};

}  // namespace

std::unique_ptr<ToolCallParser> MakeHermesParser() { return std::make_unique<HermesParser>(); }
std::unique_ptr<ToolCallParser> MakeLlama31Parser() { return std::make_unique<Llama31Parser>(); }

}  // namespace detail
}  // namespace pg::parsers
