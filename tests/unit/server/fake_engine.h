// Test doubles for the protocol tests of the server (never used outside tests):
//  * ByteTextModel: one token per byte (ids 0..255) plus special tokens; the incremental
//    detokenizer holds back incomplete UTF-8 sequences like a real one.
//  * ScriptEngine: a deterministic engine loop on its own thread. A request's output is the
//    text after "SAY:" in its prompt (up to the end of the prompt line), one token per tick,
//    then EOS. It keeps a fake page pool (one page per 16 tokens held while running) so tests
//    can check that aborted requests give their pages back, and reports a fake prefix cache
//    (longest common prefix with earlier prompts of the same session, in whole pages).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "core/status.h"
#include "engine/api.h"
#include "server/text_model.h"

namespace pg::server::testing {

constexpr int32_t kEos = 256;
constexpr int32_t kVocab = 300;

class ByteDetokenizer : public IncrementalDetokenizer {
 public:
  std::string Push(std::span<const int32_t> tokens) override {
    for (int32_t t : tokens) pending_ += t == kEos ? std::string("<|eos|>") : std::string(1, static_cast<char>(t));
    // Emit up to the last complete UTF-8 sequence.
    size_t end = pending_.size();
    size_t i = end;
    int back = 0;
    while (i > 0 && back < 4) {
      --i;
      ++back;
      const unsigned char c = pending_[i];
      if ((c & 0xC0) != 0x80) {  // lead byte (or ASCII)
        const int need = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
        if (back < need) end = i;
        break;
      }
    }
    std::string out = pending_.substr(0, end);
    pending_.erase(0, end);
    return out;
  }
  std::string Flush() override {
    std::string out;
    out.swap(pending_);
    return out;
  }

 private:
  std::string pending_;
};

class ByteTextModel : public TextModel {
 public:
  ChatFeatures features;
  std::vector<int32_t> Encode(std::string_view text, bool, bool) const override {
    std::vector<int32_t> out;
    for (unsigned char c : text) out.push_back(c);
    return out;
  }
  std::string Decode(std::span<const int32_t> tokens) const override {
    ByteDetokenizer d;
    std::string s = d.Push(tokens);
    return s + d.Flush();
  }
  std::unique_ptr<IncrementalDetokenizer> NewDetokenizer() const override {
    return std::make_unique<ByteDetokenizer>();
  }
  std::string RenderChat(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools) const override {
    std::string out;
    if (!tools.is_null()) out += "<tools>" + tools.dump() + "</tools>\n";
    for (const auto& m : messages) {
      out += "<" + m["role"].get<std::string>() + ">";
      if (m["content"].is_string()) out += m["content"].get<std::string>();
      if (m.contains("tool_calls")) out += m["tool_calls"].dump();
      out += "\n";
    }
    return out + "<assistant>";
  }
  ChatFeatures chat_features() const override { return features; }
  // JSON mode: off (null, as a model without a tokenizer) unless a test turns it on; then each
  // byte id is its byte, the ids from kEos up special.
  bool json_mode = false;
  std::shared_ptr<const runtime::TokenTable> token_table(std::span<const int32_t> eos_ids) const override {
    if (!json_mode) return nullptr;
    std::vector<std::string> bytes(kVocab);
    std::vector<uint8_t> special(kVocab, 1);
    for (int i = 0; i < kEos; ++i) bytes[size_t(i)] = std::string(1, char(i)), special[size_t(i)] = 0;
    return std::make_shared<const runtime::TokenTable>(runtime::TokenTable::Make(
        std::move(bytes), std::move(special), std::vector<int32_t>(eos_ids.begin(), eos_ids.end())));
  }
};

struct ScriptEngineOptions {
  std::chrono::microseconds tick{500};  // time per generated token
  int max_context_tokens = 4096;
  int max_waiting = 1000;                // Submit throws kResourceExhausted beyond
  int64_t kv_pages_total = 100000;
  int max_running = 1000;                // requests beyond wait
};

class ScriptEngine : public engine::Engine {
 public:
  explicit ScriptEngine(ScriptEngineOptions o = {}) : opt_(o) {
    info_.name = "script-model";
    info_.max_context_tokens = o.max_context_tokens;
    info_.vocab_size = kVocab;
    info_.eos_token_ids = {kEos};
    loop_ = std::thread([this] { Loop(); });
  }
  ~ScriptEngine() override { Shutdown(false); }

  engine::RequestId Submit(engine::Request request, engine::EventCallback cb) override {
    std::lock_guard<std::mutex> lock(mu_);
    PG_ENSURE(!stopping_, kResourceExhausted, "engine is shutting down");
    PG_ENSURE(static_cast<int>(request.prompt_tokens.size()) < opt_.max_context_tokens, kOutOfRange,
              "prompt of {} tokens exceeds the context", request.prompt_tokens.size());
    PG_ENSURE(static_cast<int>(waiting_.size()) < opt_.max_waiting, kResourceExhausted, "queue full");
    Req r;
    r.id = next_id_++;
    r.cb = std::move(cb);
    r.sampling = request.sampling;
    last_sampling_ = request.sampling;
    seeds_.push_back(request.sampling.seed.value_or(0));
    const std::string prompt(request.prompt_tokens.begin(), request.prompt_tokens.end());
    last_prompt_ = prompt;
    const size_t say = prompt.rfind("SAY:");
    std::string script = say == std::string::npos ? "ok" : prompt.substr(say + 4);
    script = script.substr(0, script.find('\n'));
    for (unsigned char c : script) r.script.push_back(c);
    r.num_prompt = static_cast<int>(request.prompt_tokens.size());
    // Fake prefix cache: longest common prefix with an earlier prompt, whole 16-token pages.
    size_t best = 0;
    for (const auto& p : history_) {
      size_t n = 0;
      while (n < p.size() && n < request.prompt_tokens.size() && p[n] == request.prompt_tokens[n]) ++n;
      best = std::max(best, n);
    }
    r.num_cached = static_cast<int>(best / 16 * 16);
    history_.push_back(request.prompt_tokens);
    stats_.prompt_tokens += r.num_prompt;
    stats_.prefix_cache_hit_tokens += r.num_cached;
    ++num_submitted_;
    waiting_.push_back(std::move(r));
    cv_.notify_all();
    return waiting_.back().id;
  }

  void Abort(engine::RequestId id) override {
    std::lock_guard<std::mutex> lock(mu_);
    aborts_.push_back(id);
    ++num_abort_calls_;
    cv_.notify_all();
  }

  engine::EngineStats Stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    engine::EngineStats s = stats_;
    s.num_running = static_cast<int>(running_.size());
    s.num_waiting = static_cast<int>(waiting_.size());
    s.kv_pages_total = opt_.kv_pages_total;
    int64_t used = 0;
    for (const auto& r : running_) used += (r.num_prompt + r.emitted + 15) / 16;
    s.kv_pages_free = opt_.kv_pages_total - used;
    return s;
  }
  const engine::ModelInfo& model_info() const override { return info_; }

  void Shutdown(bool drain) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_ && !loop_.joinable()) return;
      stopping_ = true;
      drain_ = drain;
      cv_.notify_all();
    }
    if (loop_.joinable()) loop_.join();
  }

  engine::SamplingParams last_sampling() const { std::lock_guard<std::mutex> l(mu_); return last_sampling_; }
  std::string last_prompt() const { std::lock_guard<std::mutex> l(mu_); return last_prompt_; }  // byte ids
  int num_abort_calls() const { std::lock_guard<std::mutex> l(mu_); return num_abort_calls_; }
  int num_submitted() const { std::lock_guard<std::mutex> l(mu_); return num_submitted_; }
  std::vector<uint64_t> seeds() const { std::lock_guard<std::mutex> l(mu_); return seeds_; }  // in submit order, 0: none
  int num_aborted_final() const { std::lock_guard<std::mutex> l(mu_); return num_aborted_final_; }
  void set_pause(bool p) { std::lock_guard<std::mutex> l(mu_); paused_ = p; cv_.notify_all(); }

 private:
  engine::SamplingParams last_sampling_;
  std::vector<uint64_t> seeds_;
  std::string last_prompt_;
  struct Req {
    engine::RequestId id;
    engine::EventCallback cb;
    engine::SamplingParams sampling;
    std::vector<int32_t> script;
    int num_prompt = 0, num_cached = 0, emitted = 0;
  };

  static void Finish(Req& r, engine::FinishReason why, std::vector<int32_t> tokens = {}) {
    engine::TokenEvent ev;
    ev.id = r.id;
    ev.tokens = std::move(tokens);
    ev.finished = true;
    ev.finish_reason = why;
    ev.num_prompt_tokens = r.num_prompt;
    ev.num_cached_tokens = r.num_cached;
    ev.num_generated_tokens = r.emitted;
    r.cb(ev);
  }

  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait_for(lock, opt_.tick, [&] { return stopping_ || !aborts_.empty(); });
      // Aborts first: a request aborted anywhere gets exactly one final event.
      for (auto id : aborts_) {
        for (auto* q : {&waiting_, &running_}) {
          for (auto it = q->begin(); it != q->end(); ++it) {
            if (it->id == id) {
              Req r = std::move(*it);
              q->erase(it);
              ++num_aborted_final_;
              Finish(r, engine::FinishReason::kAbort);
              break;
            }
          }
        }
      }
      aborts_.clear();
      if (stopping_) {
        for (auto* q : {&waiting_, &running_})
          for (auto& r : *q) Finish(r, engine::FinishReason::kAbort);
        waiting_.clear();
        running_.clear();
        return;
      }
      if (paused_) continue;
      while (!waiting_.empty() && static_cast<int>(running_.size()) < opt_.max_running) {
        running_.push_back(std::move(waiting_.front()));
        waiting_.pop_front();
      }
      for (auto it = running_.begin(); it != running_.end();) {
        Req& r = *it;
        const bool script_done = r.emitted >= static_cast<int>(r.script.size());
        const int32_t tok = script_done ? (r.sampling.ignore_eos ? 'x' : kEos) : r.script[r.emitted];
        ++r.emitted;
        ++stats_.generated_tokens;
        engine::TokenEvent ev;
        ev.id = r.id;
        ev.tokens = {tok};
        if (r.sampling.top_logprobs >= 0) {
          engine::TokenLogprob lp{tok, -0.25f, {}};
          for (int k = 0; k < r.sampling.top_logprobs; ++k) lp.top.push_back({tok + k, -0.25f - k});
          ev.logprobs.push_back(lp);
        }
        ev.num_prompt_tokens = r.num_prompt;
        ev.num_cached_tokens = r.num_cached;
        ev.num_generated_tokens = r.emitted;
        const bool eos = tok == kEos;
        const bool length = r.emitted >= r.sampling.max_tokens;
        if (eos || length) {
          ev.finished = true;
          ev.finish_reason = eos ? engine::FinishReason::kStop : engine::FinishReason::kLength;
          r.cb(ev);
          it = running_.erase(it);
        } else {
          r.cb(ev);
          ++it;
        }
      }
    }
  }

  ScriptEngineOptions opt_;
  engine::ModelInfo info_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Req> waiting_;
  std::deque<Req> running_;
  std::vector<engine::RequestId> aborts_;
  std::vector<std::vector<int32_t>> history_;
  engine::EngineStats stats_;
  engine::RequestId next_id_ = 1;
  bool stopping_ = false, drain_ = false, paused_ = false;
  int num_abort_calls_ = 0, num_submitted_ = 0, num_aborted_final_ = 0;
  std::thread loop_;
};

}  // namespace pg::server::testing
