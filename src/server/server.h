// The OpenAI-compatible HTTP server in front of one Engine.
//
//   POST /v1/chat/completions, POST /v1/completions   generation (SSE when stream=true)
//   GET  /v1/models, GET /health, GET /metrics         model list, liveness, Prometheus text
//   POST /tokenize, POST /detokenize                   tokenizer access
//
// Threading: a fixed pool of I/O threads (HttpServer); each request's generation state lives
// on its connection's strand; engine callbacks (engine thread) only copy the event and post
// it there. The server never blocks the engine thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/api.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/text_model.h"

namespace pg::server {

struct ServerConfig {
  HttpServerConfig http;
  std::string api_key;            // empty: no authentication
  std::string served_model_name;  // empty: the engine's model name
  int max_waiting_requests = 512; // engine waiting queue above this: 503
  int default_max_tokens = 2048;  // when the request gives none (capped by the context left)
  int drain_timeout_s = 30;       // SIGTERM: time running requests get to finish
};

// What the server serves. Both outlive the Server.
struct ServerContext {
  engine::Engine& engine;
  const TextModel& text;
};

class Server {
 public:
  Server(ServerConfig config, ServerContext context);
  ~Server();
  void Start();  // throws pg::Error when the address cannot be bound
  uint16_t port() const;
  // Graceful stop: new generation requests get 503, the listener closes, running requests
  // get up to drain_timeout_s to finish, the rest are aborted; then the I/O threads stop.
  void Drain();
  ServerMetrics& metrics();
  int num_in_flight() const;

  struct State;  // shared with request handlers (server_state.h)

 private:
  std::shared_ptr<State> state_;
  std::unique_ptr<HttpServer> http_;
};

// Starts the server, blocks until SIGTERM or SIGINT, drains, returns the exit code (0).
int RunServer(const ServerConfig& config, ServerContext& context);

}  // namespace pg::server
