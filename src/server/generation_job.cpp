// /v1/chat/completions and /v1/completions: request -> prompt tokens -> Engine::Submit, then
// engine events -> OutputPipeline -> OpenAI chunks (SSE) or one response object.
//
// Ownership: a GenerationJob is kept alive by the engine callback (until the final event) and
// by the posts onto the connection strand; all of its methods run on that strand.
#include <random>

#include "core/log.h"
#include "core/status.h"
#include "runtime/json_schema.h"
#include "server/output_pipeline.h"
#include "server/server_state.h"

namespace pg::server {
namespace {

std::string RandomId(std::string_view prefix) {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id(prefix);
  for (int i = 0; i < 24; ++i) id += kAlphabet[rng() % (sizeof(kAlphabet) - 1)];
  return id;
}

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch()).count();
}

json Bytes(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

struct JobSetup {
  bool chat = true;
  std::string endpoint;
  GenerationOptions options;
  std::string echo_text;  // completions with echo=true
};

class GenerationJob : public std::enable_shared_from_this<GenerationJob> {
 public:
  GenerationJob(std::shared_ptr<Server::State> state, std::shared_ptr<Exchange> ex, JobSetup setup,
                std::unique_ptr<OutputPipeline> pipeline, Clock::time_point arrival)
      : st_(std::move(state)),
        ex_(std::move(ex)),
        setup_(std::move(setup)),
        pipe_(std::move(pipeline)),
        arrival_(arrival),
        id_(RandomId(setup_.chat ? "chatcmpl-" : "cmpl-")),
        created_(UnixNow()) {}

  // Submits; throws pg::Error from Engine::Submit (nothing has been sent then).
  void Start(engine::Request request) {
    auto self = shared_from_this();
    request_id_ = st_->ctx.engine.Submit(std::move(request), [self](const engine::TokenEvent& ev) {
      self->ex_->Post([self, ev] { self->OnEvent(ev); });
    });
    {
      std::lock_guard<std::mutex> lock(st_->mu);
      st_->active.insert(request_id_);
    }
    st_->in_flight.fetch_add(1);
    st_->metrics.AddInFlight(1);
    ex_->OnDisconnect([self] { self->OnDisconnect(); });
    if (setup_.options.stream) {
      ex_->StartStream();
      if (setup_.chat) {
        // The role chunk goes out with the first engine output, as vLLM does, so a client
        // that takes TTFT at the first chunk (evalscope) measures the real time to first token.
        role_pending_ = true;
      } else if (!setup_.echo_text.empty()) {
        SendCompletionChunk(setup_.echo_text, nullptr);
      }
    }
  }

 private:
  void OnEvent(const engine::TokenEvent& ev) {
    if (ev.finished) Release();
    if (done_) return;
    if (role_pending_) {
      role_pending_ = false;
      SendChunk({{"role", "assistant"}, {"content", ""}}, nullptr);
    }
    num_prompt_ = ev.num_prompt_tokens;
    num_cached_ = ev.num_cached_tokens;
    num_generated_ = ev.num_generated_tokens;
    if (!ev.tokens.empty()) {
      const auto now = Clock::now();
      if (!first_token_) {
        first_token_ = now;
        st_->metrics.ObserveTtft(Seconds(arrival_, now));
      } else {
        st_->metrics.ObserveItl(Seconds(last_token_, now));
      }
      last_token_ = now;
    }
    if (setup_.options.logprobs) {
      for (const auto& lp : ev.logprobs) pending_logprobs_.push_back(lp);
    }
    bool stop_matched = false;
    OutputDelta delta = pipe_->Push(ev.tokens, stop_matched);
    if (stop_matched) {
      st_->ctx.engine.Abort(request_id_);
      Emit(std::move(delta));
      Complete("stop");
      return;
    }
    if (!ev.finished) {
      Emit(std::move(delta));
      return;
    }
    if (ev.finish_reason == engine::FinishReason::kError) {
      Fail(ev.error.empty() ? "generation failed" : ev.error);
      return;
    }
    OutputDelta tail = pipe_->Finish();
    Emit(std::move(delta));
    Emit(std::move(tail));
    Complete(FinishReasonString(ev.finish_reason, pipe_->saw_tool_calls()));
  }

  void OnDisconnect() {
    if (done_) return;
    done_ = true;
    st_->ctx.engine.Abort(request_id_);
    st_->metrics.CountAbortedByClient();
    st_->metrics.CountRequest(setup_.endpoint, 499);
  }

  // The engine's final event arrived: the request holds no engine resources any more.
  void Release() {
    if (released_) return;
    released_ = true;
    {
      std::lock_guard<std::mutex> lock(st_->mu);
      st_->active.erase(request_id_);
    }
    st_->in_flight.fetch_sub(1);
    st_->metrics.AddInFlight(-1);
  }

  static double Seconds(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  }

  // ---- logprobs -------------------------------------------------------------------------
  json TakeChatLogprobs() {
    if (!setup_.options.logprobs || pending_logprobs_.empty()) return nullptr;
    json content = json::array();
    for (const auto& lp : pending_logprobs_) {
      const std::string tok = TokenText(lp.token);
      json top = json::array();
      for (size_t i = 0; i < lp.top.size() && static_cast<int>(i) < setup_.options.top_logprobs; ++i) {
        const std::string t = TokenText(lp.top[i].first);
        top.push_back({{"token", t}, {"logprob", lp.top[i].second}, {"bytes", Bytes(t)}});
      }
      content.push_back({{"token", tok}, {"logprob", lp.logprob}, {"bytes", Bytes(tok)}, {"top_logprobs", top}});
    }
    pending_logprobs_.clear();
    return {{"content", content}, {"refusal", nullptr}};
  }

  json TakeCompletionLogprobs() {
    if (!setup_.options.logprobs || pending_logprobs_.empty()) return nullptr;
    json tokens = json::array(), token_lps = json::array(), tops = json::array(), offsets = json::array();
    for (const auto& lp : pending_logprobs_) {
      const std::string tok = TokenText(lp.token);
      tokens.push_back(tok);
      token_lps.push_back(lp.logprob);
      json top = json::object();
      for (size_t i = 0; i < lp.top.size() && static_cast<int>(i) < setup_.options.top_logprobs; ++i)
        top[TokenText(lp.top[i].first)] = lp.top[i].second;
      tops.push_back(top);
      offsets.push_back(text_offset_);
      text_offset_ += static_cast<int64_t>(tok.size());
    }
    pending_logprobs_.clear();
    return {{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
  }

  std::string TokenText(int32_t token) const {
    const int32_t one[1] = {token};
    return st_->ctx.text.Decode(one);
  }

  // ---- output ---------------------------------------------------------------------------
  void Emit(OutputDelta&& d) {
    if (!setup_.options.stream) {
      content_ += d.content;
      reasoning_ += d.reasoning;
      parsers::ParsedDelta p;
      p.tool_calls = std::move(d.tool_calls);
      tools_.Add(p);
      if (setup_.options.logprobs) {
        for (auto& lp : pending_logprobs_) all_logprobs_.push_back(std::move(lp));
        pending_logprobs_.clear();
      }
      return;
    }
    if (!setup_.chat) {
      if (!d.content.empty()) SendCompletionChunk(d.content, nullptr);
      return;
    }
    if (!d.reasoning.empty()) SendChunk({{"reasoning_content", d.reasoning}}, nullptr);
    if (!d.content.empty()) SendChunk({{"content", d.content}}, nullptr);
    if (!d.tool_calls.empty()) {
      json calls = json::array();
      for (const auto& c : d.tool_calls) {
        json j = {{"index", c.index}};
        if (!c.id.empty() || !c.name.empty()) {
          j["id"] = c.id;
          j["type"] = "function";
          j["function"] = {{"name", c.name}, {"arguments", c.arguments}};
        } else {
          j["function"] = {{"arguments", c.arguments}};
        }
        calls.push_back(std::move(j));
      }
      SendChunk({{"tool_calls", calls}}, nullptr);
    }
  }

  json ChunkBase() const {
    json j = {{"id", id_},
              {"object", setup_.chat ? "chat.completion.chunk" : "text_completion"},
              {"created", created_},
              {"model", st_->model_name}};
    return j;
  }

  void SendChunk(json delta, const char* finish_reason) {
    json chunk = ChunkBase();
    chunk["choices"] = json::array({{{"index", 0},
                                     {"delta", std::move(delta)},
                                     {"logprobs", TakeChatLogprobs()},
                                     {"finish_reason", finish_reason ? json(finish_reason) : json(nullptr)}}});
    if (setup_.options.include_usage) chunk["usage"] = nullptr;
    Send(chunk);
  }

  void SendCompletionChunk(const std::string& text, const char* finish_reason) {
    json chunk = ChunkBase();
    chunk["choices"] = json::array({{{"index", 0},
                                     {"text", text},
                                     {"logprobs", TakeCompletionLogprobs()},
                                     {"finish_reason", finish_reason ? json(finish_reason) : json(nullptr)}}});
    if (setup_.options.include_usage) chunk["usage"] = nullptr;
    Send(chunk);
  }

  void Send(const json& j) { ex_->SendEvent(j.dump(-1, ' ', false, json::error_handler_t::replace)); }

  void ObserveEnd() {
    const auto now = Clock::now();
    st_->metrics.ObserveE2e(Seconds(arrival_, now));
    if (first_token_ && num_generated_ > 1)
      st_->metrics.ObserveTpot(Seconds(*first_token_, last_token_) / (num_generated_ - 1));
  }

  void Complete(const char* finish_reason) {
    done_ = true;
    ObserveEnd();
    st_->metrics.CountRequest(setup_.endpoint, 200);
    const json usage = UsageJson(num_prompt_, num_generated_, num_cached_);
    if (setup_.options.stream) {
      if (setup_.chat) {
        SendChunk(json::object(), finish_reason);
      } else {
        SendCompletionChunk("", finish_reason);
      }
      if (setup_.options.include_usage) {
        json chunk = ChunkBase();
        chunk["choices"] = json::array();
        chunk["usage"] = usage;
        Send(chunk);
      }
      ex_->SendEvent("[DONE]");
      ex_->EndStream();
      return;
    }
    pending_logprobs_ = std::move(all_logprobs_);
    json body = ChunkBase();
    if (setup_.chat) {
      body["object"] = "chat.completion";
      json message = {{"role", "assistant"}};
      message["content"] = (content_.empty() && !tools_.calls.empty()) ? json(nullptr) : json(content_);
      if (!reasoning_.empty()) message["reasoning_content"] = reasoning_;
      if (!tools_.calls.empty()) {
        json calls = json::array();
        for (const auto& c : tools_.calls)
          calls.push_back({{"id", c.id}, {"type", "function"},
                           {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
        message["tool_calls"] = calls;
      }
      body["choices"] = json::array({{{"index", 0}, {"message", message},
                                      {"logprobs", TakeChatLogprobs()}, {"finish_reason", finish_reason}}});
    } else {
      body["choices"] = json::array({{{"index", 0}, {"text", setup_.echo_text + content_},
                                      {"logprobs", TakeCompletionLogprobs()}, {"finish_reason", finish_reason}}});
    }
    body["usage"] = usage;
    ex_->Respond(200, "application/json", body.dump(-1, ' ', false, json::error_handler_t::replace));
  }

  void Fail(const std::string& message) {
    done_ = true;
    ObserveEnd();
    const ApiError err(500, message, "", "generation_error");
    st_->metrics.CountRequest(setup_.endpoint, 500);
    if (setup_.options.stream) {
      Send(ErrorBody(err));
      ex_->SendEvent("[DONE]");
      ex_->EndStream();
    } else {
      ex_->Respond(500, "application/json", ErrorBody(err).dump());
    }
  }

  std::shared_ptr<Server::State> st_;
  std::shared_ptr<Exchange> ex_;
  JobSetup setup_;
  std::unique_ptr<OutputPipeline> pipe_;
  Clock::time_point arrival_;
  std::string id_;
  int64_t created_;
  engine::RequestId request_id_ = 0;
  bool done_ = false;      // the client has its answer (or is gone): ignore further output
  bool role_pending_ = false;  // stream: the assistant role chunk is not sent yet
  bool released_ = false;  // the engine's final event arrived
  std::optional<Clock::time_point> first_token_;
  Clock::time_point last_token_;
  int num_prompt_ = 0, num_cached_ = 0, num_generated_ = 0;
  std::string content_, reasoning_;
  parsers::ToolCallAccumulator tools_;
  std::vector<engine::TokenLogprob> pending_logprobs_, all_logprobs_;
  int64_t text_offset_ = 0;
};

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
               std::unique_ptr<OutputPipeline> pipe, std::vector<int32_t> prompt, Clock::time_point arrival) {
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
  if (engine.Stats().num_waiting >= st->config.max_waiting_requests)
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
  auto job = std::make_shared<GenerationJob>(st, std::move(ex), std::move(setup), std::move(pipe), arrival);
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
  auto pipe = std::make_unique<OutputPipeline>(st->ctx.text, pc);
  if (forced)
    prompt += call_object ? pipe->ForceToolCallObject()
                          : pipe->ForceToolCall(r.tool_choice == ToolChoice::kNamed ? r.tool_choice_name : "");
  std::vector<int32_t> tokens = st->ctx.text.Encode(prompt, /*add_bos=*/true, /*parse_special=*/true);
  JobSetup setup{true, "/v1/chat/completions", std::move(r.options), {}};
  SubmitJob(st, std::move(ex), std::move(setup), std::move(pipe), std::move(tokens), arrival);
}

void HandleCompletions(const std::shared_ptr<Server::State>& st, const HttpRequest& req,
                       std::shared_ptr<Exchange> ex, Clock::time_point arrival) {
  CheckDraining(*st);
  CompletionRequest r = ParseCompletionRequest(ParseBody(req.body()), st->ctx.engine.model_info().vocab_size);
  CheckModel(*st, r.options);
  std::vector<int32_t> tokens = r.prompt_is_tokens
                                    ? r.prompt_tokens
                                    : st->ctx.text.Encode(r.prompt_text, /*add_bos=*/true, /*parse_special=*/true);
  auto pipe = std::make_unique<OutputPipeline>(st->ctx.text, BasePipeline(*st, r.options));
  JobSetup setup{false, "/v1/completions", std::move(r.options), {}};
  if (setup.options.echo) setup.echo_text = r.prompt_is_tokens ? st->ctx.text.Decode(tokens) : r.prompt_text;
  SubmitJob(st, std::move(ex), std::move(setup), std::move(pipe), std::move(tokens), arrival);
}

}  // namespace pg::server
