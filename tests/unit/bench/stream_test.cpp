// The chat-stream accumulator on recorded OpenAI-style streams with hand-made arrival times.
#include <gtest/gtest.h>

#include "bench/replay.h"

namespace pg::bench {
namespace {

std::string Chunk(const std::string& json) { return "data: " + json + "\n\n"; }

std::string Delta(const std::string& content) {
  return Chunk(R"({"choices":[{"index":0,"delta":{"content":")" + content +
               R"("},"finish_reason":null}]})");
}

TEST(ChatStream, TimingsTokensAndCache) {
  ChatStreamAccumulator acc;
  // Role-only first chunk at 120 ms (sent before prefill by some servers): TTFT counts the
  // first chunk carrying generated text (130 ms); the role chunk is kept as first_chunk_ms.
  acc.OnBytes(Chunk(R"({"choices":[{"index":0,"delta":{"role":"assistant"}}]})"), 120.0);
  acc.OnBytes(Delta("Hel"), 130.0);
  // One chunk split in the middle of its JSON: the second half completes it at 145 ms.
  const std::string second = Delta("lo");
  acc.OnBytes(second.substr(0, 17), 140.0);
  acc.OnBytes(second.substr(17), 145.0);
  acc.OnBytes(Delta(", ") + Delta("world"), 170.0);  // two events in one read: ITL 25 and 0
  acc.OnBytes(Chunk(R"({"choices":[{"index":0,"delta":{},"finish_reason":"length"}]})"), 171.0);
  acc.OnBytes(Chunk(R"({"choices":[],"usage":{"prompt_tokens":900,"completion_tokens":4,)"
                    R"("prompt_tokens_details":{"cached_tokens":640}}})") +
                  "data: [DONE]\n\n",
              172.0);
  RequestRecord r;
  r.expected_prompt_tokens = 880;
  acc.Finish(175.0, &r);
  ASSERT_TRUE(r.success) << r.error;
  EXPECT_DOUBLE_EQ(r.ttft_ms, 130.0);
  EXPECT_DOUBLE_EQ(r.first_chunk_ms, 120.0);
  EXPECT_DOUBLE_EQ(r.latency_ms, 175.0);
  EXPECT_EQ(acc.reply_text(), "Hello, world");
  ASSERT_EQ(r.itl_ms.size(), 3u);
  EXPECT_DOUBLE_EQ(r.itl_ms[0], 15.0);
  EXPECT_DOUBLE_EQ(r.itl_ms[1], 25.0);
  EXPECT_DOUBLE_EQ(r.itl_ms[2], 0.0);
  EXPECT_EQ(r.completion_tokens, 4);
  EXPECT_TRUE(r.completion_tokens_from_usage);
  EXPECT_EQ(r.prompt_tokens, 900);
  ASSERT_TRUE(r.cached_tokens.has_value());
  EXPECT_EQ(*r.cached_tokens, 640);
  EXPECT_EQ(r.finish_reason, "length");
  EXPECT_NEAR(*r.TpotMs(), (175.0 - 130.0) / 3.0, 1e-12);
}

TEST(ChatStream, LlamaServerTimingsAndNoUsage) {
  // No usage: completion tokens fall back to content chunks, prompt tokens to the dataset's,
  // cached tokens to llama-server's timings.cache_n.
  ChatStreamAccumulator acc;
  acc.OnBytes(Delta("a") + Delta("b") + Delta("c"), 50.0);
  acc.OnBytes(Chunk(R"({"choices":[{"delta":{},"finish_reason":"stop"}],)"
                    R"("timings":{"cache_n":300,"prompt_n":20}})"),
              60.0);
  RequestRecord r;
  r.expected_prompt_tokens = 320;
  acc.Finish(61.0, &r);  // no [DONE], but a finish_reason: complete
  ASSERT_TRUE(r.success) << r.error;
  EXPECT_EQ(r.completion_tokens, 3);
  EXPECT_FALSE(r.completion_tokens_from_usage);
  EXPECT_EQ(r.prompt_tokens, 320);
  EXPECT_FALSE(r.prompt_tokens_from_usage);
  ASSERT_TRUE(r.cached_tokens.has_value());
  EXPECT_EQ(*r.cached_tokens, 300);
}

TEST(ChatStream, TtftAtFirstOutputToolCallOrFallback) {
  // A tool-call delta is generated output: TTFT lands on it, not on the role chunk.
  ChatStreamAccumulator tool;
  tool.OnBytes(Chunk(R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})"), 3.0);
  tool.OnBytes(Chunk(R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1",)"
                     R"("function":{"name":"ls","arguments":""}}]}}]})"),
               481.5);
  tool.OnBytes(Chunk(R"({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]})") +
                   "data: [DONE]\n\n",
               500.0);
  RequestRecord a;
  tool.Finish(501.0, &a);
  ASSERT_TRUE(a.success) << a.error;
  EXPECT_DOUBLE_EQ(a.ttft_ms, 481.5);
  EXPECT_DOUBLE_EQ(a.first_chunk_ms, 3.0);

  // No output at all (e.g. max_tokens reached on a hidden token): the first chunk with choices.
  ChatStreamAccumulator empty;
  empty.OnBytes(Chunk(R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})"), 7.0);
  empty.OnBytes(Chunk(R"({"choices":[{"index":0,"delta":{},"finish_reason":"length"}]})") +
                    "data: [DONE]\n\n",
                90.0);
  RequestRecord b;
  empty.Finish(91.0, &b);
  ASSERT_TRUE(b.success) << b.error;
  EXPECT_DOUBLE_EQ(b.ttft_ms, 7.0);
}

TEST(ChatStream, TruncatedStreamFails) {
  ChatStreamAccumulator acc;
  acc.OnBytes(Delta("a") + Delta("b"), 10.0);
  RequestRecord r;
  acc.Finish(20.0, &r);
  EXPECT_FALSE(r.success);
  EXPECT_NE(r.error.find("before [DONE]"), std::string::npos) << r.error;
}

TEST(ChatStream, ErrorEventFails) {
  ChatStreamAccumulator acc;
  acc.OnBytes(Chunk(R"({"error":{"message":"context length exceeded","code":400}})"), 5.0);
  RequestRecord r;
  acc.Finish(6.0, &r);
  EXPECT_FALSE(r.success);
  EXPECT_EQ(r.error, "context length exceeded");
}

TEST(ChatStream, NoChoicesFails) {
  ChatStreamAccumulator acc;
  acc.OnBytes("data: [DONE]\n\n", 5.0);
  RequestRecord r;
  acc.Finish(6.0, &r);
  EXPECT_FALSE(r.success);
}

TEST(ChatStream, RequestBody) {
  ReplayParams p;
  p.model = "m";
  p.max_tokens = 77;
  p.extra_body = {{"top_k", 1}, {"temperature", 0.5}};
  nlohmann::json messages = nlohmann::json::array({{{"role", "user"}, {"content", "hi"}}});
  nlohmann::json body = BuildChatRequest(p, messages);
  EXPECT_EQ(body["model"], "m");
  EXPECT_EQ(body["max_tokens"], 77);
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_EQ(body["ignore_eos"], true);
  EXPECT_EQ(body["top_k"], 1);
  EXPECT_EQ(body["temperature"], 0.5);  // extra body overrides the greedy default
  EXPECT_EQ(body["messages"], messages);
}

}  // namespace
}  // namespace pg::bench
