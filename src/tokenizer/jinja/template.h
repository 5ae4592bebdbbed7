// A parsed Jinja template (the subset real Hugging Face chat templates use) and its renderer.
//
//   pg::jinja::Template t(source);                       // throws TemplateError on bad syntax
//   std::string out = t.Render(context_json);            // context: a JSON object of variables
//
// Semantics follow jinja2 as Hugging Face transformers configures it: trim_blocks and
// lstrip_blocks on, loop controls (break/continue) on, no autoescape, the immutable sandbox
// (list.append / dict.update and other mutating methods raise), HF's tojson (json.dumps with
// ensure_ascii=False, no HTML escaping), raise_exception(msg) and strftime_now(fmt) globals,
// and jinja2's default Undefined (prints as "", is false, iterates as empty; an attribute or
// item of it raises).
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/value.h"

namespace pg::jinja {

// Every error a template can cause: syntax errors (with line and column), runtime errors (with
// the line and column of the expression), and raise_exception() from the template itself,
// whose message is exactly the template's message (raised_by_template() is true).
class TemplateError : public Error {
 public:
  TemplateError(const std::string& message, bool raised_by_template)
      : Error(ErrorCode::kInvalidArgument, message), raised_by_template_(raised_by_template) {}
  bool raised_by_template() const { return raised_by_template_; }

 private:
  bool raised_by_template_;
};

struct TemplateOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  // false: HF's ImmutableSandboxedEnvironment (append/pop/update/... raise). true: allow them,
  // as llama.cpp's minja does, for templates that mutate lists in a namespace.
  bool allow_mutation = false;
  // Time strftime_now() formats (local broken-down time); unset: the current local time.
  std::optional<std::tm> now;
};

class Template {
 public:
  explicit Template(std::string_view source, TemplateOptions options = {});
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // `context` must be an object (dict); its keys become template variables. Const and
  // thread-safe: each call evaluates in its own interpreter over the shared, immutable tree.
  std::string Render(const Value& context) const;
  std::string Render(const nlohmann::ordered_json& context) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pg::jinja
