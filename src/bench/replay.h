// Closed-loop multi-turn replay, as evalscope perf does for multi-turn datasets: P workers,
// each holding one conversation at a time. A turn appends that turn's delta messages to the
// conversation's context, sends the whole context (streaming, greedy, max_tokens, ignore_eos),
// then appends the server's actual streamed reply as the assistant message and sends the next
// turn at once. A failed turn is recorded and abandons the rest of its conversation.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/dataset.h"
#include "bench/http_client.h"
#include "bench/metrics.h"
#include "bench/progress.h"
#include "bench/sse.h"

namespace pg::bench {

struct ReplayParams {
  HttpClientParams client;
  std::string chat_path = "/v1/chat/completions";
  std::string model;            // "model" field; empty sends none
  int max_tokens = 500;         // per reply
  bool ignore_eos = true;       // generate exactly max_tokens where the server supports it
  nlohmann::json extra_body = nlohmann::json::object();  // merged into every request body
};

// The body of one streaming chat request.
nlohmann::json BuildChatRequest(const ReplayParams& params, const nlohmann::json& messages);

// Consumes the SSE stream of one chat completion and accumulates what the metrics need.
// Separate from the network so it can be tested on recorded streams with hand-made times.
class ChatStreamAccumulator {
 public:
  // `now_ms`: time since the request was sent, at which `bytes` arrived.
  void OnBytes(std::string_view bytes, double now_ms);
  // End of the body at `now_ms`. Fills the timing, token and outcome fields of *record
  // (success is false with an error message when the stream was incomplete or had an error).
  void Finish(double now_ms, RequestRecord* record);
  const std::string& reply_text() const { return reply_; }

 private:
  void OnEvent(const SseEvent& event, double now_ms);

  SseParser parser_;
  std::vector<SseEvent> events_;
  std::string reply_;
  bool done_ = false;               // saw "data: [DONE]"
  double first_choice_ms_ = -1;     // first chunk with a non-empty "choices"
  double first_output_ms_ = -1;     // first chunk whose delta carries generated output
  double last_content_ms_ = -1;
  std::vector<double> itl_ms_;
  int64_t num_content_chunks_ = 0;
  std::string finish_reason_;
  std::string error_;
  nlohmann::json usage_;            // last "usage" object seen
  std::optional<int64_t> llama_cache_n_;  // llama-server "timings.cache_n"
};

// Sends one request and streams its reply. Never throws for server or network failures: they
// become record->success == false. Returns the reply text (empty on failure).
std::string RunChatRequest(HttpClient& client, const ReplayParams& params,
                           const nlohmann::json& messages, RequestRecord* record,
                           std::chrono::steady_clock::time_point level_start);

struct LevelPlan {
  int concurrency = 1;
  std::span<const Conversation> conversations;  // each used by exactly one worker
  int first_conversation_index = 0;             // global index of conversations[0]
  bool warmup = false;
  int max_turns = 0;                            // > 0: only the first max_turns turns
};

struct LevelResult {
  std::vector<RequestRecord> records;  // ordered by send time
  double wall_s = 0;                   // level start (first sends) -> every worker done
};

LevelResult RunLevel(const ReplayParams& params, const LevelPlan& plan, ProgressBar* progress);

}  // namespace pg::bench
