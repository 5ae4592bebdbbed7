// A Server on an ephemeral loopback port in front of ScriptEngine + ByteTextModel.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "fake_engine.h"
#include "http_client.h"
#include "server/server.h"

namespace pg::server::testing {

class ServerTest : public ::testing::Test {
 protected:
  void StartServer(ServerConfig config = {}, ScriptEngineOptions engine_options = {}) {
    engine_ = std::make_unique<ScriptEngine>(engine_options);
    config.http.port = 0;
    config.http.num_io_threads = 2;
    server_ = std::make_unique<Server>(config, ServerContext{*engine_, text_});
    server_->Start();
  }
  void TearDown() override {
    if (server_) server_->Drain();
    server_.reset();
    engine_.reset();
  }
  HttpClient Client() { return HttpClient(server_->port()); }
  static nlohmann::json Chat(const std::string& user, nlohmann::json extra = nlohmann::json::object()) {
    nlohmann::json body = {{"model", "script-model"},
                           {"messages", {{{"role", "user"}, {"content", user}}}}};
    body.update(extra);
    return body;
  }
  // Polls until pred() or ~5 s.
  template <typename F>
  static bool Eventually(F pred) {
    for (int i = 0; i < 500; ++i) {
      if (pred()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return pred();
  }

  ByteTextModel text_;
  std::unique_ptr<ScriptEngine> engine_;
  std::unique_ptr<Server> server_;
};

// Concatenated chat deltas of an SSE body.
struct StreamedChat {
  std::string content, reasoning, finish_reason;
  nlohmann::json tool_calls = nlohmann::json::array();  // merged by index
  nlohmann::json usage;
  bool done = false;
  int num_chunks = 0;
};

inline StreamedChat MergeChatStream(const HttpResult& r) {
  StreamedChat s;
  for (const auto& e : r.Events()) {
    if (e == "[DONE]") {
      s.done = true;
      continue;
    }
    auto j = nlohmann::json::parse(e);
    ++s.num_chunks;
    EXPECT_EQ(j["object"], "chat.completion.chunk");
    if (j.contains("usage") && !j["usage"].is_null()) s.usage = j["usage"];
    for (const auto& c : j["choices"]) {
      const auto& d = c["delta"];
      if (d.contains("content") && d["content"].is_string()) s.content += d["content"].get<std::string>();
      if (d.contains("reasoning_content")) s.reasoning += d["reasoning_content"].get<std::string>();
      if (d.contains("tool_calls")) {
        for (const auto& tc : d["tool_calls"]) {
          const size_t i = tc["index"].get<size_t>();
          if (i == s.tool_calls.size()) s.tool_calls.push_back({{"id", tc.value("id", "")}, {"name", tc["function"].value("name", "")}, {"arguments", ""}});
          s.tool_calls[i]["arguments"] = s.tool_calls[i]["arguments"].get<std::string>() + tc["function"]["arguments"].get<std::string>();
        }
      }
      if (!c["finish_reason"].is_null()) s.finish_reason = c["finish_reason"];
    }
  }
  return s;
}

}  // namespace pg::server::testing
