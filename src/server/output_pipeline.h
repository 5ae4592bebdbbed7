// Per-request output path: generated tokens -> text (incremental detokenizer) -> stop strings
// -> <think> split -> tool-call parser. Everything a client sees of the generated text passes
// through here, in order; the pipeline never blocks and holds back only text that may still
// turn out to be a stop string or a marker.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "server/text_model.h"
#include "tokenizer/parsers/reasoning_parser.h"
#include "tokenizer/parsers/tool_call_parser.h"

namespace pg::server {

// Stop strings matched on detokenized text. The output ends at the start of the stop string
// that completes first (independent of how the text is chunked). Invariant: text returned by
// Feed never contains a stop string nor a prefix of one that could still complete; after a
// match nothing more is returned.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  struct Result {
    std::string text;      // safe to emit
    bool matched = false;  // a stop string matched (text ends right before it)
  };
  Result Feed(std::string_view text);
  std::string Flush();  // end of output: held text is not a stop string after all
  bool matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool matched_ = false;
};

struct OutputDelta {
  std::string reasoning;
  std::string content;
  std::vector<parsers::ToolCallDelta> tool_calls;
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

struct PipelineConfig {
  std::vector<std::string> stop;
  std::vector<int32_t> hidden_token_ids;  // EOS / stop tokens: never rendered as text
  bool parse_reasoning = false;
  bool starts_in_reasoning = false;
  parsers::ToolFormat tool_format = parsers::ToolFormat::kNone;  // kNone: no tool parsing
};

class OutputPipeline {
 public:
  OutputPipeline(const TextModel& text_model, PipelineConfig config);
  // Forces a tool call (tool_choice required/named); returns the text to append to the
  // prompt. Only valid with a tool format.
  std::string ForceToolCall(std::string_view function_name);
  // The same for a call generated as a whole JSON object (parsers::ToolCallParser::
  // ForceCallObject): the text before the object.
  std::string ForceToolCallObject();
  // One engine event's tokens. Sets stop_matched when a stop string ended the output: the
  // caller aborts the request; the returned delta is then final.
  OutputDelta Push(std::span<const int32_t> tokens, bool& stop_matched);
  OutputDelta Finish();  // end of output (engine finished)
  bool saw_tool_calls() const { return tools_ && tools_->num_calls() > 0; }

 private:
  OutputDelta Route(std::string_view text, bool last);

  std::unique_ptr<IncrementalDetokenizer> detok_;
  StopMatcher stop_;
  std::unordered_set<int32_t> hidden_;
  std::optional<parsers::ReasoningParser> reasoning_;
  std::unique_ptr<parsers::ToolCallParser> tools_;
  bool done_ = false;
};

}  // namespace pg::server
