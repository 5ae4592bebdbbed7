#include "bench/replay.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "core/log.h"
#include "core/status.h"

namespace pg::bench {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {
double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
}  // namespace

json BuildChatRequest(const ReplayParams& params, const json& messages) {
  json req = {
      {"messages", messages},
      {"stream", true},
      {"stream_options", {{"include_usage", true}}},
      {"max_tokens", params.max_tokens},
      {"temperature", 0.0},
  };
  if (!params.model.empty()) req["model"] = params.model;
  if (params.ignore_eos) req["ignore_eos"] = true;
  for (const auto& [key, value] : params.extra_body.items()) req[key] = value;
  return req;
}

void ChatStreamAccumulator::OnBytes(std::string_view bytes, double now_ms) {
  events_.clear();
  parser_.Feed(bytes, &events_);
  for (const SseEvent& e : events_) OnEvent(e, now_ms);
}

void ChatStreamAccumulator::OnEvent(const SseEvent& event, double now_ms) {
  if (event.data == "[DONE]") {
    done_ = true;
    return;
  }
  json chunk = json::parse(event.data, nullptr, false);
  if (chunk.is_discarded() || !chunk.is_object()) {
    if (error_.empty()) error_ = "stream chunk is not a JSON object: " + event.data.substr(0, 120);
    return;
  }
  if (chunk.contains("error")) {
    const json& err = chunk["error"];
    error_ = err.is_object() && err.contains("message") && err["message"].is_string()
                 ? err["message"].get<std::string>()
                 : err.dump();
    return;
  }
  if (chunk.contains("usage") && chunk["usage"].is_object()) usage_ = chunk["usage"];
  if (chunk.contains("timings") && chunk["timings"].is_object()) {
    const json& t = chunk["timings"];
    if (t.contains("cache_n") && t["cache_n"].is_number_integer()) {
      llama_cache_n_ = t["cache_n"].get<int64_t>();
    }
  }
  if (!chunk.contains("choices") || !chunk["choices"].is_array() || chunk["choices"].empty()) {
    return;
  }
  if (first_choice_ms_ < 0) first_choice_ms_ = now_ms;
  const json& choice = chunk["choices"][0];
  bool has_content = false;
  bool has_output = false;  // content, reasoning or a tool-call delta: a generated token
  if (choice.contains("delta") && choice["delta"].is_object()) {
    const json& delta = choice["delta"];
    for (const char* field : {"content", "reasoning_content", "reasoning"}) {
      if (delta.contains(field) && delta[field].is_string() &&
          !delta[field].get_ref<const std::string&>().empty()) {
        has_content = true;
        if (std::string_view(field) == "content") reply_ += delta[field].get<std::string>();
      }
    }
    has_output = has_content || (delta.contains("tool_calls") && delta["tool_calls"].is_array() &&
                                 !delta["tool_calls"].empty());
  }
  if (has_output && first_output_ms_ < 0) first_output_ms_ = now_ms;
  if (has_content) {
    if (last_content_ms_ >= 0) itl_ms_.push_back(now_ms - last_content_ms_);
    last_content_ms_ = now_ms;
    ++num_content_chunks_;
  }
  if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) {
    finish_reason_ = choice["finish_reason"].get<std::string>();
  }
}

void ChatStreamAccumulator::Finish(double now_ms, RequestRecord* r) {
  events_.clear();
  parser_.Finish(&events_);
  for (const SseEvent& e : events_) OnEvent(e, now_ms);
  r->latency_ms = now_ms;
  // TTFT is the first generated output, not a role-only opening chunk that a server may send
  // before prefill (ours does; vLLM and llama-server send the role with the first token).
  // A stream with no output at all (0 tokens) falls back to its first chunk with choices.
  r->first_chunk_ms = first_choice_ms_;
  r->ttft_ms = first_output_ms_ >= 0 ? first_output_ms_ : first_choice_ms_;
  r->itl_ms = std::move(itl_ms_);
  r->finish_reason = finish_reason_;
  r->completion_tokens = num_content_chunks_;
  r->completion_tokens_from_usage = false;
  if (usage_.is_object()) {
    if (usage_.contains("completion_tokens") && usage_["completion_tokens"].is_number_integer()) {
      r->completion_tokens = usage_["completion_tokens"].get<int64_t>();
      r->completion_tokens_from_usage = true;
    }
    if (usage_.contains("prompt_tokens") && usage_["prompt_tokens"].is_number_integer()) {
      r->prompt_tokens = usage_["prompt_tokens"].get<int64_t>();
      r->prompt_tokens_from_usage = true;
    }
    if (usage_.contains("prompt_tokens_details") && usage_["prompt_tokens_details"].is_object()) {
      const json& d = usage_["prompt_tokens_details"];
      if (d.contains("cached_tokens") && d["cached_tokens"].is_number_integer()) {
        r->cached_tokens = d["cached_tokens"].get<int64_t>();
      }
    }
  }
  if (!r->cached_tokens && llama_cache_n_) r->cached_tokens = llama_cache_n_;
  if (!r->prompt_tokens_from_usage) r->prompt_tokens = std::max<int64_t>(0, r->expected_prompt_tokens);
  if (!error_.empty()) {
    r->success = false;
    r->error = error_;
  } else if (first_choice_ms_ < 0) {
    r->success = false;
    r->error = "stream ended without any chunk carrying choices";
  } else if (!done_ && finish_reason_.empty()) {
    r->success = false;
    r->error = "stream ended before [DONE] or a finish_reason";
  } else {
    r->success = true;
  }
}

std::string RunChatRequest(HttpClient& client, const ReplayParams& params, const json& messages,
                           RequestRecord* record, Clock::time_point level_start) {
  const std::string body =
      BuildChatRequest(params, messages).dump(-1, ' ', false, json::error_handler_t::replace);
  ChatStreamAccumulator acc;
  const Clock::time_point t0 = Clock::now();
  record->start_s = std::chrono::duration<double>(t0 - level_start).count();
  try {
    std::string error_body;
    const int status = client.PostStream(
        params.chat_path, body, [&](std::string_view bytes) { acc.OnBytes(bytes, MsSince(t0)); },
        &error_body);
    if (status < 200 || status >= 300) {
      record->success = false;
      record->latency_ms = MsSince(t0);
      record->error = fmt::format("HTTP {}: {}", status, error_body.substr(0, 300));
      return {};
    }
  } catch (const Error& e) {
    record->success = false;
    record->latency_ms = MsSince(t0);
    record->error = e.what();
    return {};
  }
  acc.Finish(MsSince(t0), record);
  return record->success ? acc.reply_text() : std::string();
}

LevelResult RunLevel(const ReplayParams& params, const LevelPlan& plan, ProgressBar* progress) {
  PG_CHECK(plan.concurrency >= 1);
  const int num_workers =
      std::min<int>(plan.concurrency, static_cast<int>(plan.conversations.size()));
  std::atomic<size_t> next_conversation{0};
  std::mutex records_mu;
  LevelResult result;
  const Clock::time_point level_start = Clock::now();

  auto worker = [&]() {
    HttpClient client(params.client);
    std::vector<RequestRecord> mine;
    for (;;) {
      const size_t c = next_conversation.fetch_add(1);
      if (c >= plan.conversations.size()) break;
      const Conversation& conv = plan.conversations[c];
      const int num_turns = plan.max_turns > 0
                                ? std::min<int>(plan.max_turns, static_cast<int>(conv.turns.size()))
                                : static_cast<int>(conv.turns.size());
      json context = json::array();
      for (int t = 0; t < num_turns; ++t) {
        for (const ChatMessage& m : conv.turns[t].messages) {
          context.push_back({{"role", m.role}, {"content", m.content}});
        }
        RequestRecord r;
        r.concurrency = plan.concurrency;
        r.conversation = plan.first_conversation_index + static_cast<int>(c);
        r.turn = t;
        r.warmup = plan.warmup;
        r.expected_prompt_tokens = conv.turns[t].prompt_tokens;
        std::string reply = RunChatRequest(client, params, context, &r, level_start);
        const bool ok = r.success;
        if (!ok) {
          PG_LOG_DEBUG("conversation {} turn {} failed: {}", r.conversation, t, r.error);
        }
        mine.push_back(std::move(r));
        if (progress) progress->Advance(ok ? 1 : num_turns - t, ok ? 0 : 1);
        if (!ok) break;  // the conversation is abandoned, as evalscope does
        context.push_back({{"role", "assistant"}, {"content", std::move(reply)}});
      }
    }
    std::lock_guard lock(records_mu);
    for (RequestRecord& r : mine) result.records.push_back(std::move(r));
  };

  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(num_workers));
  for (int w = 0; w < num_workers; ++w) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
  result.wall_s = std::chrono::duration<double>(Clock::now() - level_start).count();
  std::sort(result.records.begin(), result.records.end(),
            [](const RequestRecord& a, const RequestRecord& b) { return a.start_s < b.start_s; });
  return result;
}

}  // namespace pg::bench
