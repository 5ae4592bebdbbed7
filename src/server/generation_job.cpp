// GenerationJob (generation_job.h): engine events of each choice -> its OutputPipeline ->
// OpenAI chunks or one response object.
#include "server/generation_job.h"

#include <random>

#include "core/status.h"

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

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

}  // namespace

GenerationJob::GenerationJob(std::shared_ptr<Server::State> state, std::shared_ptr<Exchange> ex, JobSetup setup,
                             std::vector<std::unique_ptr<OutputPipeline>> pipes, Clock::time_point arrival)
    : st_(std::move(state)),
      ex_(std::move(ex)),
      setup_(std::move(setup)),
      arrival_(arrival),
      id_(RandomId(setup_.chat ? "chatcmpl-" : "cmpl-")),
      created_(UnixNow()) {
  for (auto& p : pipes) {
    Choice c;
    c.pipe = std::move(p);
    choices_.push_back(std::move(c));
  }
}

void GenerationJob::Start(engine::Request request) {
  if (choices_.size() > 1) request_ = request;  // for the later choices
  Submit(0, std::move(request));
  auto self = shared_from_this();
  ex_->OnDisconnect([self] { self->OnDisconnect(); });
  if (setup_.options.stream) {
    ex_->StartStream();
    if (setup_.chat) {
      // The role chunk goes out with a choice's first engine output, as vLLM does, so a client
      // that takes TTFT at the first chunk (evalscope) measures the real time to first token.
      for (Choice& c : choices_) c.role_pending = true;
    } else if (!setup_.echo_text.empty()) {
      for (size_t i = 0; i < choices_.size(); ++i) SendCompletionChunk(i, setup_.echo_text, nullptr);
    }
  }
}

// Choice i's engine request: the prompt, with seed + i when a seed was given (choices differ
// but stay reproducible).
void GenerationJob::Submit(size_t i, engine::Request r) {
  if (r.sampling.seed) r.sampling.seed = *r.sampling.seed + i;
  auto self = shared_from_this();
  Choice& c = choices_[i];
  c.request_id = st_->ctx.engine.Submit(std::move(r), [self, i](const engine::TokenEvent& ev) {
    self->ex_->Post([self, i, ev] { self->OnEvent(i, ev); });
  });
  c.submitted = true;
  {
    std::lock_guard<std::mutex> lock(st_->mu);
    st_->active.insert(c.request_id);
  }
  st_->in_flight.fetch_add(1);
  st_->metrics.AddInFlight(1);
}

void GenerationJob::SubmitOthers() {
  for (size_t i = 1; i < choices_.size(); ++i) {
    if (choices_[i].submitted) continue;
    try {
      Submit(i, request_);
    } catch (const pg::Error& e) {
      Fail(fmt::format("choice {} could not be submitted: {}", i, e.what()));
      return;
    }
  }
  request_ = {};
}

void GenerationJob::OnEvent(size_t i, const engine::TokenEvent& ev) {
  Choice& c = choices_[i];
  if (ev.finished) Release(c);
  const bool failed = ev.finished && ev.finish_reason == engine::FinishReason::kError;
  if (i == 0 && !done_ && !failed && choices_.size() > 1 && !choices_[1].submitted) SubmitOthers();
  if (done_ || c.done) return;
  if (c.role_pending) {
    c.role_pending = false;
    SendChunk(i, {{"role", "assistant"}, {"content", ""}}, nullptr);
  }
  if (i == 0) {
    num_prompt_ = ev.num_prompt_tokens;
    num_cached_ = ev.num_cached_tokens;
  }
  c.num_generated = ev.num_generated_tokens;
  if (!ev.tokens.empty()) {
    const auto now = Clock::now();
    if (!ttft_seen_) {
      ttft_seen_ = true;
      st_->metrics.ObserveTtft(Seconds(arrival_, now));
    } else if (c.first_token) {
      st_->metrics.ObserveItl(Seconds(c.last_token, now));
    }
    if (!c.first_token) c.first_token = now;
    c.last_token = now;
  }
  if (setup_.options.logprobs)
    for (const auto& lp : ev.logprobs) c.pending_logprobs.push_back(lp);
  bool stop_matched = false;
  OutputDelta delta = c.pipe->Push(ev.tokens, stop_matched);
  if (stop_matched) {
    st_->ctx.engine.Abort(c.request_id);
    Emit(i, std::move(delta));
    FinishChoice(i, "stop");
    return;
  }
  if (!ev.finished) {
    Emit(i, std::move(delta));
    return;
  }
  if (failed) {
    Fail(ev.error.empty() ? "generation failed" : ev.error);
    return;
  }
  OutputDelta tail = c.pipe->Finish();
  Emit(i, std::move(delta));
  Emit(i, std::move(tail));
  FinishChoice(i, FinishReasonString(ev.finish_reason, c.pipe->saw_tool_calls()));
}

void GenerationJob::OnDisconnect() {
  if (done_) return;
  done_ = true;
  AbortAll();
  st_->metrics.CountAbortedByClient();
  st_->metrics.CountRequest(setup_.endpoint, 499);
}

void GenerationJob::AbortAll() {
  for (const Choice& c : choices_)
    if (c.submitted && !c.released) st_->ctx.engine.Abort(c.request_id);
}

// The engine's final event arrived: the choice holds no engine resources any more.
void GenerationJob::Release(Choice& c) {
  if (c.released) return;
  c.released = true;
  {
    std::lock_guard<std::mutex> lock(st_->mu);
    st_->active.erase(c.request_id);
  }
  st_->in_flight.fetch_sub(1);
  st_->metrics.AddInFlight(-1);
}

// ---- logprobs -------------------------------------------------------------------------------

json GenerationJob::TakeChatLogprobs(Choice& c) {
  if (!setup_.options.logprobs || c.pending_logprobs.empty()) return nullptr;
  json content = json::array();
  for (const auto& lp : c.pending_logprobs) {
    const std::string tok = TokenText(lp.token);
    json top = json::array();
    for (size_t i = 0; i < lp.top.size() && static_cast<int>(i) < setup_.options.top_logprobs; ++i) {
      const std::string t = TokenText(lp.top[i].first);
      top.push_back({{"token", t}, {"logprob", lp.top[i].second}, {"bytes", Bytes(t)}});
    }
    content.push_back({{"token", tok}, {"logprob", lp.logprob}, {"bytes", Bytes(tok)}, {"top_logprobs", top}});
  }
  c.pending_logprobs.clear();
  return {{"content", content}, {"refusal", nullptr}};
}

json GenerationJob::TakeCompletionLogprobs(Choice& c) {
  if (!setup_.options.logprobs || c.pending_logprobs.empty()) return nullptr;
  json tokens = json::array(), token_lps = json::array(), tops = json::array(), offsets = json::array();
  for (const auto& lp : c.pending_logprobs) {
    const std::string tok = TokenText(lp.token);
    tokens.push_back(tok);
    token_lps.push_back(lp.logprob);
    json top = json::object();
    for (size_t i = 0; i < lp.top.size() && static_cast<int>(i) < setup_.options.top_logprobs; ++i)
      top[TokenText(lp.top[i].first)] = lp.top[i].second;
    tops.push_back(top);
    offsets.push_back(c.text_offset);
    c.text_offset += static_cast<int64_t>(tok.size());
  }
  c.pending_logprobs.clear();
  return {{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

std::string GenerationJob::TokenText(int32_t token) const {
  const int32_t one[1] = {token};
  return st_->ctx.text.Decode(one);
}

// ---- output ---------------------------------------------------------------------------------

void GenerationJob::Emit(size_t i, OutputDelta&& d) {
  Choice& c = choices_[i];
  if (!setup_.options.stream) {
    c.content += d.content;
    c.reasoning += d.reasoning;
    parsers::ParsedDelta p;
    p.tool_calls = std::move(d.tool_calls);
    c.tools.Add(p);
    if (setup_.options.logprobs) {
      for (auto& lp : c.pending_logprobs) c.all_logprobs.push_back(std::move(lp));
      c.pending_logprobs.clear();
    }
    return;
  }
  if (!setup_.chat) {
    if (!d.content.empty()) SendCompletionChunk(i, d.content, nullptr);
    return;
  }
  if (!d.reasoning.empty()) SendChunk(i, {{"reasoning_content", d.reasoning}}, nullptr);
  if (!d.content.empty()) SendChunk(i, {{"content", d.content}}, nullptr);
  if (!d.tool_calls.empty()) {
    json calls = json::array();
    for (const auto& call : d.tool_calls) {
      json j = {{"index", call.index}};
      if (!call.id.empty() || !call.name.empty()) {
        j["id"] = call.id;
        j["type"] = "function";
        j["function"] = {{"name", call.name}, {"arguments", call.arguments}};
      } else {
        j["function"] = {{"arguments", call.arguments}};
      }
      calls.push_back(std::move(j));
    }
    SendChunk(i, {{"tool_calls", calls}}, nullptr);
  }
}

json GenerationJob::ChunkBase() const {
  return {{"id", id_},
          {"object", setup_.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created_},
          {"model", st_->model_name}};
}

void GenerationJob::SendChunk(size_t i, json delta, const char* finish_reason) {
  json chunk = ChunkBase();
  chunk["choices"] = json::array({{{"index", i},
                                   {"delta", std::move(delta)},
                                   {"logprobs", TakeChatLogprobs(choices_[i])},
                                   {"finish_reason", finish_reason ? json(finish_reason) : json(nullptr)}}});
  if (setup_.options.include_usage) chunk["usage"] = nullptr;
  Send(chunk);
}

void GenerationJob::SendCompletionChunk(size_t i, const std::string& text, const char* finish_reason) {
  json chunk = ChunkBase();
  chunk["choices"] = json::array({{{"index", i},
                                   {"text", text},
                                   {"logprobs", TakeCompletionLogprobs(choices_[i])},
                                   {"finish_reason", finish_reason ? json(finish_reason) : json(nullptr)}}});
  if (setup_.options.include_usage) chunk["usage"] = nullptr;
  Send(chunk);
}

void GenerationJob::Send(const json& j) { ex_->SendEvent(j.dump(-1, ' ', false, json::error_handler_t::replace)); }

void GenerationJob::ObserveEnd() {
  st_->metrics.ObserveE2e(Seconds(arrival_, Clock::now()));
  const Choice& c = choices_[0];
  if (c.first_token && c.num_generated > 1)
    st_->metrics.ObserveTpot(Seconds(*c.first_token, c.last_token) / (c.num_generated - 1));
}

// Choice i ended: its finish chunk goes out (stream); the request completes with the last one.
void GenerationJob::FinishChoice(size_t i, const std::string& finish_reason) {
  Choice& c = choices_[i];
  c.done = true;
  c.finish_reason = finish_reason;
  if (setup_.options.stream) {
    if (setup_.chat) SendChunk(i, json::object(), finish_reason.c_str());
    else SendCompletionChunk(i, "", finish_reason.c_str());
  }
  for (const Choice& other : choices_)
    if (!other.done) return;
  Complete();
}

void GenerationJob::Complete() {
  done_ = true;
  ObserveEnd();
  st_->metrics.CountRequest(setup_.endpoint, 200);
  int generated = 0;
  for (const Choice& c : choices_) generated += c.num_generated;
  const json usage = UsageJson(num_prompt_, generated, num_cached_);
  if (setup_.options.stream) {
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
  json body = ChunkBase();
  json out = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice& c = choices_[i];
    c.pending_logprobs = std::move(c.all_logprobs);
    if (setup_.chat) {
      json message = {{"role", "assistant"}};
      message["content"] = (c.content.empty() && !c.tools.calls.empty()) ? json(nullptr) : json(c.content);
      if (!c.reasoning.empty()) message["reasoning_content"] = c.reasoning;
      if (!c.tools.calls.empty()) {
        json calls = json::array();
        for (const auto& call : c.tools.calls)
          calls.push_back({{"id", call.id}, {"type", "function"},
                           {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
        message["tool_calls"] = calls;
      }
      out.push_back({{"index", i}, {"message", message}, {"logprobs", TakeChatLogprobs(c)},
                     {"finish_reason", c.finish_reason}});
    } else {
      out.push_back({{"index", i}, {"text", setup_.echo_text + c.content}, {"logprobs", TakeCompletionLogprobs(c)},
                     {"finish_reason", c.finish_reason}});
    }
  }
  if (setup_.chat) body["object"] = "chat.completion";
  body["choices"] = std::move(out);
  body["usage"] = usage;
  ex_->Respond(200, "application/json", body.dump(-1, ' ', false, json::error_handler_t::replace));
}

void GenerationJob::Fail(const std::string& message) {
  done_ = true;
  AbortAll();
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

}  // namespace pg::server
