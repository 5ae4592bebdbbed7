// Streaming split of model output into reasoning_content and content for <think> models
// (DeepSeek-R1, Qwen3, Kimi-K2-Thinking): text between <think> and </think> is reasoning.
// When the prompt already ends inside the think block (the chat template opened <think>),
// construct with starts_in_reasoning = true: everything up to </think> is reasoning.
// A <think> is recognised only at the start of the output (after whitespace); the markers are
// never reported. Text that might be a partial marker is held back until resolved.
#pragma once

#include <string>
#include <string_view>

namespace pg::parsers {

struct ReasoningDelta {
  std::string reasoning;
  std::string content;
};

class ReasoningParser {
 public:
  explicit ReasoningParser(bool starts_in_reasoning = false);
  ReasoningDelta Feed(std::string_view text);
  ReasoningDelta Finish();  // releases held-back text (an unclosed think block stays reasoning)
  bool in_reasoning() const { return state_ == State::kReasoning; }

 private:
  enum class State { kStart, kReasoning, kContent };
  bool Step(ReasoningDelta& out, bool finishing);

  State state_;
  bool leading_ = false;  // just after </think>: leading whitespace is dropped
  std::string buf_;
};

}  // namespace pg::parsers
