// server_overhead_bench: what the HTTP server adds on top of the engine (issue 4, Evidence).
//
// One process holds one LocalEngine on the model and an OpenAI server in front of it on
// loopback. The same chat prompt (rendered and tokenized exactly as the server does) is sent,
// rep after rep, alternately
//   (a) straight to the engine: Submit() -> token callbacks, on this thread's clock; and
//   (b) through HTTP: POST /v1/chat/completions (stream) from a Beast client in this process.
// Both run after a warm-up that puts the whole prompt in the prefix cache, so TTFT is one
// forward pass over the last prompt token in both. Interleaving (a) and (b) makes both see the
// same machine load (the dev machine is shared).
//
// The engine handed to the server is wrapped (TracedEngine) so every engine event of an HTTP
// request is time-stamped on the engine thread. All clocks are one steady_clock, so per request
//   ingress_us   client send          -> engine Submit()    (HTTP parse, template, tokenize)
//   engine_ttft  engine Submit()      -> first token event  (the engine's own TTFT)
//   egress_us[i] engine token event i -> SSE chunk i read by the client (strand post, detok,
//                JSON, socket, client parse)
// and the overheads reported are
//   added TTFT        = median HTTP TTFT - median direct TTFT (and ingress + egress[0], paired)
//   per streamed token = median egress[i] for i >= 1, and SSE gap - engine gap.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <random>
#include <nlohmann/json.hpp>

#include "bench/http_client.h"
#include "bench/metrics.h"
#include "bench/sse.h"
#include "core/log.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/local_engine.h"
#include "engine/model_bundle.h"
#include "server/server.h"
#include "server/tokenizer_text_model.h"

namespace pg::tools {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double UsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

struct Flags {
  std::string model = "embedded";
  int threads = 2;
  int reps = 20;
  int prompt_tokens = 400;   // target length of the rendered chat prompt
  int max_tokens = 32;       // generated per request (ignore_eos)
  int io_threads = 2;
  std::string output_json;
};

// Engine events of one request, time-stamped on the engine thread.
struct Trace {
  Clock::time_point submit;
  std::vector<Clock::time_point> token_events;  // one entry per generated token
  std::vector<int32_t> prompt_tokens;
  int num_cached_tokens = -1;
  bool finished = false;
  std::string finish_reason;
};

// Forwards to an inner engine and records a Trace per request (the server sees no difference).
class TracedEngine final : public engine::Engine {
 public:
  explicit TracedEngine(engine::Engine& inner) : inner_(inner) {}

  engine::RequestId Submit(engine::Request request, engine::EventCallback on_event) override {
    auto trace = std::make_shared<Trace>();
    trace->prompt_tokens = request.prompt_tokens;
    {
      std::lock_guard<std::mutex> lock(mu_);
      traces_.push_back(trace);
    }
    trace->submit = Clock::now();
    return inner_.Submit(std::move(request), [this, trace, cb = std::move(on_event)](
                                                 const engine::TokenEvent& ev) {
      const auto now = Clock::now();
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (size_t i = 0; i < ev.tokens.size(); ++i) trace->token_events.push_back(now);
        trace->num_cached_tokens = ev.num_cached_tokens;
        if (ev.finished) {
          trace->finished = true;
          trace->finish_reason = engine::FinishReasonName(ev.finish_reason);
        }
      }
      cb(ev);
      if (ev.finished) cv_.notify_all();
    });
  }
  void Abort(engine::RequestId id) override { inner_.Abort(id); }
  engine::EngineStats Stats() const override { return inner_.Stats(); }
  const engine::ModelInfo& model_info() const override { return inner_.model_info(); }
  void Shutdown(bool drain) override { inner_.Shutdown(drain); }

  // The trace of the most recent Submit, once its final event has been recorded.
  Trace WaitLast() {
    std::unique_lock<std::mutex> lock(mu_);
    PG_CHECK(!traces_.empty());
    std::shared_ptr<Trace> t = traces_.back();
    cv_.wait(lock, [&] { return t->finished; });
    return *t;
  }

 private:
  engine::Engine& inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<Trace>> traces_;
};

// Deterministic agent-like text (identifiers, numbers, punctuation) of at least `target`
// tokens whose rendered prompt has length = 1 (mod page_size): every full page is reusable from
// the prefix cache and only the last token (needed for logits) is recomputed: "fully cached".
json MakeMessages(const server::TextModel& text, int target, int page_size) {
  static const char* kWords[] = {"def",    "return", "self",  "config", "path",   "error", "value",
                                 "import", "async",  "await", "tensor", "cache",  "page",  "token",
                                 "assert", "None",   "->",    "(",      ")",      ":",     "==",
                                 "fixture", "pytest", "line", "failed", "passed", "{",     "}"};
  std::mt19937_64 rng(20261130);
  std::string body = "Explain what this log shows:\n";
  json messages;
  for (;;) {
    for (int i = 0; i < 40; ++i) {
      body += kWords[rng() % std::size(kWords)];
      body += (rng() % 9 == 0) ? "\n" : " ";
      if (rng() % 11 == 0) body += std::to_string(rng() % 10000) + " ";
    }
    messages = json::array({{{"role", "system"}, {"content", "You are a coding agent."}},
                            {{"role", "user"}, {"content", body}}});
    if (int(text.Encode(text.RenderChat(messages, nullptr), true, true).size()) >= target) break;
  }
  for (int tries = 0; tries < 4 * page_size; ++tries) {
    messages[1]["content"] = body;
    size_t n = text.Encode(text.RenderChat(messages, nullptr), true, true).size();
    if (n % size_t(page_size) == 1) return messages;
    body += kWords[rng() % std::size(kWords)];
    body += " ";
  }
  PG_LOG_WARN("no prompt of length 1 mod {} found; the prefix cache will miss a partial page",
              page_size);
  return messages;
}

struct DirectRun {
  double ttft_us = 0;
  std::vector<double> gaps_us;  // between consecutive token events
  int num_cached = -1;
};

DirectRun RunDirect(TracedEngine& engine, const std::vector<int32_t>& prompt, int max_tokens) {
  engine::Request r;
  r.prompt_tokens = prompt;
  r.sampling.temperature = 0.0f;
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  engine.Submit(std::move(r), [](const engine::TokenEvent&) {});
  Trace t = engine.WaitLast();
  PG_ENSURE(t.finish_reason == "length" && int(t.token_events.size()) == max_tokens, kInternal,
            "direct request ended with {} after {} tokens", t.finish_reason, t.token_events.size());
  DirectRun out;
  out.ttft_us = UsBetween(t.submit, t.token_events[0]);
  for (size_t i = 1; i < t.token_events.size(); ++i)
    out.gaps_us.push_back(UsBetween(t.token_events[i - 1], t.token_events[i]));
  out.num_cached = t.num_cached_tokens;
  return out;
}

struct HttpRun {
  double ttft_us = 0;           // client send -> first content chunk
  double ingress_us = 0;        // client send -> engine Submit
  double engine_ttft_us = 0;    // engine Submit -> first token event
  std::vector<double> egress_us;  // token event i -> its content chunk read by the client
  std::vector<double> sse_gaps_us, engine_gaps_us;
  int num_cached = -1;
  bool paired = false;          // content chunks matched token events one to one
};

HttpRun RunHttp(bench::HttpClient& client, TracedEngine& engine, const json& messages,
                int max_tokens, const std::vector<int32_t>& expected_prompt) {
  json body = {{"messages", messages}, {"stream", true}, {"max_tokens", max_tokens},
               {"temperature", 0.0},   {"ignore_eos", true}};
  const std::string payload = body.dump();
  bench::SseParser parser;
  std::vector<bench::SseEvent> events;
  std::vector<Clock::time_point> content_times;
  bool done = false;
  const Clock::time_point send = Clock::now();
  std::string err;
  int status = client.PostStream("/v1/chat/completions", payload, [&](std::string_view bytes) {
    const auto now = Clock::now();
    events.clear();
    parser.Feed(bytes, &events);
    for (const auto& e : events) {
      if (e.data == "[DONE]") { done = true; continue; }
      json chunk = json::parse(e.data, nullptr, false);
      if (!chunk.is_object() || !chunk.contains("choices") || chunk["choices"].empty()) continue;
      const json& d = chunk["choices"][0]["delta"];
      if (d.is_object() && d.contains("content") && d["content"].is_string() &&
          !d["content"].get_ref<const std::string&>().empty())
        content_times.push_back(now);
    }
  }, &err);
  PG_ENSURE(status == 200 && done && !content_times.empty(), kInternal,
            "HTTP request failed: status {} done {} body {}", status, done, err);
  Trace t = engine.WaitLast();
  PG_ENSURE(t.prompt_tokens == expected_prompt, kInternal,
            "the server tokenized the prompt differently ({} vs {} tokens)", t.prompt_tokens.size(),
            expected_prompt.size());
  HttpRun out;
  out.ttft_us = UsBetween(send, content_times[0]);
  out.ingress_us = UsBetween(send, t.submit);
  out.engine_ttft_us = UsBetween(t.submit, t.token_events[0]);
  out.num_cached = t.num_cached_tokens;
  for (size_t i = 1; i < content_times.size(); ++i)
    out.sse_gaps_us.push_back(UsBetween(content_times[i - 1], content_times[i]));
  for (size_t i = 1; i < t.token_events.size(); ++i)
    out.engine_gaps_us.push_back(UsBetween(t.token_events[i - 1], t.token_events[i]));
  // One content chunk per token unless the detokenizer held bytes of a split UTF-8 sequence;
  // pair them only when the counts agree.
  out.paired = content_times.size() == t.token_events.size();
  if (out.paired)
    for (size_t i = 0; i < content_times.size(); ++i)
      out.egress_us.push_back(UsBetween(t.token_events[i], content_times[i]));
  return out;
}

json StatsJson(const bench::Stats& s) {
  return {{"n", s.count}, {"min", s.min}, {"p50", s.p50}, {"mean", s.mean}, {"p95", s.p95},
          {"max", s.max}};
}

void Row(const char* name, const bench::Stats& s) {
  std::printf("  %-38s n=%5zu  min %9.1f  p50 %9.1f  mean %9.1f  p95 %9.1f us\n", name, s.count,
              s.min, s.p50, s.mean, s.p95);
}

int Run(const Flags& f) {
  ThreadPool::SetDefaultThreads(f.threads);
  engine::BundleOptions bo;
  bo.model = f.model;
  bo.progress_bar = false;
  engine::ModelBundle b = engine::LoadBundle(bo);
  PG_ENSURE(b.tokenizer != nullptr && b.chat_template != nullptr, kUnsupported,
            "{}: needs a tokenizer and a chat template", b.path);
  const engine::EngineConfig engine_config;
  engine::LocalEngine local(*b.model, b.eos_ids, b.name(), engine_config);
  TracedEngine engine(local);
  server::TokenizerTextModel text(*b.tokenizer, b.chat_template.get(), b.chat_template_source);

  const json messages = MakeMessages(text, f.prompt_tokens, engine_config.page_size);
  // Exactly what the server submits for this chat request (generation_job.cpp).
  const std::vector<int32_t> prompt = text.Encode(text.RenderChat(messages, nullptr), true, true);

  server::ServerConfig sc;
  sc.http.port = 0;
  sc.http.num_io_threads = f.io_threads;
  server::ServerContext ctx{engine, text};
  server::Server srv(sc, ctx);
  srv.Start();
  bench::HttpClient client(bench::HttpClientParams{
      bench::ParseUrl("http://127.0.0.1:" + std::to_string(srv.port())), 600.0, ""});
  PG_LOG_INFO("prompt {} tokens, {} generated per request, {} reps, server on port {}",
              prompt.size(), f.max_tokens, f.reps, srv.port());

  // Warm-up: fills the prefix cache (direct) and the server's code paths (HTTP).
  RunDirect(engine, prompt, f.max_tokens);
  RunHttp(client, engine, messages, f.max_tokens, prompt);

  std::vector<double> d_ttft, d_gap, h_ttft, h_ingress, h_engine_ttft, h_egress0, h_egress,
      h_sse_gap, h_engine_gap, d_cached, h_cached;
  int unpaired = 0;
  for (int rep = 0; rep < f.reps; ++rep) {
    DirectRun d = RunDirect(engine, prompt, f.max_tokens);
    d_ttft.push_back(d.ttft_us);
    d_gap.insert(d_gap.end(), d.gaps_us.begin(), d.gaps_us.end());
    d_cached.push_back(d.num_cached);
    HttpRun h = RunHttp(client, engine, messages, f.max_tokens, prompt);
    h_ttft.push_back(h.ttft_us);
    h_ingress.push_back(h.ingress_us);
    h_engine_ttft.push_back(h.engine_ttft_us);
    h_sse_gap.insert(h_sse_gap.end(), h.sse_gaps_us.begin(), h.sse_gaps_us.end());
    h_engine_gap.insert(h_engine_gap.end(), h.engine_gaps_us.begin(), h.engine_gaps_us.end());
    h_cached.push_back(h.num_cached);
    if (h.paired) {
      h_egress0.push_back(h.egress_us[0]);
      h_egress.insert(h_egress.end(), h.egress_us.begin() + 1, h.egress_us.end());
    } else {
      ++unpaired;
    }
  }
  srv.Drain();
  local.Shutdown(/*drain=*/true);

  const auto s = [](const std::vector<double>& v) { return bench::Summarize(v); };
  std::vector<double> paired_first;  // ingress + egress[0] of the same request
  for (size_t i = 0, j = 0; i < h_ingress.size() && j < h_egress0.size(); ++i, ++j)
    paired_first.push_back(h_ingress[i] + h_egress0[j]);
  std::printf("prompt %zu tokens (cached %g of them direct, %g via HTTP), %d tokens out, %d reps\n",
              prompt.size(), s(d_cached).p50, s(h_cached).p50, f.max_tokens, f.reps);
  std::printf("time to first token (fully cached prompt):\n");
  Row("direct: Submit -> first token event", s(d_ttft));
  Row("HTTP: send -> first content chunk", s(h_ttft));
  Row("HTTP: send -> engine Submit (ingress)", s(h_ingress));
  Row("HTTP: engine Submit -> first token", s(h_engine_ttft));
  Row("HTTP: first token event -> chunk read", s(h_egress0));
  std::printf("  added TTFT: median %.1f us, min %.1f us (HTTP - direct)\n",
              s(h_ttft).p50 - s(d_ttft).p50, s(h_ttft).min - s(d_ttft).min);
  std::printf("per streamed token:\n");
  Row("direct: engine event gap", s(d_gap));
  Row("HTTP: engine event gap", s(h_engine_gap));
  Row("HTTP: SSE content chunk gap", s(h_sse_gap));
  Row("HTTP: token event -> chunk read (i>=1)", s(h_egress));
  std::printf("  unpaired requests (chunk count != token count): %d\n", unpaired);

  if (!f.output_json.empty()) {
    json out = {
        {"benchmark", "server_overhead"},
        {"prompt_tokens", prompt.size()},
        {"max_tokens", f.max_tokens},
        {"reps", f.reps},
        {"threads", f.threads},
        {"io_threads", f.io_threads},
        {"direct_ttft_us", StatsJson(s(d_ttft))},
        {"http_ttft_us", StatsJson(s(h_ttft))},
        {"http_ingress_us", StatsJson(s(h_ingress))},
        {"http_engine_ttft_us", StatsJson(s(h_engine_ttft))},
        {"http_first_egress_us", StatsJson(s(h_egress0))},
        {"http_ingress_plus_first_egress_us", StatsJson(s(paired_first))},
        {"direct_gap_us", StatsJson(s(d_gap))},
        {"http_engine_gap_us", StatsJson(s(h_engine_gap))},
        {"http_sse_gap_us", StatsJson(s(h_sse_gap))},
        {"http_egress_us", StatsJson(s(h_egress))},
        {"unpaired_requests", unpaired},
    };
    std::ofstream(f.output_json) << out.dump(1) << "\n";
  }
  return 0;
}

}  // namespace
}  // namespace pg::tools

int main(int argc, char** argv) {
  pg::tools::Flags f;
  CLI::App app{"Server overhead: HTTP/SSE versus calling the engine directly, in one process"};
  app.add_option("-m,--model", f.model, "GGUF file or 'embedded'");
  app.add_option("-t,--threads", f.threads, "compute threads")->check(CLI::PositiveNumber);
  app.add_option("--reps", f.reps, "measured requests of each kind")->check(CLI::PositiveNumber);
  app.add_option("--prompt-tokens", f.prompt_tokens, "rendered prompt length (at least)")
      ->check(CLI::PositiveNumber);
  app.add_option("--max-tokens", f.max_tokens, "tokens generated per request")
      ->check(CLI::Range(2, 4096));
  app.add_option("--io-threads", f.io_threads, "server I/O threads")->check(CLI::PositiveNumber);
  app.add_option("-o,--output", f.output_json, "JSON file of the summary");
  CLI11_PARSE(app, argc, argv);
  try {
    return pg::tools::Run(f);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "server_overhead_bench: %s\n", e.what());
    return 1;
  }
}
