// One /v1/chat/completions or /v1/completions request in flight (internal to pg::server):
// its `n` choices are engine requests on one prompt, whose events go through each choice's
// OutputPipeline into OpenAI chunks (SSE, `index` = the choice) or one response object.
//
// Choice 0 is submitted first; the others when choice 0's first event arrives, by which time
// its prompt pages are computed and in the prefix cache, so the others prefill only the last
// partial page instead of the whole prompt again.
//
// Ownership: a GenerationJob is kept alive by the engine callbacks (until their final events)
// and by the posts onto the connection strand; all of its methods but Start run on that strand.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/output_pipeline.h"
#include "server/server_state.h"

namespace pg::server {

struct JobSetup {
  bool chat = true;
  std::string endpoint;
  GenerationOptions options;  // options.n choices
  std::string echo_text;      // completions with echo=true
};

class GenerationJob : public std::enable_shared_from_this<GenerationJob> {
 public:
  // pipes: one per choice (setup.options.n), forced alike where a tool call is forced.
  GenerationJob(std::shared_ptr<Server::State> state, std::shared_ptr<Exchange> ex, JobSetup setup,
                std::vector<std::unique_ptr<OutputPipeline>> pipes, Clock::time_point arrival);

  // Submits choice 0 (the others follow its first event); throws pg::Error from
  // Engine::Submit (nothing has been sent then).
  void Start(engine::Request request);

 private:
  struct Choice {
    std::unique_ptr<OutputPipeline> pipe;
    engine::RequestId request_id = 0;
    bool submitted = false;
    bool released = false;   // the engine's final event arrived
    bool done = false;       // finished (its finish chunk sent, or its result kept)
    bool role_pending = false;  // stream, chat: the assistant role chunk is not sent yet
    std::string finish_reason;
    int num_generated = 0;
    std::optional<Clock::time_point> first_token;
    Clock::time_point last_token;
    std::string content, reasoning;
    parsers::ToolCallAccumulator tools;
    std::vector<engine::TokenLogprob> pending_logprobs, all_logprobs;
    int64_t text_offset = 0;
  };

  void Submit(size_t i, engine::Request r);
  void SubmitOthers();
  void OnEvent(size_t i, const engine::TokenEvent& ev);
  void OnDisconnect();
  void Release(Choice& c);
  void AbortAll();

  json TakeChatLogprobs(Choice& c);
  json TakeCompletionLogprobs(Choice& c);
  std::string TokenText(int32_t token) const;

  void Emit(size_t i, OutputDelta&& d);
  json ChunkBase() const;
  void SendChunk(size_t i, json delta, const char* finish_reason);
  void SendCompletionChunk(size_t i, const std::string& text, const char* finish_reason);
  void Send(const json& j);
  void FinishChoice(size_t i, const std::string& finish_reason);
  void Complete();
  void Fail(const std::string& message);
  void ObserveEnd();

  std::shared_ptr<Server::State> st_;
  std::shared_ptr<Exchange> ex_;
  JobSetup setup_;
  Clock::time_point arrival_;
  std::string id_;
  int64_t created_;
  engine::Request request_;  // kept until every choice is submitted
  std::vector<Choice> choices_;
  bool done_ = false;  // the client has its answer (or is gone): ignore further output
  bool ttft_seen_ = false;
  int num_prompt_ = 0, num_cached_ = 0;
};

}  // namespace pg::server
