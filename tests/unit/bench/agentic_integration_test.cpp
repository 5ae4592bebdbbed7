// End to end against a real local HTTP server: tests/unit/bench/fake_openai_server.py (Python's
// http.server), which streams SSE in chunked encoding, simulates a prefix cache, a tokenizer
// and fixed timings, and logs what it received. It is the independent peer: its timings,
// token counts and cache figures are what the client must measure back.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include <nlohmann/json.hpp>

#include "bench/agentic.h"
#include "bench/http_client.h"
#include "core/status.h"

namespace pg::bench {
namespace {

using nlohmann::json;

// Runs the fake server as a child process; the constructor returns once it listens.
class FakeServer {
 public:
  explicit FakeServer(std::vector<std::string> extra_args) {
    int fds[2];
    PG_CHECK(pipe(fds) == 0);
    pid_ = fork();
    PG_CHECK(pid_ >= 0);
    if (pid_ == 0) {
      dup2(fds[1], STDOUT_FILENO);
      close(fds[0]);
      close(fds[1]);
      std::vector<std::string> args = {"python3", "tests/unit/bench/fake_openai_server.py"};
      args.insert(args.end(), extra_args.begin(), extra_args.end());
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execvp("python3", argv.data());
      _exit(127);
    }
    close(fds[1]);
    FILE* out = fdopen(fds[0], "r");
    char line[128] = {};
    const bool got = std::fgets(line, sizeof line, out) != nullptr;
    std::fclose(out);
    int parsed = 0;
    if (got && std::sscanf(line, "PORT %d", &parsed) == 1) port_ = parsed;
  }
  ~FakeServer() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
  }
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  json GetJson(const std::string& path) const {
    HttpClient client({ParseUrl(url()), 30.0, ""});
    HttpResponse r = client.Get(path);
    PG_CHECK(r.status == 200, "{} -> {}", path, r.status);
    return json::parse(r.body);
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

std::filesystem::path TempDir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("pg_bench_" + name + "_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

AgenticConfig SmallConfig(const FakeServer& server, const std::filesystem::path& dir) {
  AgenticConfig c;
  c.url = server.url() + "/v1";  // the /v1 suffix is accepted
  c.concurrency = {1, 3};
  c.conversations = {2, 4};
  c.first_turn_tokens = 301;
  c.turn_growth_tokens = 37;
  c.min_turns = 2;
  c.max_turns = 4;
  c.max_tokens = 12;
  c.seed = 5;
  c.warmup_conversations = 1;
  c.warmup_turns = 1;
  c.progress = false;
  c.output_json = (dir / "result.json").string();
  c.save_dataset = (dir / "dataset.json").string();
  return c;
}

TEST(AgenticIntegration, SyntheticRunMeasuresTheServer) {
  FakeServer server({"--ttft-ms", "60", "--tpot-ms", "8", "--tokenize", "vllm"});
  ASSERT_GT(server.port(), 0) << "python3 fake server did not start";
  const auto dir = TempDir("synthetic");
  AgenticConfig config = SmallConfig(server, dir);
  AgenticResult result = RunAgentic(config);

  EXPECT_EQ(result.model, "fake-model");  // discovered through /v1/models
  EXPECT_EQ(result.token_counter, "vllm");
  ASSERT_EQ(result.levels.size(), 2u);

  // Every turn of every conversation was sent once: compare with the dataset saved.
  json dataset = json::parse(std::ifstream(config.save_dataset));
  const auto& convs = dataset["conversations"];
  ASSERT_EQ(convs.size(), 7u);  // 1 warm-up + 2 + 4
  size_t expected_requests = 1;  // warm-up: 1 turn
  for (size_t c = 1; c < convs.size(); ++c) expected_requests += convs[c].size();
  json stats = server.GetJson("/debug/stats");
  EXPECT_EQ(stats["num_chat"].get<size_t>(), expected_requests);
  EXPECT_EQ(result.requests.size(), expected_requests);
  EXPECT_EQ(stats["peak_in_flight"].get<int>(), 3);  // the c=3 level really ran 3 at once

  // Synthetic turn sizes, measured by the server's own tokenizer through /tokenize.
  for (size_t c = 0; c < convs.size(); ++c) {
    for (size_t t = 1; t < convs[c].size(); ++t) {
      const std::string text = convs[c][t]["messages"][0]["content"];
      std::regex token_re("[A-Za-z]+|[0-9]| +|[\\s\\S]");
      const auto n = std::distance(std::sregex_iterator(text.begin(), text.end(), token_re),
                                   std::sregex_iterator());
      EXPECT_LE(n, 37);
      EXPECT_GE(n, 36);
    }
  }

  std::set<int> seen_conversations;
  for (const LevelSummary& level : result.levels) {
    SCOPED_TRACE(level.concurrency);
    EXPECT_EQ(level.num_failed, 0);
    // Fake server timings: first chunk after 60 ms, then a token every 8 ms.
    EXPECT_GE(level.ttft_ms.min, 60.0);
    EXPECT_LT(level.ttft_ms.mean, 60.0 + 40.0);
    // The server sleeps 8 ms between tokens; a late-read first chunk can shorten one
    // request's decode span by a few ms on a loaded machine, never the average much.
    EXPECT_GE(level.tpot_ms.min, 6.0);
    EXPECT_GE(level.tpot_ms.mean, 7.6);
    EXPECT_LT(level.tpot_ms.mean, 8.0 + 4.0);
    EXPECT_NEAR(level.per_user_tps, 1000.0 / level.tpot_ms.mean, 1e-9);
    EXPECT_EQ(level.completion_tokens_per_request.min, 12.0);
    EXPECT_EQ(level.completion_tokens_per_request.max, 12.0);
    // Later turns extend the previous prompt (context + the actual reply), so the simulated
    // prefix cache hits all but the reply, the new delta and a partial page (~75% here).
    ASSERT_TRUE(level.kv_hit_rate_later_turns.has_value());
    EXPECT_GT(*level.kv_hit_rate_later_turns, 0.7);
  }
  // Token and cache figures are the server's: the client's sums equal the server's log.
  json log = server.GetJson("/debug/requests");
  int64_t server_prompt = 0, server_cached = 0, client_prompt = 0, client_cached = 0;
  for (const json& e : log) {
    server_prompt += e["prompt_tokens"].get<int64_t>();
    server_cached += e["cached_tokens"].get<int64_t>();
  }
  for (const RequestRecord& r : result.requests) {
    client_prompt += r.prompt_tokens;
    client_cached += r.cached_tokens.value_or(-1000000);
  }
  EXPECT_EQ(client_prompt, server_prompt);
  EXPECT_EQ(client_cached, server_cached);
  for (const RequestRecord& r : result.requests) {
    EXPECT_TRUE(r.success) << r.error;
    EXPECT_TRUE(r.prompt_tokens_from_usage);
    if (r.warmup) continue;
    seen_conversations.insert(r.conversation);
    EXPECT_EQ(r.itl_ms.size(), 11u);  // 12 content chunks
  }
  // Levels used fresh conversations: 1..6 (0 was the warm-up).
  EXPECT_EQ(seen_conversations, (std::set<int>{1, 2, 3, 4, 5, 6}));

  // Output JSON: every request and both levels.
  json out = json::parse(std::ifstream(config.output_json));
  EXPECT_EQ(out["requests"].size(), expected_requests);
  EXPECT_EQ(out["levels"].size(), 2u);
  EXPECT_EQ(out["levels"][1]["concurrency"], 3);
  std::filesystem::remove_all(dir);
}

TEST(AgenticIntegration, ClosedLoopSendsTheActualReplies) {
  FakeServer server({"--ttft-ms", "5", "--tpot-ms", "1"});
  ASSERT_GT(server.port(), 0);
  const auto dir = TempDir("closed_loop");
  AgenticConfig config = SmallConfig(server, dir);
  config.concurrency = {2};
  config.conversations = {3};
  config.warmup_conversations = 0;
  RunAgentic(config);
  json log = server.GetJson("/debug/requests");
  json dataset = json::parse(std::ifstream(config.save_dataset));
  // Rebuild each request the client should have sent from the dataset and the replies the
  // server logged, and compare with what the server received.
  std::map<std::string, std::string> reply_for;  // request messages dump -> reply
  for (const json& e : log) reply_for[e["request"]["messages"].dump()] = e["reply"];
  int checked = 0;
  for (const json& conv : dataset["conversations"]) {
    json context = json::array();
    for (const json& turn : conv) {
      for (const json& m : turn["messages"]) context.push_back(m);
      auto it = reply_for.find(context.dump());
      ASSERT_NE(it, reply_for.end()) << "the server never received the expected context";
      context.push_back({{"role", "assistant"}, {"content", it->second}});
      ++checked;
    }
  }
  EXPECT_EQ(checked, static_cast<int>(log.size()));
  for (const json& e : log) {
    EXPECT_EQ(e["request"]["max_tokens"], 12);
    EXPECT_EQ(e["request"]["temperature"], 0.0);
    EXPECT_EQ(e["request"]["ignore_eos"], true);
    EXPECT_EQ(e["request"]["stream"], true);
  }
  std::filesystem::remove_all(dir);
}

TEST(AgenticIntegration, FailedTurnAbandonsItsConversation) {
  FakeServer server({"--ttft-ms", "5", "--tpot-ms", "1"});
  ASSERT_GT(server.port(), 0);
  const auto dir = TempDir("failure");
  const std::string path = (dir / "data.json").string();
  std::ofstream(path) << R"({"conversations": [
    [{"messages": [{"role": "user", "content": "fine one"}]},
     {"messages": [{"role": "user", "content": "fine two"}]}],
    [{"messages": [{"role": "user", "content": "ok"}]},
     {"messages": [{"role": "user", "content": "PLEASE_FAIL now"}]},
     {"messages": [{"role": "user", "content": "never sent"}]}]
  ]})";
  AgenticConfig config = SmallConfig(server, dir);
  config.dataset_path = path;
  config.save_dataset.clear();
  config.concurrency = {2};
  config.conversations = {2};
  config.warmup_conversations = 0;
  AgenticResult result = RunAgentic(config);
  ASSERT_EQ(result.levels.size(), 1u);
  EXPECT_EQ(result.levels[0].num_requests, 4);  // 2 + 2; the third turn is never sent
  EXPECT_EQ(result.levels[0].num_failed, 1);
  EXPECT_EQ(server.GetJson("/debug/stats")["num_chat"], 4);
  int failed = 0;
  for (const RequestRecord& r : result.requests) {
    if (r.success) continue;
    ++failed;
    EXPECT_EQ(r.conversation, 1);
    EXPECT_EQ(r.turn, 1);
    EXPECT_NE(r.error.find("HTTP 500"), std::string::npos) << r.error;
  }
  EXPECT_EQ(failed, 1);
  std::filesystem::remove_all(dir);
}

TEST(AgenticIntegration, TokenizeShapes) {
  for (const auto& [shape, expected] : std::vector<std::pair<std::string, std::string>>{
           {"llama", "llama.cpp"}, {"none", "estimate"}}) {
    FakeServer server({"--ttft-ms", "1", "--tpot-ms", "1", "--tokenize", shape});
    ASSERT_GT(server.port(), 0);
    const auto dir = TempDir("tok_" + shape);
    AgenticConfig config = SmallConfig(server, dir);
    config.concurrency = {1};
    config.conversations = {1};
    config.warmup_conversations = 0;
    AgenticResult result = RunAgentic(config);
    EXPECT_EQ(result.token_counter, expected) << shape;
    EXPECT_EQ(result.levels[0].num_failed, 0);
    std::filesystem::remove_all(dir);
  }
}

TEST(AgenticIntegration, DatasetTooSmallIsAnError) {
  FakeServer server({});
  ASSERT_GT(server.port(), 0);
  AgenticConfig config;
  config.url = server.url();
  config.dataset_path = "tests/data/bench/evalscope_small.json";  // 2 conversations
  config.concurrency = {1, 2};
  config.conversations = {1, 2};
  config.progress = false;
  EXPECT_THROW(RunAgentic(config), Error);
}

TEST(AgenticIntegration, UnreachableServerIsAnError) {
  AgenticConfig config;
  config.url = "http://127.0.0.1:1";  // nothing listens on port 1
  config.progress = false;
  EXPECT_THROW(RunAgentic(config), Error);
}

}  // namespace
}  // namespace pg::bench
