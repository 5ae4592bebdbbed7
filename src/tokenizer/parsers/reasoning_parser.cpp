#include "tokenizer/parsers/reasoning_parser.h"

#include "tokenizer/parsers/parser_base.h"
#include "tokenizer/parsers/tool_call_parser.h"

namespace pg::parsers {
namespace {
constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";
}  // namespace

ReasoningParser::ReasoningParser(bool starts_in_reasoning)
    : state_(starts_in_reasoning ? State::kReasoning : State::kStart) {}

bool ReasoningParser::Step(ReasoningDelta& out, bool finishing) {
  switch (state_) {
    case State::kStart: {
      const size_t pos = detail::SkipSpace(buf_);
      if (pos == buf_.size() && !finishing) return false;
      const std::string_view rest = std::string_view(buf_).substr(pos);
      if (detail::StartsWith(rest, kOpen)) {
        buf_.erase(0, pos + kOpen.size());
        state_ = State::kReasoning;
        return true;
      }
      if (!finishing && detail::StartsWith(kOpen, rest)) return false;
      state_ = State::kContent;
      return true;
    }
    case State::kReasoning: {
      const size_t pos = buf_.find(kClose);
      if (pos != std::string::npos) {
        out.reasoning.append(buf_, 0, pos);
        buf_.erase(0, pos + kClose.size());
        // The template convention is "</think>\n\n": the blank lines are not content.
        buf_.erase(0, detail::SkipSpace(buf_));
        state_ = State::kContent;
        leading_ = true;
        return true;
      }
      const size_t hold = finishing ? 0 : PartialMarkerSuffix(buf_, kClose);
      if (buf_.size() == hold) return false;
      out.reasoning.append(buf_, 0, buf_.size() - hold);
      buf_.erase(0, buf_.size() - hold);
      return true;
    }
    case State::kContent:
      if (leading_) {
        // Whitespace right after </think> may arrive in later pieces: drop it too.
        buf_.erase(0, detail::SkipSpace(buf_));
        if (buf_.empty()) return false;
        leading_ = false;
      }
      if (buf_.empty()) return false;
      out.content += buf_;
      buf_.clear();
      return true;
  }
  return false;
}

ReasoningDelta ReasoningParser::Feed(std::string_view text) {
  buf_.append(text);
  ReasoningDelta out;
  while (Step(out, false)) {
  }
  return out;
}

ReasoningDelta ReasoningParser::Finish() {
  ReasoningDelta out;
  while (Step(out, true)) {
  }
  return out;
}

}  // namespace pg::parsers
