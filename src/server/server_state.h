// State shared by the server and its request handlers (internal to pg::server).
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <unordered_set>

#include "server/http_server.h"
#include "server/metrics.h"
#include "server/protocol.h"
#include "server/server.h"

namespace pg::server {

using Clock = std::chrono::steady_clock;

struct Server::State {
  State(ServerConfig c, ServerContext x) : config(std::move(c)), ctx(x) {}
  ServerConfig config;
  ServerContext ctx;
  ServerMetrics metrics;
  std::string model_name;
  int64_t created_unix_s = 0;
  std::atomic<bool> draining{false};

  // Engine requests submitted and not yet finished (aborted on drain timeout).
  std::mutex mu;
  std::unordered_set<engine::RequestId> active;
  std::atomic<int> in_flight{0};

  void Reply(const std::shared_ptr<Exchange>& ex, const std::string& endpoint, int status,
             const json& body) {
    metrics.CountRequest(endpoint, status);
    ex->Respond(status, "application/json", body.dump(-1, ' ', false, json::error_handler_t::replace));
  }
  void ReplyError(const std::shared_ptr<Exchange>& ex, const std::string& endpoint,
                  const ApiError& e) {
    Reply(ex, endpoint, e.status, ErrorBody(e));
  }
};

// Generation endpoints (generation_job.cpp).
void HandleChatCompletions(const std::shared_ptr<Server::State>& state, const HttpRequest& req,
                           std::shared_ptr<Exchange> ex, Clock::time_point arrival);
void HandleCompletions(const std::shared_ptr<Server::State>& state, const HttpRequest& req,
                       std::shared_ptr<Exchange> ex, Clock::time_point arrival);

}  // namespace pg::server
