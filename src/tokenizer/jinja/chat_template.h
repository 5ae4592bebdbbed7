// Chat-template wrapper: renders a model's Jinja chat template the way Hugging Face
// transformers' apply_chat_template does:
//   template.render(messages=..., tools=..., documents=None, add_generation_prompt=...,
//                   bos_token=..., eos_token=..., **extra_kwargs)
//
// Inputs are nlohmann::ordered_json on purpose: tojson prints keys in insertion order, as
// Python does, so tool schemas reach the prompt in the order the client sent them. Converting
// from nlohmann::json (std::map) first sorts keys alphabetically and changes the prompt.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "tokenizer/jinja/template.h"

namespace pg::jinja {

struct ChatRenderParams {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // [{role, content, ...}]
  nlohmann::ordered_json tools;          // null/absent: no tools (the template sees None)
  bool add_generation_prompt = true;
  nlohmann::ordered_json extra_kwargs = nlohmann::ordered_json::object();  // enable_thinking, ...
};

class ChatTemplate {
 public:
  // Parses `source`; throws TemplateError "chat template syntax error at line L, column C: ...".
  ChatTemplate(std::string_view source, std::string bos_token, std::string eos_token,
               TemplateOptions options = {});

  // Throws TemplateError on render errors; raised_by_template() marks raise_exception().
  std::string Render(const ChatRenderParams& params) const;
  std::string Render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools = nullptr,
                     bool add_generation_prompt = true,
                     const nlohmann::ordered_json& extra_kwargs = nlohmann::ordered_json::object()) const;

  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }

 private:
  Value MakeContext(const ChatRenderParams& params) const;

  Template template_;
  std::string bos_token_;
  std::string eos_token_;
};

}  // namespace pg::jinja
