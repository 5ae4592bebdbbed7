// What the server needs from the tokenizer and the chat template, as one interface, so the
// HTTP/protocol layer is independent of how text is tokenized (the real implementation adapts
// pg::tokenizer::Tokenizer + ChatTemplate; protocol tests use a small deterministic one).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/json_constraint.h"
#include "tokenizer/parsers/tool_call_parser.h"

namespace pg::server {

// Turns generated tokens into text incrementally; a token that ends inside a UTF-8 sequence
// yields nothing until the sequence completes.
class IncrementalDetokenizer {
 public:
  virtual ~IncrementalDetokenizer() = default;
  virtual std::string Push(std::span<const int32_t> tokens) = 0;
  virtual std::string Flush() = 0;  // end of output: whatever is still held
};

struct ChatFeatures {
  parsers::ToolFormat tool_format = parsers::ToolFormat::kNone;
  bool think_tags = false;          // the model may emit <think>...</think>
  bool prompt_opens_think = false;  // the generation prompt ends inside <think>
};

class TextModel {
 public:
  virtual ~TextModel() = default;
  // Plain text to tokens. Special-token text in `text` is tokenized as special tokens only
  // when parse_special is true (rendered chat prompts); a BOS is added when the model wants one
  // and add_bos is true.
  virtual std::vector<int32_t> Encode(std::string_view text, bool add_bos, bool parse_special) const = 0;
  // Tokens to text; special tokens are rendered as their text.
  virtual std::string Decode(std::span<const int32_t> tokens) const = 0;
  virtual std::unique_ptr<IncrementalDetokenizer> NewDetokenizer() const = 0;
  // Renders OpenAI-shaped messages (content normalised to a string or null; assistant
  // tool_calls with string arguments) and tool definitions (array or null) into the prompt
  // text, ending with the assistant generation prompt.
  virtual std::string RenderChat(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools) const = 0;
  virtual ChatFeatures chat_features() const = 0;
  // Every token's raw bytes, for JSON mode's mask; null: no JSON mode. Built on the first call
  // (with that call's eos_ids, the engine's, joined with the tokenizer's) and shared after it.
  virtual std::shared_ptr<const runtime::TokenTable> token_table(std::span<const int32_t> eos_ids) const {
    (void)eos_ids;
    return nullptr;
  }
};

}  // namespace pg::server
