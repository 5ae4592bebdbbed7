// TextModel over the real tokenizer (pg::tokenizer::Tokenizer) and chat template
// (pg::jinja::ChatTemplate). The tool-call format and <think> behaviour are detected from
// the chat template source unless given.
#pragma once

#include <mutex>
#include <optional>

#include "server/text_model.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace pg::server {

struct TokenizerTextModelOptions {
  std::optional<parsers::ToolFormat> tool_format;  // unset: detect from the template
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();  // enable_thinking, ...
};

// OpenAI messages -> what HF chat templates expect: tool-call arguments given as a JSON string
// become the object they encode (templates render them with `tojson`); others pass unchanged.
nlohmann::ordered_json MessagesForTemplate(const nlohmann::ordered_json& messages);

// Detects the tool-call markup family a chat template renders (kNone when it has none).
parsers::ToolFormat DetectToolFormat(std::string_view template_source);

class TokenizerTextModel : public TextModel {
 public:
  // Both must outlive this object; chat_template may be null (chat requests then fail with
  // a clear error; completions still work).
  TokenizerTextModel(const tokenizer::Tokenizer& tokenizer, const jinja::ChatTemplate* chat_template,
                     std::string_view template_source, TokenizerTextModelOptions options = {});

  std::vector<int32_t> Encode(std::string_view text, bool add_bos, bool parse_special) const override;
  std::string Decode(std::span<const int32_t> tokens) const override;
  std::unique_ptr<IncrementalDetokenizer> NewDetokenizer() const override;
  std::string RenderChat(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools) const override;
  ChatFeatures chat_features() const override { return features_; }
  std::shared_ptr<const runtime::TokenTable> token_table(std::span<const int32_t> eos_ids) const override;

 private:
  const tokenizer::Tokenizer& tokenizer_;
  const jinja::ChatTemplate* template_;
  TokenizerTextModelOptions options_;
  ChatFeatures features_;
  mutable std::once_flag table_once_;
  mutable std::shared_ptr<const runtime::TokenTable> table_;  // built on first use
};

}  // namespace pg::server
