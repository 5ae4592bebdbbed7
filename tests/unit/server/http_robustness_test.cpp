// Error statuses, keep-alive, client disconnects, concurrency, overload and drain.
#include <gtest/gtest.h>

#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <future>

#include "server_fixture.h"

namespace pg::server::testing {
namespace {

using nlohmann::json;

void ExpectError(const HttpResult& r, int status, const std::string& type) {
  EXPECT_EQ(r.status, status) << r.body;
  json j = json::parse(r.body);
  ASSERT_TRUE(j.contains("error")) << r.body;
  EXPECT_EQ(j["error"]["type"], type);
  EXPECT_TRUE(j["error"]["message"].is_string());
  EXPECT_TRUE(j["error"].contains("param"));
  EXPECT_TRUE(j["error"].contains("code"));
}

TEST_F(ServerTest, ErrorStatuses) {
  ServerConfig cfg;
  cfg.api_key = "sekret";
  cfg.http.max_body_bytes = 4096;
  StartServer(cfg, ScriptEngineOptions{.max_context_tokens = 200});
  const std::vector<std::pair<std::string, std::string>> auth = {{"Authorization", "Bearer sekret"}};
  {
    auto c = Client();
    ExpectError(c.Post("/v1/chat/completions", Chat("SAY:x")), 401, "authentication_error");
    ExpectError(c.Post("/v1/chat/completions", Chat("SAY:x"), {{"Authorization", "Bearer wrong"}}), 401, "authentication_error");
    ExpectError(c.Get("/v1/nothing"), 404, "not_found_error");
    ExpectError(c.Send(http::verb::post, "/v1/chat/completions", "{\"messages\": [", auth), 400, "invalid_request_error");
    ExpectError(c.Post("/v1/chat/completions", Chat("SAY:x", {{"max_tokens", "many"}}), auth), 400, "invalid_request_error");
    ExpectError(c.Post("/v1/chat/completions", Chat("SAY:x", {{"top_p", 7}}), auth), 400, "invalid_request_error");
    ExpectError(c.Post("/v1/chat/completions", Chat("SAY:x", {{"n", 17}}), auth), 400, "invalid_request_error");
    HttpResult unknown = c.Post("/v1/chat/completions", Chat("SAY:x", {{"model", "gpt-9"}}), auth);
    ExpectError(unknown, 400, "invalid_request_error");
    EXPECT_EQ(unknown.Json()["error"]["code"], "model_not_found");
    HttpResult too_long = c.Post("/v1/chat/completions", Chat(std::string(300, 'a')), auth);
    ExpectError(too_long, 400, "invalid_request_error");
    EXPECT_EQ(too_long.Json()["error"]["code"], "context_length_exceeded");
    // Still usable on the same connection after all those errors.
    EXPECT_EQ(c.Post("/v1/chat/completions", Chat("SAY:fine"), auth).Json()["choices"][0]["message"]["content"], "fine");
    EXPECT_EQ(c.Get("/health").status, 200);  // no key needed
  }
  {
    auto c = Client();
    ExpectError(c.Post("/v1/chat/completions", Chat(std::string(5000, 'b')), auth), 413, "invalid_request_error");
  }
}

TEST_F(ServerTest, MalformedHttpGets400AndServerSurvives) {
  StartServer();
  {
    auto c = Client();
    boost::asio::write(c.socket(), boost::asio::buffer(std::string("BLAH /\x01\x02 HTTP/9.9\r\n\r\n")));
    std::string reply;
    boost::system::error_code ec;
    char buf[512];
    size_t n;
    while ((n = c.socket().read_some(boost::asio::buffer(buf), ec)) > 0 && !ec) reply.append(buf, n);
    EXPECT_NE(reply.find("400"), std::string::npos) << reply;
  }
  auto c = Client();
  EXPECT_EQ(c.Get("/health").status, 200);
}

TEST_F(ServerTest, KeepAliveServesManyRequestsOnOneConnection) {
  StartServer();
  auto c = Client();
  for (int i = 0; i < 20; ++i) {
    const std::string word = "w" + std::to_string(i);
    const bool stream = i % 2 == 1;
    HttpResult r = c.Post("/v1/chat/completions", Chat("SAY:" + word, {{"stream", stream}}));
    ASSERT_EQ(r.status, 200);
    EXPECT_TRUE(r.keep_alive);
    EXPECT_EQ(stream ? MergeChatStream(r).content : r.Json()["choices"][0]["message"]["content"].get<std::string>(), word);
  }
}

TEST_F(ServerTest, ClientDisconnectMidStreamAbortsAndFreesPages) {
  StartServer({}, ScriptEngineOptions{.tick = std::chrono::microseconds(3000)});
  {
    auto c = Client();
    json body = Chat("SAY:" + std::string(2000, 'z'), {{"stream", true}});
    http::request<http::string_body> req{http::verb::post, "/v1/chat/completions", 11};
    req.set(http::field::host, "x");
    req.body() = body.dump();
    req.prepare_payload();
    http::write(c.socket(), req);
    char buf[256];
    boost::asio::read(c.socket(), boost::asio::buffer(buf));  // some streamed bytes
    ASSERT_TRUE(Eventually([&] { return engine_->Stats().kv_pages_free < 100000; }));
    c.socket().close();
  }
  EXPECT_TRUE(Eventually([&] { return engine_->num_aborted_final() == 1; }));
  EXPECT_TRUE(Eventually([&] { return engine_->Stats().kv_pages_free == 100000; }));
  EXPECT_TRUE(Eventually([&] { return server_->num_in_flight() == 0; }));
  auto c = Client();
  HttpResult m = c.Get("/metrics");
  EXPECT_NE(m.body.find("peregrine_client_disconnect_aborts_total 1"), std::string::npos) << m.body;
  EXPECT_NE(m.body.find("peregrine_kv_pages{state=\"free\"} 100000"), std::string::npos);
}

TEST_F(ServerTest, ClientDisconnectWhileWaitingForNonStreamedAnswer) {
  StartServer({}, ScriptEngineOptions{.tick = std::chrono::microseconds(3000)});
  {
    auto c = Client();
    json body = Chat("SAY:" + std::string(2000, 'q'));
    http::request<http::string_body> req{http::verb::post, "/v1/chat/completions", 11};
    req.set(http::field::host, "x");
    req.body() = body.dump();
    req.prepare_payload();
    http::write(c.socket(), req);
    ASSERT_TRUE(Eventually([&] { return engine_->Stats().num_running == 1; }));
    c.socket().close();
  }
  EXPECT_TRUE(Eventually([&] { return engine_->num_aborted_final() == 1; }));
  EXPECT_TRUE(Eventually([&] { return server_->num_in_flight() == 0; }));
}

TEST_F(ServerTest, FortyConcurrentStreamsAreEachCorrect) {
  StartServer();
  constexpr int kStreams = 40;
  std::vector<std::future<std::pair<std::string, std::string>>> results;
  for (int i = 0; i < kStreams; ++i) {
    results.push_back(std::async(std::launch::async, [this, i] {
      auto c = Client();
      std::string word;
      for (int k = 0; k < 30 + i; ++k) word += static_cast<char>('a' + (i * 7 + k) % 26);
      HttpResult r = c.Post("/v1/chat/completions", Chat("SAY:" + word, {{"stream", true}}));
      return std::make_pair(word, MergeChatStream(r).content);
    }));
  }
  for (auto& f : results) {
    auto [want, got] = f.get();
    EXPECT_EQ(got, want);
  }
  EXPECT_EQ(engine_->num_submitted(), kStreams);
  EXPECT_TRUE(Eventually([&] { return server_->num_in_flight() == 0; }));
}

TEST_F(ServerTest, OverloadGets503) {
  ServerConfig cfg;
  cfg.max_waiting_requests = 2;
  StartServer(cfg);
  engine_->set_pause(true);  // nothing runs: requests pile up in the waiting queue
  std::vector<std::unique_ptr<HttpClient>> clients;
  for (int i = 0; i < 2; ++i) {
    clients.push_back(std::make_unique<HttpClient>(server_->port()));
    http::request<http::string_body> req{http::verb::post, "/v1/chat/completions", 11};
    req.set(http::field::host, "x");
    req.body() = Chat("SAY:wait").dump();
    req.prepare_payload();
    http::write(clients.back()->socket(), req);
  }
  ASSERT_TRUE(Eventually([&] { return engine_->Stats().num_waiting == 2; }));
  auto c = Client();
  ExpectError(c.Post("/v1/chat/completions", Chat("SAY:x")), 503, "service_unavailable_error");
  engine_->set_pause(false);
  for (auto& cl : clients) EXPECT_EQ(cl->Read().Json()["choices"][0]["message"]["content"], "wait");
}

TEST_F(ServerTest, DrainFinishesRunningWorkAndRefusesNew) {
  StartServer({}, ScriptEngineOptions{.tick = std::chrono::microseconds(2000)});
  auto c = Client();
  auto pending = std::async(std::launch::async, [&] {
    return c.Post("/v1/chat/completions", Chat("SAY:" + std::string(100, 'd'), {{"stream", true}}));
  });
  ASSERT_TRUE(Eventually([&] { return server_->num_in_flight() == 1; }));
  std::thread drainer([&] { server_->Drain(); });
  HttpResult r = pending.get();
  drainer.join();
  StreamedChat s = MergeChatStream(r);
  EXPECT_EQ(s.content, std::string(100, 'd'));  // finished, not cut
  EXPECT_TRUE(s.done);
  server_.reset();
}

}  // namespace
}  // namespace pg::server::testing
