#include "server/protocol.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "core/status.h"
#include "runtime/json_schema.h"
#include "runtime/grammar.h"
#include "runtime/regex.h"

namespace pg::server {
namespace {

constexpr size_t kMaxStopStrings = 16;
constexpr int kMaxTopLogprobs = 20;

const char* ErrorType(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 413: return "invalid_request_error";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

[[noreturn]] void Bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, param);
}

const char* TypeName(const json& v) { return v.type_name(); }

// Optional number field in [lo, hi]; absent or null keeps `out`.
void GetNumber(const json& body, const char* key, double lo, double hi, float& out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return;
  if (!it->is_number()) Bad(key, fmt::format("'{}' must be a number, got {}", key, TypeName(*it)));
  const double v = it->get<double>();
  if (!(v >= lo && v <= hi) || !std::isfinite(v))
    Bad(key, fmt::format("'{}' must be in [{}, {}], got {}", key, lo, hi, v));
  out = static_cast<float>(v);
}

// Optional integer field in [lo, hi]; returns false when absent or null.
bool GetInt(const json& body, const char* key, int64_t lo, int64_t hi, int64_t& out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return false;
  if (!it->is_number_integer() && !(it->is_number_float() && it->get<double>() == std::floor(it->get<double>())))
    Bad(key, fmt::format("'{}' must be an integer, got {}", key, TypeName(*it)));
  const double d = it->get<double>();
  if (d < static_cast<double>(lo) || d > static_cast<double>(hi))
    Bad(key, fmt::format("'{}' must be in [{}, {}], got {}", key, lo, hi, it->dump()));
  out = it->is_number_unsigned() ? static_cast<int64_t>(it->get<uint64_t>()) : it->get<int64_t>();
  return true;
}

bool GetBool(const json& body, const char* key, bool def) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return def;
  if (!it->is_boolean()) Bad(key, fmt::format("'{}' must be a boolean, got {}", key, TypeName(*it)));
  return it->get<bool>();
}

std::string GetString(const json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return {};
  if (!it->is_string()) Bad(key, fmt::format("'{}' must be a string, got {}", key, TypeName(*it)));
  return it->get<std::string>();
}

// logit_bias: {"<token id>": bias, ...}, bias in [-100, 100] (OpenAI). Ids are checked against
// the vocabulary by the engine; two keys naming one id ("7", "07") are an error.
void ParseLogitBias(const json& v, std::vector<std::pair<int32_t, float>>& out) {
  if (!v.is_object()) Bad("logit_bias", "'logit_bias' must be an object mapping token ids to biases");
  for (const auto& [key, bias] : v.items()) {
    int64_t id = -1;
    const char* end = key.data() + key.size();
    auto [ptr, ec] = std::from_chars(key.data(), end, id);
    if (key.empty() || ec != std::errc() || ptr != end || id < 0 || id > std::numeric_limits<int32_t>::max())
      Bad("logit_bias", fmt::format("logit_bias key '{}' is not a token id (a non-negative integer)", key));
    if (!bias.is_number())
      Bad("logit_bias", fmt::format("logit_bias['{}'] must be a number, got {}", key, TypeName(bias)));
    const double b = bias.get<double>();
    if (!(b >= -100.0 && b <= 100.0))
      Bad("logit_bias", fmt::format("logit_bias['{}'] must be in [-100, 100], got {}", key, b));
    out.emplace_back(int32_t(id), float(b));
  }
  std::sort(out.begin(), out.end());
  for (size_t i = 1; i < out.size(); ++i)
    if (out[i].first == out[i - 1].first)
      Bad("logit_bias", fmt::format("logit_bias names token id {} twice", out[i].first));
}

// A schema from response_format.json_schema.schema, guided_json or structured_outputs.json
// (an object, or a JSON string of one), compiled; a schema that cannot be enforced is a 400
// naming `param`.
std::shared_ptr<const runtime::JsonSchema> ParseSchema(const json& v, const std::string& param) {
  json schema = v;
  if (v.is_string()) {
    schema = json::parse(v.get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (schema.is_discarded()) Bad(param, fmt::format("'{}' is a string but not valid JSON", param));
  }
  if (!schema.is_object() && !schema.is_boolean()) Bad(param, fmt::format("'{}' must be a JSON schema object", param));
  try {
    return runtime::JsonSchema::Compile(schema);
  } catch (const pg::Error& e) {
    Bad(param, e.what());
  }
}

// A guided_regex / structured_outputs.regex (full match) or guided_choice /
// structured_outputs.choice (exactly one of the strings), compiled; a 400 naming `param`
// otherwise.
std::shared_ptr<const runtime::Regex> ParseRegexFormat(const json& v, const std::string& param, bool choice) {
  try {
    if (!choice) {
      if (!v.is_string()) Bad(param, fmt::format("'{}' must be a string (a regular expression)", param));
      return runtime::Regex::Compile(v.get<std::string>(), runtime::Regex::Anchoring::kFullMatch);
    }
    if (!v.is_array() || v.empty()) Bad(param, fmt::format("'{}' must be a non-empty array of strings", param));
    std::vector<std::string> choices;
    for (const json& c : v) {
      if (!c.is_string()) Bad(param, fmt::format("'{}' must be a non-empty array of strings", param));
      choices.push_back(c.get<std::string>());
    }
    return runtime::Regex::Choice(choices);
  } catch (const pg::Error& e) {
    Bad(param, fmt::format("'{}': {}", param, e.what()));
  }
}

// response_format: "text" (the default), "json_object" (JSON mode) or "json_schema" (structured
// outputs); vLLM's guided_json / guided_regex / guided_choice and structured_outputs' json /
// regex / choice / grammar / json_object forms, and llama.cpp's grammar (GBNF). At most one.
// Fields that would change what may be generated and that Peregrine does not implement get a
// 400 naming the field, never a silent unconstrained answer: vLLM's guided_whitespace_pattern
// and structured_outputs' structural_tag / whitespace options.
void ParseOutputFormat(const json& body, GenerationOptions& o) {
  auto claim = [&](const std::string& param) {
    if (o.constrained) Bad(param, fmt::format("'{}' beside another output format", param));
    o.constrained = true;
  };
  auto set_schema = [&](const json& v, const std::string& param) {
    claim(param);
    o.sampling.json_schema = ParseSchema(v, param);
  };
  auto set_regex = [&](const json& v, const std::string& param, bool choice) {
    claim(param);
    o.sampling.regex = ParseRegexFormat(v, param, choice);
  };
  auto set_grammar = [&](const json& v, const std::string& param) {
    claim(param);
    if (!v.is_string()) Bad(param, fmt::format("'{}' must be a string (a GBNF grammar)", param));
    try {
      o.sampling.grammar = runtime::Grammar::Compile(v.get<std::string>());
    } catch (const pg::Error& e) {
      Bad(param, fmt::format("'{}': {}", param, e.what()));
    }
  };
  if (auto it = body.find("response_format"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) Bad("response_format", "'response_format' must be an object");
    const std::string type = GetString(*it, "type");
    if (type == "json_schema") {
      auto js = it->find("json_schema");
      if (js == it->end() || !js->is_object() || !js->contains("schema"))
        Bad("response_format", "response_format type 'json_schema' needs json_schema.schema");
      set_schema((*js)["schema"], "response_format");
    } else if (type == "json_object") {
      claim("response_format");
    } else if (type != "text") {
      Bad("response_format", fmt::format("unknown response_format type '{}'", type));
    }
  }
  if (auto it = body.find("logit_bias"); it != body.end() && !it->is_null())
    ParseLogitBias(*it, o.sampling.logit_bias);
  if (auto it = body.find("guided_json"); it != body.end() && !it->is_null()) set_schema(*it, "guided_json");
  if (auto it = body.find("guided_regex"); it != body.end() && !it->is_null()) set_regex(*it, "guided_regex", false);
  if (auto it = body.find("guided_choice"); it != body.end() && !it->is_null()) set_regex(*it, "guided_choice", true);
  // vLLM's guided_grammar (xgrammar's EBNF) and llama.cpp server's grammar: GBNF.
  if (auto it = body.find("guided_grammar"); it != body.end() && !it->is_null()) set_grammar(*it, "guided_grammar");
  if (auto it = body.find("grammar"); it != body.end() && !it->is_null()) set_grammar(*it, "grammar");
  if (auto it = body.find("structured_outputs"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) Bad("structured_outputs", "'structured_outputs' must be an object");
    for (const auto& [key, v] : it->items()) {
      if (v.is_null() || key == "disable_fallback") continue;  // no fallback exists to disable
      const std::string param = "structured_outputs." + key;
      if (key == "json") set_schema(v, param);
      else if (key == "regex") set_regex(v, param, false);
      else if (key == "choice") set_regex(v, param, true);
      else if (key == "grammar") set_grammar(v, param);
      else if (key == "json_object") {
        if (!v.is_boolean()) Bad(param, fmt::format("'{}' must be a boolean", param));
        if (v.get<bool>()) claim(param);
      } else {
        Bad(param, fmt::format("'{}' is not supported (supported: json, regex, choice, grammar, json_object)", param));
      }
    }
  }
  if (auto it = body.find("guided_whitespace_pattern"); it != body.end() && !it->is_null())
    Bad("guided_whitespace_pattern",
        "'guided_whitespace_pattern' is not supported (supported: response_format json_object / "
        "json_schema, guided_json, guided_regex, guided_choice, guided_grammar)");
  // vLLM's guided_decoding_backend picks an implementation, not an output: ignored.
}

void ParseCommon(const json& body, GenerationOptions& o) {
  ParseOutputFormat(body, o);
  o.model = GetString(body, "model");
  auto& s = o.sampling;
  GetNumber(body, "temperature", 0.0, 2.0, s.temperature);
  GetNumber(body, "top_p", 0.0, 1.0, s.top_p);
  if (s.top_p <= 0.0f) Bad("top_p", "'top_p' must be in (0, 1]");
  int64_t v = 0;
  if (GetInt(body, "top_k", -1, 1 << 20, v)) s.top_k = v < 0 ? 0 : static_cast<int>(v);
  GetNumber(body, "min_p", 0.0, 1.0, s.min_p);
  GetNumber(body, "presence_penalty", -2.0, 2.0, s.presence_penalty);
  GetNumber(body, "frequency_penalty", -2.0, 2.0, s.frequency_penalty);
  GetNumber(body, "repetition_penalty", 0.0, 10.0, s.repetition_penalty);
  if (s.repetition_penalty <= 0.0f) Bad("repetition_penalty", "'repetition_penalty' must be > 0");
  if (GetInt(body, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), v))
    s.seed = static_cast<uint64_t>(v);
  // max_completion_tokens is the newer name; either may be given.
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (GetInt(body, key, 1, std::numeric_limits<int32_t>::max(), v)) {
      s.max_tokens = static_cast<int>(v);
      o.max_tokens_given = true;
    }
  }
  if (GetInt(body, "n", 1, kMaxChoices, v)) o.n = static_cast<int>(v);
  s.ignore_eos = GetBool(body, "ignore_eos", false);
  if (s.ignore_eos && o.constrained)
    Bad("ignore_eos", "'ignore_eos' cannot be combined with constrained output (it ends where the format ends)");
  if (auto it = body.find("stop"); it != body.end() && !it->is_null()) {
    if (it->is_string()) {
      o.stop.push_back(it->get<std::string>());
    } else if (it->is_array()) {
      if (it->size() > kMaxStopStrings) Bad("stop", fmt::format("at most {} stop strings", kMaxStopStrings));
      for (const auto& x : *it) {
        if (!x.is_string()) Bad("stop", "'stop' must be a string or an array of strings");
        o.stop.push_back(x.get<std::string>());
      }
    } else {
      Bad("stop", "'stop' must be a string or an array of strings");
    }
    for (const auto& x : o.stop)
      if (x.empty()) Bad("stop", "stop strings must not be empty");
  }
  if (auto it = body.find("stop_token_ids"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) Bad("stop_token_ids", "'stop_token_ids' must be an array of integers");
    for (const auto& x : *it) {
      if (!x.is_number_integer()) Bad("stop_token_ids", "'stop_token_ids' must be an array of integers");
      s.stop_token_ids.push_back(x.get<int32_t>());
    }
  }
  o.stream = GetBool(body, "stream", false);
  if (auto it = body.find("stream_options"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) Bad("stream_options", "'stream_options' must be an object");
    if (!o.stream) Bad("stream_options", "'stream_options' is only allowed when 'stream' is true");
    o.include_usage = GetBool(*it, "include_usage", false);
  }
  o.session_id = GetString(body, "session_id");
  if (o.session_id.empty()) o.session_id = GetString(body, "conversation_id");
}

// Content as a string: a string as is, an array of text parts joined; null stays null.
json NormaliseContent(const json& content, const std::string& param) {
  if (content.is_null() || content.is_string()) return content;
  if (!content.is_array()) Bad(param, "'content' must be a string or an array of content parts");
  std::string text;
  for (const auto& part : content) {
    if (!part.is_object()) Bad(param, "content parts must be objects");
    const std::string type = GetString(part, "type");
    if (type != "text")
      Bad(param, fmt::format("content part type '{}' is not supported (text only)", type));
    auto t = part.find("text");
    if (t == part.end() || !t->is_string()) Bad(param, "a text content part needs a string 'text'");
    text += t->get<std::string>();
  }
  return text;
}

json ParseToolCalls(const json& calls, const std::string& param) {
  if (!calls.is_array()) Bad(param, "'tool_calls' must be an array");
  json out = json::array();
  for (const auto& c : calls) {
    if (!c.is_object()) Bad(param, "each tool call must be an object");
    auto f = c.find("function");
    if (f == c.end() || !f->is_object()) Bad(param, "a tool call needs a 'function' object");
    const std::string name = GetString(*f, "name");
    if (name.empty()) Bad(param, "a tool call function needs a 'name'");
    json args = f->value("arguments", json("{}"));
    if (!args.is_string()) args = args.dump();  // tolerate an object
    out.push_back({{"id", GetString(c, "id")},
                   {"type", "function"},
                   {"function", {{"name", name}, {"arguments", args}}}});
  }
  return out;
}

}  // namespace

ApiError::ApiError(int status_in, std::string message, std::string param_in, std::string code_in)
    : std::runtime_error(std::move(message)),
      status(status_in),
      type(ErrorType(status_in)),
      param(std::move(param_in)),
      code(std::move(code_in)) {}

json ErrorBody(const ApiError& e) {
  return {{"error",
           {{"message", e.what()},
            {"type", e.type},
            {"param", e.param.empty() ? json(nullptr) : json(e.param)},
            {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
}

json ParseBody(const std::string& body) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::parse_error& e) {
    throw ApiError(400, fmt::format("request body is not valid JSON: {}", e.what()), "", "invalid_json");
  }
  if (!j.is_object()) throw ApiError(400, "request body must be a JSON object", "", "invalid_json");
  return j;
}

ChatRequest ParseChatRequest(const json& body) {
  ChatRequest r;
  ParseCommon(body, r.options);
  auto& o = r.options;
  o.logprobs = GetBool(body, "logprobs", false);
  int64_t v = 0;
  if (GetInt(body, "top_logprobs", 0, kMaxTopLogprobs, v)) {
    if (!o.logprobs) Bad("top_logprobs", "'top_logprobs' requires 'logprobs': true");
    o.top_logprobs = static_cast<int>(v);
  }
  o.sampling.top_logprobs = o.logprobs ? o.top_logprobs : -1;

  auto it = body.find("messages");
  if (it == body.end()) Bad("messages", "'messages' is required");
  if (!it->is_array() || it->empty()) Bad("messages", "'messages' must be a non-empty array");
  r.messages = json::array();
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    const std::string param = fmt::format("messages[{}]", i);
    if (!m.is_object()) Bad(param, "each message must be an object");
    const std::string role = GetString(m, "role");
    if (role != "system" && role != "developer" && role != "user" && role != "assistant" &&
        role != "tool")
      Bad(param + ".role", fmt::format("unknown role '{}'", role));
    json out = {{"role", role == "developer" ? "system" : role}};
    json content = NormaliseContent(m.value("content", json(nullptr)), param + ".content");
    if (auto tc = m.find("tool_calls"); role == "assistant" && tc != m.end() && !tc->is_null()) {
      out["tool_calls"] = ParseToolCalls(*tc, param + ".tool_calls");
    }
    if (content.is_null() && !out.contains("tool_calls"))
      Bad(param + ".content", fmt::format("a {} message needs 'content'", role));
    out["content"] = content;
    if (role == "tool") out["tool_call_id"] = GetString(m, "tool_call_id");
    if (auto n = m.find("name"); n != m.end() && n->is_string()) out["name"] = *n;
    r.messages.push_back(std::move(out));
  }

  if (auto t = body.find("tools"); t != body.end() && !t->is_null()) {
    if (!t->is_array()) Bad("tools", "'tools' must be an array");
    for (size_t i = 0; i < t->size(); ++i) {
      const json& tool = (*t)[i];
      const std::string param = fmt::format("tools[{}]", i);
      if (!tool.is_object() || GetString(tool, "type") != "function")
        Bad(param, "each tool must be {\"type\": \"function\", \"function\": {...}}");
      auto f = tool.find("function");
      if (f == tool.end() || !f->is_object() || GetString(*f, "name").empty())
        Bad(param + ".function", "a tool needs a function with a 'name'");
      if (auto p = f->find("parameters"); p != f->end() && !p->is_object() && !p->is_null())
        Bad(param + ".function.parameters", "'parameters' must be a JSON Schema object");
    }
    if (!t->empty()) r.tools = *t;
  }
  if (auto tc = body.find("tool_choice"); tc != body.end() && !tc->is_null()) {
    if (tc->is_string()) {
      const std::string s = tc->get<std::string>();
      if (s == "auto") r.tool_choice = ToolChoice::kAuto;
      else if (s == "none") r.tool_choice = ToolChoice::kNone;
      else if (s == "required") r.tool_choice = ToolChoice::kRequired;
      else Bad("tool_choice", fmt::format("unknown tool_choice '{}'", s));
    } else if (tc->is_object()) {
      auto f = tc->find("function");
      if (f == tc->end() || !f->is_object() || GetString(*f, "name").empty())
        Bad("tool_choice", "a named tool_choice needs {\"function\": {\"name\": ...}}");
      r.tool_choice = ToolChoice::kNamed;
      r.tool_choice_name = GetString(*f, "name");
    } else {
      Bad("tool_choice", "'tool_choice' must be a string or an object");
    }
    if ((r.tool_choice == ToolChoice::kRequired || r.tool_choice == ToolChoice::kNamed) &&
        r.tools.is_null())
      Bad("tool_choice", "'tool_choice' requires 'tools'");
    if (r.tool_choice == ToolChoice::kNamed) {
      bool found = false;
      for (const auto& tool : r.tools) found |= tool["function"]["name"] == r.tool_choice_name;
      if (!found)
        Bad("tool_choice", fmt::format("tool '{}' is not among the tools", r.tool_choice_name));
    }
  }
  // JSON mode constrains the whole output to one object, so a forced tool call's markup could
  // never be closed; with tool_choice auto the model may still answer, as JSON, without tools.
  if (r.options.constrained && (r.tool_choice == ToolChoice::kRequired || r.tool_choice == ToolChoice::kNamed))
    Bad("response_format", "constrained output (response_format, guided_*, structured_outputs) cannot be combined "
                           "with a required or named tool_choice");
  return r;
}

CompletionRequest ParseCompletionRequest(const json& body, int vocab_size) {
  CompletionRequest r;
  ParseCommon(body, r.options);
  auto& o = r.options;
  // Legacy completions: logprobs is an integer 0..5 (number of alternatives).
  int64_t v = 0;
  if (GetInt(body, "logprobs", 0, 5, v)) {
    o.logprobs = true;
    o.top_logprobs = static_cast<int>(v);
  }
  o.sampling.top_logprobs = o.logprobs ? o.top_logprobs : -1;
  o.echo = GetBool(body, "echo", false);
  if (auto s = body.find("suffix"); s != body.end() && !s->is_null())
    Bad("suffix", "'suffix' is not supported");
  int64_t best_of = 0;
  if (GetInt(body, "best_of", 1, 1 << 20, best_of) && best_of != 1)
    Bad("best_of", "only best_of=1 is supported");

  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) Bad("prompt", "'prompt' is required");
  auto as_tokens = [&](const json& arr) {
    if (arr.empty()) Bad("prompt", "'prompt' must not be empty");
    for (const auto& t : arr) {
      if (!t.is_number_integer()) Bad("prompt", "a token prompt must be an array of integers");
      const int64_t id = t.get<int64_t>();
      if (id < 0 || id >= vocab_size)
        Bad("prompt", fmt::format("token id {} is outside the vocabulary [0, {})", id, vocab_size));
      r.prompt_tokens.push_back(static_cast<int32_t>(id));
    }
    r.prompt_is_tokens = true;
  };
  if (it->is_string()) {
    r.prompt_text = it->get<std::string>();
  } else if (it->is_array() && it->size() == 1 && (*it)[0].is_string()) {
    r.prompt_text = (*it)[0].get<std::string>();
  } else if (it->is_array() && !it->empty() && (*it)[0].is_number_integer()) {
    as_tokens(*it);
  } else if (it->is_array() && it->size() == 1 && (*it)[0].is_array()) {
    as_tokens((*it)[0]);
  } else if (it->is_array() && it->size() > 1) {
    Bad("prompt", "batched prompts are not supported: send one prompt per request");
  } else {
    Bad("prompt", "'prompt' must be a string or an array of token ids");
  }
  if (!r.prompt_is_tokens && r.prompt_text.empty() && !it->is_array())
    Bad("prompt", "'prompt' must not be empty");
  return r;
}

json UsageJson(int prompt_tokens, int completion_tokens, int cached_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
}

const char* FinishReasonString(engine::FinishReason reason, bool tool_calls) {
  switch (reason) {
    case engine::FinishReason::kStop: return tool_calls ? "tool_calls" : "stop";
    case engine::FinishReason::kLength: return "length";
    case engine::FinishReason::kAbort: return "abort";
    case engine::FinishReason::kError: return "error";
    case engine::FinishReason::kNone: return "stop";
  }
  return "stop";
}

}  // namespace pg::server
