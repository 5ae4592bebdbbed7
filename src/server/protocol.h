// OpenAI request parsing/validation and response shapes (chat.completion,
// chat.completion.chunk, text_completion, error objects). Pure functions over JSON: no I/O.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/api.h"

namespace pg::server {

// Ordered: request objects keep their key order (tool JSON schemas reach the chat template as
// the client wrote them, as in HF/vLLM) and responses list keys in OpenAI's order.
using json = nlohmann::ordered_json;

// An error returned to the client as {"error": {"message", "type", "param", "code"}}.
struct ApiError : std::runtime_error {
  ApiError(int status, std::string message, std::string param = {}, std::string code = {});
  int status;         // HTTP status
  std::string type;   // invalid_request_error, authentication_error, ...
  std::string param;  // offending field, may be empty
  std::string code;   // machine-readable code, may be empty
};

json ErrorBody(const ApiError& e);

enum class ToolChoice { kAuto, kNone, kRequired, kNamed };

inline constexpr int kMaxChoices = 16;  // `n`

// Fields shared by /v1/chat/completions and /v1/completions.
struct GenerationOptions {
  std::string model;                 // as sent by the client (may be empty)
  engine::SamplingParams sampling;
  bool max_tokens_given = false;     // false: the server picks max_tokens from the context left
  std::vector<std::string> stop;     // stop strings, matched on detokenized text
  bool stream = false;
  bool include_usage = false;        // stream_options.include_usage
  bool logprobs = false;
  int top_logprobs = 0;              // alternatives per token when logprobs
  std::string session_id;
  bool echo = false;                 // completions only
  int n = 1;                         // choices: n engine requests on one prompt, [1, kMaxChoices]
  // Constrained output (sampled under a mask, then EOS): response_format json_object (JSON
  // mode) or json_schema / vLLM's guided_json (sampling.json_schema holds the compiled schema),
  // vLLM's guided_regex / guided_choice (sampling.regex), or a forced tool call's arguments.
  bool constrained = false;
};

struct ChatRequest {
  GenerationOptions options;
  json messages;                     // normalised: content is a string or null
  json tools;                        // array of {"type":"function","function":{...}} or null
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_choice_name;      // for kNamed
};

struct CompletionRequest {
  GenerationOptions options;
  std::string prompt_text;            // when the prompt is a string
  std::vector<int32_t> prompt_tokens; // when the prompt is an array of token ids
  bool prompt_is_tokens = false;
};

// Throw ApiError(400) on anything malformed: wrong types, out-of-range values, a named
// tool_choice that is not among the tools. Unknown fields are ignored (as OpenAI does).
ChatRequest ParseChatRequest(const json& body);
CompletionRequest ParseCompletionRequest(const json& body, int vocab_size);

// Parses a request body; ApiError(400) for malformed JSON or a non-object.
json ParseBody(const std::string& body);

// usage object: prompt/completion/total tokens and prompt_tokens_details.cached_tokens.
json UsageJson(int prompt_tokens, int completion_tokens, int cached_tokens);

const char* FinishReasonString(engine::FinishReason reason, bool tool_calls);

}  // namespace pg::server
