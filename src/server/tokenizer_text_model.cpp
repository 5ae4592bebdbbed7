#include "server/tokenizer_text_model.h"

#include "core/status.h"
#include "engine/json_mode.h"

namespace pg::server {
namespace {

class StreamDetokenizer : public IncrementalDetokenizer {
 public:
  explicit StreamDetokenizer(const tokenizer::Tokenizer& t) : decoder_(t, /*skip_special=*/false) {}
  std::string Push(std::span<const int32_t> tokens) override {
    std::string out;
    for (int32_t t : tokens) out += decoder_.Push(t);
    return out;
  }
  std::string Flush() override { return decoder_.Flush(); }

 private:
  tokenizer::StreamDecoder decoder_;
};

}  // namespace

nlohmann::ordered_json MessagesForTemplate(const nlohmann::ordered_json& messages) {
  nlohmann::ordered_json out = nlohmann::ordered_json(messages);
  for (auto& m : out) {
    if (!m.is_object()) continue;
    // An assistant turn that only calls tools has content null in OpenAI's API; published
    // templates (Qwen3's `'</think>' in message.content`, ...) expect a string there.
    if (m.value("role", "") == "assistant" && m.contains("content") && m["content"].is_null())
      m["content"] = "";
    if (!m.contains("tool_calls")) continue;
    for (auto& call : m["tool_calls"]) {
      auto& args = call["function"]["arguments"];
      if (!args.is_string()) continue;
      try {
        auto parsed = nlohmann::ordered_json::parse(args.get<std::string>());
        if (parsed.is_object()) args = std::move(parsed);
      } catch (const nlohmann::json::exception&) {
        // not JSON: the template gets the string as is
      }
    }
  }
  return out;
}

parsers::ToolFormat DetectToolFormat(std::string_view src) {
  auto has = [&](std::string_view s) { return src.find(s) != std::string_view::npos; };
  if (has("<|tool_calls_section_begin|>")) return parsers::ToolFormat::kKimiK2;
  if (has("<｜tool▁calls▁begin｜>")) return parsers::ToolFormat::kDeepSeekV3;
  if (has("<tool_call>")) return parsers::ToolFormat::kHermes;
  if (has("<|python_tag|>") || (has("<|eot_id|>") && has("\"parameters\""))) return parsers::ToolFormat::kLlama31;
  return parsers::ToolFormat::kNone;
}

TokenizerTextModel::TokenizerTextModel(const tokenizer::Tokenizer& tokenizer,
                                       const jinja::ChatTemplate* chat_template,
                                       std::string_view template_source, TokenizerTextModelOptions options)
    : tokenizer_(tokenizer), template_(chat_template), options_(std::move(options)) {
  features_.tool_format = options_.tool_format.value_or(DetectToolFormat(template_source));
  features_.think_tags = template_source.find("<think>") != std::string_view::npos ||
                         template_source.find("</think>") != std::string_view::npos;
  if (features_.think_tags && template_ != nullptr) {
    // Does the generation prompt itself open the think block (Qwen3 / DeepSeek-R1 style)?
    try {
      nlohmann::json probe = nlohmann::json::array({{{"role", "user"}, {"content", "x"}}});
      std::string p = RenderChat(probe, nullptr);
      while (!p.empty() && (p.back() == '\n' || p.back() == ' ')) p.pop_back();
      features_.prompt_opens_think = p.size() >= 7 && p.compare(p.size() - 7, 7, "<think>") == 0;
    } catch (const pg::Error&) {
    }
  }
}

std::vector<int32_t> TokenizerTextModel::Encode(std::string_view text, bool add_bos, bool parse_special) const {
  std::vector<int32_t> ids = tokenizer_.Encode(text, tokenizer::EncodeOptions{add_bos, parse_special});
  // A template that renders bos_token itself plus the tokenizer's own BOS: keep one.
  const auto bos = tokenizer_.bos_id();
  if (add_bos && bos && ids.size() >= 2 && ids[0] == *bos && ids[1] == *bos) ids.erase(ids.begin());
  return ids;
}

std::string TokenizerTextModel::Decode(std::span<const int32_t> tokens) const {
  return tokenizer_.Decode(tokens, /*skip_special=*/false);
}

std::unique_ptr<IncrementalDetokenizer> TokenizerTextModel::NewDetokenizer() const {
  return std::make_unique<StreamDetokenizer>(tokenizer_);
}

std::shared_ptr<const runtime::TokenTable> TokenizerTextModel::token_table(std::span<const int32_t> eos_ids) const {
  std::call_once(table_once_, [&] { table_ = engine::MakeTokenTable(tokenizer_, eos_ids); });
  return table_;
}

std::string TokenizerTextModel::RenderChat(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools) const {
  PG_ENSURE(template_ != nullptr, kUnsupported,
            "this model has no chat template: use /v1/completions with a raw prompt");
  return template_->Render(MessagesForTemplate(messages), nlohmann::ordered_json(tools),
                           /*add_generation_prompt=*/true, options_.template_kwargs);
}

}  // namespace pg::server
