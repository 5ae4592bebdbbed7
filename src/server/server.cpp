#include "server/server.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <csignal>
#include <thread>

#include "core/log.h"
#include "core/status.h"
#include "server/server_state.h"

namespace pg::server {
namespace {

namespace http = boost::beast::http;

std::string PathOf(const HttpRequest& req) {
  std::string_view target(req.target().data(), req.target().size());
  const size_t q = target.find('?');
  return std::string(target.substr(0, q));
}

bool Authorized(const Server::State& st, const HttpRequest& req) {
  if (st.config.api_key.empty()) return true;
  auto it = req.find(http::field::authorization);
  if (it == req.end()) return false;
  const std::string_view value(it->value().data(), it->value().size());
  constexpr std::string_view kBearer = "Bearer ";
  return value.size() > kBearer.size() && value.substr(0, kBearer.size()) == kBearer &&
         value.substr(kBearer.size()) == st.config.api_key;
}

void HandleTokenize(Server::State& st, const HttpRequest& req, const std::shared_ptr<Exchange>& ex) {
  const json body = ParseBody(req.body());
  bool add_special = true;
  if (auto it = body.find("add_special_tokens"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) throw ApiError(400, "'add_special_tokens' must be a boolean", "add_special_tokens");
    add_special = it->get<bool>();
  }
  std::vector<int32_t> tokens;
  if (auto it = body.find("prompt"); it != body.end()) {
    if (!it->is_string()) throw ApiError(400, "'prompt' must be a string", "prompt");
    tokens = st.ctx.text.Encode(it->get<std::string>(), add_special, /*parse_special=*/true);
  } else if (body.contains("messages")) {
    json chat = body;
    chat.erase("stream");
    ChatRequest r = ParseChatRequest(chat);
    tokens = st.ctx.text.Encode(st.ctx.text.RenderChat(r.messages, r.tools), add_special, true);
  } else {
    throw ApiError(400, "give 'prompt' (a string) or 'messages'", "prompt");
  }
  st.Reply(ex, "/tokenize", 200,
           {{"tokens", tokens},
            {"count", tokens.size()},
            {"max_model_len", st.ctx.engine.model_info().max_context_tokens}});
}

void HandleDetokenize(Server::State& st, const HttpRequest& req, const std::shared_ptr<Exchange>& ex) {
  const json body = ParseBody(req.body());
  auto it = body.find("tokens");
  if (it == body.end() || !it->is_array())
    throw ApiError(400, "'tokens' must be an array of token ids", "tokens");
  const int vocab = st.ctx.engine.model_info().vocab_size;
  std::vector<int32_t> tokens;
  for (const auto& t : *it) {
    if (!t.is_number_integer()) throw ApiError(400, "'tokens' must be an array of integers", "tokens");
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id >= vocab)
      throw ApiError(400, fmt::format("token id {} is outside the vocabulary [0, {})", id, vocab), "tokens");
    tokens.push_back(static_cast<int32_t>(id));
  }
  st.Reply(ex, "/detokenize", 200, {{"prompt", st.ctx.text.Decode(tokens)}});
}

void Route(const std::shared_ptr<Server::State>& st, HttpRequest&& req, std::shared_ptr<Exchange> ex) {
  const auto arrival = Clock::now();
  const std::string path = PathOf(req);
  const auto method = req.method();
  std::string endpoint = path;
  try {
    if (path == "/health") {
      if (method != http::verb::get) throw ApiError(405, "use GET");
      const bool ok = !st->draining.load();
      st->Reply(ex, "/health", ok ? 200 : 503, {{"status", ok ? "ok" : "draining"}});
      return;
    }
    if (path == "/metrics") {
      if (method != http::verb::get) throw ApiError(405, "use GET");
      st->metrics.CountRequest("/metrics", 200);
      ex->Respond(200, "text/plain; version=0.0.4", st->metrics.Render(st->ctx.engine.Stats()));
      return;
    }
    const bool known = path == "/v1/chat/completions" || path == "/v1/completions" ||
                       path == "/v1/models" || path == "/tokenize" || path == "/detokenize";
    if (!known) {
      endpoint = "other";
      throw ApiError(404, fmt::format("no route for {} {}", std::string(req.method_string()), path), "", "not_found");
    }
    if (!Authorized(*st, req)) throw ApiError(401, "invalid or missing API key", "", "invalid_api_key");
    const bool is_get = path == "/v1/models";
    if (method != (is_get ? http::verb::get : http::verb::post))
      throw ApiError(405, fmt::format("use {} for {}", is_get ? "GET" : "POST", path));
    if (path == "/v1/models") {
      json model = {{"id", st->model_name},
                    {"object", "model"},
                    {"created", st->created_unix_s},
                    {"owned_by", "peregrine"},
                    {"max_model_len", st->ctx.engine.model_info().max_context_tokens}};
      st->Reply(ex, endpoint, 200, {{"object", "list"}, {"data", json::array({model})}});
    } else if (path == "/v1/chat/completions") {
      HandleChatCompletions(st, req, ex, arrival);
    } else if (path == "/v1/completions") {
      HandleCompletions(st, req, ex, arrival);
    } else if (path == "/tokenize") {
      HandleTokenize(*st, req, ex);
    } else {
      HandleDetokenize(*st, req, ex);
    }
  } catch (const ApiError& e) {
    st->ReplyError(ex, endpoint, e);
  } catch (const pg::Error& e) {
    const int status = e.code() == ErrorCode::kResourceExhausted ? 503
                       : e.code() == ErrorCode::kInternal || e.code() == ErrorCode::kIo ? 500 : 400;
    st->ReplyError(ex, endpoint, ApiError(status, e.what()));
  } catch (const std::exception& e) {
    PG_LOG_ERROR("request {} failed: {}", path, e.what());
    st->ReplyError(ex, endpoint, ApiError(500, fmt::format("internal error: {}", e.what())));
  }
}

}  // namespace

Server::Server(ServerConfig config, ServerContext context)
    : state_(std::make_shared<State>(std::move(config), context)) {
  state_->model_name = state_->config.served_model_name.empty()
                           ? state_->ctx.engine.model_info().name
                           : state_->config.served_model_name;
  state_->created_unix_s = std::chrono::duration_cast<std::chrono::seconds>(
                               std::chrono::system_clock::now().time_since_epoch()).count();
  auto st = state_;
  http_ = std::make_unique<HttpServer>(state_->config.http, [st](HttpRequest&& req, std::shared_ptr<Exchange> ex) {
    Route(st, std::move(req), std::move(ex));
  });
}

Server::~Server() { http_->Stop(); }

void Server::Start() {
  http_->Start();
  PG_LOG_INFO("serving model '{}' (auth {})", state_->model_name,
              state_->config.api_key.empty() ? "off" : "on");
}

uint16_t Server::port() const { return http_->port(); }
ServerMetrics& Server::metrics() { return state_->metrics; }
int Server::num_in_flight() const { return state_->in_flight.load(); }

void Server::Drain() {
  state_->draining.store(true);
  http_->StopAccepting();
  const auto deadline = Clock::now() + std::chrono::seconds(state_->config.drain_timeout_s);
  while (state_->in_flight.load() > 0 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (state_->in_flight.load() > 0) {
    std::vector<engine::RequestId> ids;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      ids.assign(state_->active.begin(), state_->active.end());
    }
    PG_LOG_WARN("drain timeout: aborting {} running requests", ids.size());
    for (auto id : ids) state_->ctx.engine.Abort(id);
    const auto abort_deadline = Clock::now() + std::chrono::seconds(5);
    while (state_->in_flight.load() > 0 && Clock::now() < abort_deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Give final responses a moment to leave the socket buffers.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  http_->Stop();
}

int RunServer(const ServerConfig& config, ServerContext& context) {
  Server server(config, context);
  server.Start();
  boost::asio::io_context signal_ioc;
  boost::asio::signal_set signals(signal_ioc, SIGINT, SIGTERM);
  int received = 0;
  signals.async_wait([&](const boost::system::error_code&, int sig) { received = sig; });
  signal_ioc.run();
  PG_LOG_INFO("signal {}: draining ({} requests in flight)", received, server.num_in_flight());
  server.Drain();
  PG_LOG_INFO("drained; exiting");
  return 0;
}

}  // namespace pg::server
