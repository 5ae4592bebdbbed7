// Streaming parsers that turn model output text into OpenAI tool calls.
//
// One parser per markup family (the text a model emits when it calls a tool):
//   kHermes     Hermes / Qwen2.5 / Qwen3:  <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>
//   kLlama31    Llama 3.1/3.2 JSON:        {"name": N, "parameters": {...}}  or  <|python_tag|>{...}
//   kDeepSeekV3 DeepSeek-V3 (and V3.1, which drops the "function" type and the ```json fence):
//               <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N\n```json\n{...}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>
//   kKimiK2     Kimi-K2:  <|tool_calls_section_begin|><|tool_call_begin|>functions.N:0
//               <|tool_call_argument_begin|>{...}<|tool_call_end|><|tool_calls_section_end|>
//
// Contract of Feed(): text is pushed in arbitrary pieces (token by token, byte splits included
// at marker boundaries); each call returns only what is now certain. Text that might be the
// start of a marker is held back until it is resolved. For every tool call the first delta
// carries index, id and name; later deltas append to `arguments`. The concatenation of all
// argument deltas of a call is the call's argument text (a JSON object as the model wrote it).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace pg::parsers {

enum class ToolFormat { kNone, kHermes, kLlama31, kDeepSeekV3, kKimiK2 };

// "hermes" (also "qwen"), "llama3" (also "llama31", "llama3_json"), "deepseek_v3", "kimi_k2",
// "none". Throws pg::Error(kInvalidArgument) for anything else.
ToolFormat ToolFormatFromName(std::string_view name);
const char* ToolFormatName(ToolFormat format);

struct ToolCallDelta {
  int index = 0;          // 0-based position of the call in this response
  std::string id;         // set on the first delta of a call only
  std::string name;       // set on the first delta of a call only
  std::string arguments;  // appended argument text (may be empty on the first delta)
};

struct ParsedDelta {
  std::string content;                  // plain assistant text
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return content.empty() && tool_calls.empty(); }
  void Append(ParsedDelta&& other);     // merges, joining deltas of the same call index
};

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;
};

class ToolCallParser {
 public:
  virtual ~ToolCallParser() = default;
  virtual ParsedDelta Feed(std::string_view text) = 0;
  // End of output: releases held-back text. A call cut off mid-arguments (length limit) is
  // still reported with the arguments received so far.
  virtual ParsedDelta Finish() = 0;
  // Prompt text that forces the model into a tool call (tool_choice "required" when
  // function_name is empty, or a named function). The parser moves to the state that follows
  // this text, so the forced markup is not reported as content. Call before the first Feed().
  virtual std::string ForceCall(std::string_view function_name) = 0;
  // Formats that write a call as one JSON object {"name": N, <key>: {...}} (Hermes "arguments",
  // Llama 3.1 "parameters") return the key, the others "" (their name sits outside the JSON).
  // Where there is a key, ForceCallObject() is the prompt text before such an object (the
  // parser moves past it, as ForceCall does), so that the object can be generated under a
  // schema (tool_choice "required").
  virtual std::string_view call_object_key() const { return {}; }
  virtual std::string ForceCallObject() { return {}; }
  int num_calls() const { return num_calls_; }

 protected:
  std::string NewCallId();  // "call_" + 24 random alphanumerics
  int num_calls_ = 0;
};

std::unique_ptr<ToolCallParser> MakeToolCallParser(ToolFormat format);

// Folds a stream of deltas into complete calls (for non-streaming responses).
struct ToolCallAccumulator {
  std::string content;
  std::vector<ToolCall> calls;
  void Add(const ParsedDelta& delta);
};

// Length of the longest suffix of `text` that is a proper prefix of `marker` (0 when none):
// the bytes a streaming parser must hold back before it can tell text from markup.
size_t PartialMarkerSuffix(std::string_view text, std::string_view marker);

}  // namespace pg::parsers
