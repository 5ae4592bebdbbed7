#include "tokenizer/jinja/chat_template.h"

namespace pg::jinja {

ChatTemplate::ChatTemplate(std::string_view source, std::string bos_token, std::string eos_token,
                           TemplateOptions options)
    : template_(source, std::move(options)), bos_token_(std::move(bos_token)), eos_token_(std::move(eos_token)) {}

std::string ChatTemplate::Render(const ChatRenderParams& params) const {
  if (!params.messages.is_array()) throw TemplateError("chat template: messages must be a JSON array", false);
  if (!params.extra_kwargs.is_null() && !params.extra_kwargs.is_object()) {
    throw TemplateError("chat template: extra kwargs must be a JSON object", false);
  }
  // Same keyword order as transformers; extra kwargs may override the defaults.
  try {
    return template_.Render(MakeContext(params));
  } catch (const TemplateError&) {
    throw;
  } catch (const Error& e) {
    throw TemplateError(e.what(), false);
  }
}

Value ChatTemplate::MakeContext(const ChatRenderParams& params) const {
  Dict ctx;
  ctx.Set(Value("messages"), Value::FromJson(params.messages));
  ctx.Set(Value("tools"), params.tools.is_null() ? Value::None() : Value::FromJson(params.tools));
  ctx.Set(Value("documents"), Value::None());
  ctx.Set(Value("add_generation_prompt"), Value(params.add_generation_prompt));
  ctx.Set(Value("bos_token"), Value(bos_token_));
  ctx.Set(Value("eos_token"), Value(eos_token_));
  if (params.extra_kwargs.is_object()) {
    for (auto it = params.extra_kwargs.begin(); it != params.extra_kwargs.end(); ++it) {
      ctx.Set(Value(it.key()), Value::FromJson(it.value()));
    }
  }
  return Value::MakeDict(std::move(ctx));
}

std::string ChatTemplate::Render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                 bool add_generation_prompt, const nlohmann::ordered_json& extra_kwargs) const {
  ChatRenderParams p;
  p.messages = messages;
  p.tools = tools;
  p.add_generation_prompt = add_generation_prompt;
  p.extra_kwargs = extra_kwargs;
  return Render(p);
}

}  // namespace pg::jinja
