// /v1/chat/completions and /v1/completions: request -> prompt tokens (the chat template, a
// forced tool call) -> one OutputPipeline per choice -> GenerationJob (generation_job.h).
#include "core/log.h"
#include "core/status.h"
#include "runtime/json_schema.h"
#include "server/generation_job.h"

namespace pg::server {
namespace {

void CheckModel(const Server::State& st, const GenerationOptions& o) {
  if (!o.model.empty() && o.model != st.model_name)
    throw ApiError(400, fmt::format("model '{}' is not served here (serving '{}')", o.model, st.model_name),
                   "model", "model_not_found");
}

void CheckDraining(const Server::State& st) {
  if (st.draining.load()) throw ApiError(503, "server is shutting down", "", "shutting_down");
}

// Sets max_tokens from the context left, checks the queue, submits. Throws ApiError.
void SubmitJob(const std::shared_ptr<Server::State>& st, std::shared_ptr<Exchange> ex, JobSetup setup,
               std::vector<std::unique_ptr<OutputPipeline>> pipes, std::vector<int32_t> prompt,
               Clock::time_point arrival) {
  auto& engine = st->ctx.engine;
  const int ctx_tokens = engine.model_info().max_context_tokens;
  const int n = static_cast<int>(prompt.size());
  if (n == 0) throw ApiError(400, "the prompt is empty", "messages");
  if (ctx_tokens > 0 && n >= ctx_tokens)
    throw ApiError(400, fmt::format("the prompt has {} tokens; this model's context holds {} tokens "
                                    "(prompt plus at least one generated token)", n, ctx_tokens),
                   "messages", "context_length_exceeded");
  auto& s = setup.options.sampling;
  const int left = ctx_tokens > 0 ? ctx_tokens - n : std::numeric_limits<int>::max();
  s.max_tokens = std::min(setup.options.max_tokens_given ? s.max_tokens : st->config.default_max_tokens, left);
  if (engine.Stats().num_waiting + setup.options.n > st->config.max_waiting_requests)
    throw ApiError(503, "the server is overloaded: too many requests waiting; retry later", "", "overloaded");

  if (setup.options.constrained) {
    s.token_table = st->ctx.text.token_table(engine.model_info().eos_token_ids);
    if (!s.token_table || s.token_table->eos_ids.empty())
      throw ApiError(400, "constrained output needs the model's token table and an end-of-sequence token; "
                          "this model has none", "response_format");
  }
  engine::Request req;
  req.prompt_tokens = std::move(prompt);
  req.sampling = s;
  req.session_id = setup.options.session_id;
  auto job = std::make_shared<GenerationJob>(st, std::move(ex), std::move(setup), std::move(pipes), arrival);
  try {
    job->Start(std::move(req));
  } catch (const pg::Error& e) {
    switch (e.code()) {
      case ErrorCode::kResourceExhausted: throw ApiError(503, e.what(), "", "overloaded");
      case ErrorCode::kOutOfRange: throw ApiError(400, e.what(), "messages", "context_length_exceeded");
      case ErrorCode::kInvalidArgument: throw ApiError(400, e.what());
      default: throw ApiError(500, e.what());
    }
  }
}

PipelineConfig BasePipeline(const Server::State& st, const GenerationOptions& o) {
  PipelineConfig pc;
  pc.stop = o.stop;
  const auto& eos = st.ctx.engine.model_info().eos_token_ids;
  pc.hidden_token_ids.assign(eos.begin(), eos.end());
  pc.hidden_token_ids.insert(pc.hidden_token_ids.end(), o.sampling.stop_token_ids.begin(),
                             o.sampling.stop_token_ids.end());
  return pc;
}

// A forced call (tool_choice named or "required") generated under a schema, when the model
// has a token table (else it is forced unconstrained, as the prompt alone forces it):
// - named: the arguments are an instance of the tool's `parameters` (any JSON object where it
//   has none or uses what JsonSchema cannot enforce: logged), then EOS;
// - required, on a format that writes a call as one JSON object (Hermes, Llama 3.1): the whole
//   object, {"name": <one of the tools>, <key>: <that tool's parameters>}, then EOS. Returns
//   true then (the prompt must end before the object: ForceToolCallObject). On the other
//   formats the name sits outside JSON and the call is forced unconstrained.
// Either way the tool parser reports the call at the end of output.
bool ConstrainForcedCall(const Server::State& st, ChatRequest& r, parsers::ToolFormat format) {
  const auto table = st.ctx.text.token_table(st.ctx.engine.model_info().eos_token_ids);
  if (!table || table->eos_ids.empty()) return false;
  std::vector<std::pair<std::string, json>> tools;
  for (const json& tool : r.tools) {
    const json fn = tool.value("function", json::object());
    tools.emplace_back(fn.value("name", std::string()), fn.value("parameters", json()));
  }
  if (r.tool_choice == ToolChoice::kNamed) {
    for (const auto& [name, params] : tools) {
      if (name != r.tool_choice_name) continue;
      r.options.constrained = true;
      if (params.is_null()) return false;
      try {
        r.options.sampling.json_schema = runtime::JsonSchema::Compile(params);
      } catch (const pg::Error& e) {
        PG_LOG_WARN("tool '{}': arguments constrained to any JSON object: {}", name, e.what());
      }
      return false;
    }
    return false;
  }
  const std::string key(parsers::MakeToolCallParser(format)->call_object_key());
  if (key.empty()) return false;
  std::vector<std::string> relaxed;
  try {
    r.options.sampling.json_schema = runtime::JsonSchema::CompileToolCall(tools, key, &relaxed);
  } catch (const pg::Error& e) {
    PG_LOG_WARN("tool_choice required: the call is forced unconstrained: {}", e.what());
    return false;
  }
  for (const std::string& why : relaxed) PG_LOG_WARN("tool {}: its arguments may be any JSON object", why);
  r.options.constrained = true;
  return true;
}

}  // namespace

void HandleChatCompletions(const std::shared_ptr<Server::State>& st, const HttpRequest& req,
                           std::shared_ptr<Exchange> ex, Clock::time_point arrival) {
  CheckDraining(*st);
  ChatRequest r = ParseChatRequest(ParseBody(req.body()));
  CheckModel(*st, r.options);
  const ChatFeatures features = st->ctx.text.chat_features();
  const bool tools_active = !r.tools.is_null() && r.tool_choice != ToolChoice::kNone;
  std::string prompt;
  try {
    prompt = st->ctx.text.RenderChat(r.messages, tools_active ? r.tools : json(nullptr));
  } catch (const pg::Error& e) {
    throw ApiError(400, fmt::format("cannot render the chat template: {}", e.what()), "messages");
  }
  const bool forced = tools_active && (r.tool_choice == ToolChoice::kRequired || r.tool_choice == ToolChoice::kNamed);
  if (forced && features.tool_format == parsers::ToolFormat::kNone)
    throw ApiError(400, "this model has no tool-call format: tool_choice 'required' or a named "
                        "function cannot be honoured", "tool_choice");
  const bool call_object = forced && ConstrainForcedCall(*st, r, features.tool_format);
  PipelineConfig pc = BasePipeline(*st, r.options);
  // JSON mode's output is the object from its first byte (the mask admits no think tags), so
  // none of it is reasoning, even where the generation prompt opens a <think> block.
  pc.parse_reasoning = features.think_tags && !r.options.constrained;
  pc.starts_in_reasoning = features.prompt_opens_think && !r.options.constrained;
  pc.tool_format = tools_active ? features.tool_format : parsers::ToolFormat::kNone;
  std::vector<std::unique_ptr<OutputPipeline>> pipes;
  std::string forced_text;  // the same for every choice's pipeline
  for (int i = 0; i < r.options.n; ++i) {
    auto pipe = std::make_unique<OutputPipeline>(st->ctx.text, pc);
    if (forced)
      forced_text = call_object ? pipe->ForceToolCallObject()
                                : pipe->ForceToolCall(r.tool_choice == ToolChoice::kNamed ? r.tool_choice_name : "");
    pipes.push_back(std::move(pipe));
  }
  std::vector<int32_t> tokens = st->ctx.text.Encode(prompt + forced_text, /*add_bos=*/true, /*parse_special=*/true);
  JobSetup setup{true, "/v1/chat/completions", std::move(r.options), {}};
  SubmitJob(st, std::move(ex), std::move(setup), std::move(pipes), std::move(tokens), arrival);
}

void HandleCompletions(const std::shared_ptr<Server::State>& st, const HttpRequest& req,
                       std::shared_ptr<Exchange> ex, Clock::time_point arrival) {
  CheckDraining(*st);
  CompletionRequest r = ParseCompletionRequest(ParseBody(req.body()), st->ctx.engine.model_info().vocab_size);
  CheckModel(*st, r.options);
  std::vector<int32_t> tokens = r.prompt_is_tokens
                                    ? r.prompt_tokens
                                    : st->ctx.text.Encode(r.prompt_text, /*add_bos=*/true, /*parse_special=*/true);
  std::vector<std::unique_ptr<OutputPipeline>> pipes;
  for (int i = 0; i < r.options.n; ++i)
    pipes.push_back(std::make_unique<OutputPipeline>(st->ctx.text, BasePipeline(*st, r.options)));
  JobSetup setup{false, "/v1/completions", std::move(r.options), {}};
  if (setup.options.echo) setup.echo_text = r.prompt_is_tokens ? st->ctx.text.Decode(tokens) : r.prompt_text;
  SubmitJob(st, std::move(ex), std::move(setup), std::move(pipes), std::move(tokens), arrival);
}

}  // namespace pg::server
