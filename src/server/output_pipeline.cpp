#include "server/output_pipeline.h"

#include "core/status.h"

namespace pg::server {

StopMatcher::Result StopMatcher::Feed(std::string_view text) {
  Result r;
  if (matched_) return r;
  held_.append(text);
  // The output ends where a stop string first completes (smallest end; on a tie the longer
  // one), whatever the chunking of the text.
  size_t first = std::string::npos, first_end = std::string::npos;
  for (const auto& s : stops_) {
    const size_t pos = held_.find(s);
    if (pos == std::string::npos) continue;
    const size_t end = pos + s.size();
    if (end < first_end || (end == first_end && pos < first)) {
      first = pos;
      first_end = end;
    }
  }
  if (first != std::string::npos) {
    r.text = held_.substr(0, first);
    r.matched = matched_ = true;
    held_.clear();
    return r;
  }
  size_t hold = 0;
  for (const auto& s : stops_) hold = std::max(hold, parsers::PartialMarkerSuffix(held_, s));
  r.text = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return r;
}

std::string StopMatcher::Flush() {
  std::string out;
  if (!matched_) out.swap(held_);
  return out;
}

OutputPipeline::OutputPipeline(const TextModel& text_model, PipelineConfig config)
    : detok_(text_model.NewDetokenizer()),
      stop_(std::move(config.stop)),
      hidden_(config.hidden_token_ids.begin(), config.hidden_token_ids.end()) {
  if (config.parse_reasoning) reasoning_.emplace(config.starts_in_reasoning);
  if (config.tool_format != parsers::ToolFormat::kNone)
    tools_ = parsers::MakeToolCallParser(config.tool_format);
}

std::string OutputPipeline::ForceToolCall(std::string_view function_name) {
  PG_CHECK(tools_ != nullptr, "ForceToolCall without a tool-call format");
  return tools_->ForceCall(function_name);
}

std::string OutputPipeline::ForceToolCallObject() {
  PG_CHECK(tools_ != nullptr && !tools_->call_object_key().empty(), "ForceToolCallObject without a JSON call format");
  return tools_->ForceCallObject();
}

OutputDelta OutputPipeline::Route(std::string_view text, bool last) {
  OutputDelta out;
  std::string content;
  if (reasoning_) {
    parsers::ReasoningDelta r = reasoning_->Feed(text);
    if (last) {
      parsers::ReasoningDelta f = reasoning_->Finish();
      r.reasoning += f.reasoning;
      r.content += f.content;
    }
    out.reasoning = std::move(r.reasoning);
    content = std::move(r.content);
  } else {
    content = std::string(text);
  }
  if (tools_) {
    parsers::ParsedDelta p = tools_->Feed(content);
    if (last) p.Append(tools_->Finish());
    out.content = std::move(p.content);
    out.tool_calls = std::move(p.tool_calls);
  } else {
    out.content = std::move(content);
  }
  return out;
}

OutputDelta OutputPipeline::Push(std::span<const int32_t> tokens, bool& stop_matched) {
  stop_matched = false;
  if (done_) return {};
  std::vector<int32_t> visible;
  visible.reserve(tokens.size());
  for (int32_t t : tokens)
    if (!hidden_.count(t)) visible.push_back(t);
  std::string text = detok_->Push(visible);
  StopMatcher::Result r = stop_.Feed(text);
  if (r.matched) {
    stop_matched = true;
    done_ = true;
    return Route(r.text, /*last=*/true);
  }
  return Route(r.text, /*last=*/false);
}

OutputDelta OutputPipeline::Finish() {
  if (done_) return {};
  done_ = true;
  StopMatcher::Result r = stop_.Feed(detok_->Flush());
  if (!r.matched) r.text += stop_.Flush();
  return Route(r.text, /*last=*/true);
}

}  // namespace pg::server
