// The OpenAI API over real HTTP against the deterministic ScriptEngine: response shapes,
// streaming, stop strings, length, usage/cached tokens, tool calls, reasoning, tokenizer
// endpoints, metrics.
#include <gtest/gtest.h>

#include "runtime/json_schema.h"
#include "server_fixture.h"

namespace pg::server::testing {
namespace {

using nlohmann::json;

TEST_F(ServerTest, ChatCompletionShape) {
  StartServer();
  auto c = Client();
  HttpResult r = c.Post("/v1/chat/completions", Chat("SAY:Hello, wörld!"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.content_type, "application/json");
  json j = r.Json();
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_TRUE(j["created"].is_number_integer());
  EXPECT_EQ(j["model"], "script-model");
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hello, wörld!");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  const std::string prompt = text_.RenderChat(json::array({{{"role", "user"}, {"content", "SAY:Hello, wörld!"}}}), nullptr);
  EXPECT_EQ(j["usage"]["prompt_tokens"], prompt.size());
  EXPECT_EQ(j["usage"]["completion_tokens"], std::string("Hello, wörld!").size() + 1);  // + EOS
  EXPECT_EQ(j["usage"]["total_tokens"], j["usage"]["prompt_tokens"].get<int>() + j["usage"]["completion_tokens"].get<int>());
  EXPECT_TRUE(j["usage"]["prompt_tokens_details"]["cached_tokens"].is_number_integer());
}

TEST_F(ServerTest, StreamedChatWithUsage) {
  StartServer();
  auto c = Client();
  HttpResult r = c.Post("/v1/chat/completions",
                        Chat("SAY:stream me 😀 please", {{"stream", true}, {"stream_options", {{"include_usage", true}}}}));
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "text/event-stream");
  StreamedChat s = MergeChatStream(r);
  EXPECT_EQ(s.content, "stream me 😀 please");
  EXPECT_EQ(s.finish_reason, "stop");
  EXPECT_TRUE(s.done);
  ASSERT_TRUE(s.usage.is_object());
  EXPECT_EQ(s.usage["completion_tokens"], std::string("stream me 😀 please").size() + 1);
  auto events = r.Events();
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  json first = json::parse(events[0]);
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  json usage_chunk = json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage_chunk["choices"].empty());
  // Every chunk has the same id; non-final chunks carry usage: null.
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    json j = json::parse(events[i]);
    EXPECT_EQ(j["id"], first["id"]);
    if (i + 2 < events.size()) {
      EXPECT_TRUE(j["usage"].is_null());
    }
  }
}

// n > 1: n engine requests on one prompt (seed + i each), the later ones submitted after the
// first's first event so that they find its prompt pages cached; one response with n choices,
// or one stream whose chunks carry each choice's index, a finish chunk per choice, usage summed.
TEST_F(ServerTest, SeveralChoices) {
  StartServer();
  auto c = Client();
  const std::string said = "choose me, please";
  const size_t before = engine_->seeds().size();
  HttpResult r = c.Post("/v1/chat/completions", Chat("SAY:" + said, {{"n", 3}, {"seed", 5}}));
  ASSERT_EQ(r.status, 200) << r.body;
  json j = r.Json();
  ASSERT_EQ(j["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_EQ(j["choices"][i]["message"]["content"], said);
    EXPECT_EQ(j["choices"][i]["finish_reason"], "stop");
  }
  EXPECT_EQ(j["usage"]["completion_tokens"], 3 * (said.size() + 1));
  EXPECT_EQ(j["usage"]["prompt_tokens"], engine_->last_prompt().size());  // counted once
  const std::vector<uint64_t> seeds = engine_->seeds();
  EXPECT_EQ(std::vector<uint64_t>(seeds.begin() + std::ptrdiff_t(before), seeds.end()), (std::vector<uint64_t>{5, 6, 7}));

  HttpResult s = c.Post("/v1/chat/completions", Chat("SAY:" + said, {{"n", 2}, {"stream", true},
                                                                    {"stream_options", {{"include_usage", true}}}}));
  ASSERT_EQ(s.status, 200);
  const auto events = s.Events();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back(), "[DONE]");
  std::map<int, std::string> content;
  std::map<int, int> roles, finishes;
  json usage;
  for (size_t k = 0; k + 1 < events.size(); ++k) {
    const json chunk = json::parse(events[k]);
    if (!chunk["usage"].is_null()) usage = chunk["usage"];
    for (const json& ch : chunk["choices"]) {
      const int index = ch["index"];
      EXPECT_TRUE(index == 0 || index == 1) << events[k];
      EXPECT_EQ(finishes[index], 0) << "output after choice " << index << "'s finish chunk";
      if (ch["delta"].contains("role")) ++roles[index];
      if (ch["delta"].contains("content")) content[index] += ch["delta"]["content"].get<std::string>();
      if (!ch["finish_reason"].is_null()) ++finishes[index];
    }
  }
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(content[i], said) << i;
    EXPECT_EQ(roles[i], 1) << i;
    EXPECT_EQ(finishes[i], 1) << i;
  }
  ASSERT_TRUE(usage.is_object());
  EXPECT_EQ(usage["completion_tokens"], 2 * (said.size() + 1));

  HttpResult stopped = c.Post("/v1/chat/completions", Chat("SAY:one two STOP three four", {{"n", 2}, {"stop", "STOP"}}));
  ASSERT_EQ(stopped.status, 200);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(stopped.Json()["choices"][i]["message"]["content"], "one two ");
    EXPECT_EQ(stopped.Json()["choices"][i]["finish_reason"], "stop");
  }
  HttpResult comp = c.Post("/v1/completions", json{{"prompt", "SAY:xy"}, {"n", 2}, {"echo", true}});
  ASSERT_EQ(comp.status, 200) << comp.body;
  ASSERT_EQ(comp.Json()["choices"].size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(comp.Json()["choices"][i]["index"], i);
    EXPECT_EQ(comp.Json()["choices"][i]["text"], "SAY:xyxy");
  }
  EXPECT_TRUE(Eventually([&] { return engine_->Stats().num_running == 0; }));
}

TEST_F(ServerTest, StopStringAbortsAndTruncates) {
  StartServer();
  auto c = Client();
  HttpResult r = c.Post("/v1/chat/completions", Chat("SAY:one two STOP three four five six seven", {{"stop", {"STOP", "zzz"}}}));
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.Json()["choices"][0]["message"]["content"], "one two ");
  EXPECT_EQ(r.Json()["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(Eventually([&] { return engine_->num_aborted_final() == 1; }));
  // Streaming: the held-back "ST" is never sent.
  HttpResult s = c.Post("/v1/chat/completions", Chat("SAY:abc STSTOP more", {{"stop", "STOP"}, {"stream", true}}));
  EXPECT_EQ(MergeChatStream(s).content, "abc ST");
  EXPECT_EQ(MergeChatStream(s).finish_reason, "stop");
}

TEST_F(ServerTest, LengthFinish) {
  StartServer();
  auto c = Client();
  HttpResult r = c.Post("/v1/chat/completions", Chat("SAY:abcdefghijklmnop", {{"max_tokens", 5}}));
  EXPECT_EQ(r.Json()["choices"][0]["message"]["content"], "abcde");
  EXPECT_EQ(r.Json()["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r.Json()["usage"]["completion_tokens"], 5);
  HttpResult s = c.Post("/v1/completions", {{"prompt", "SAY:xyz"}, {"max_tokens", 40}, {"ignore_eos", true}});
  EXPECT_EQ(s.Json()["choices"][0]["text"], std::string("xyz") + std::string(37, 'x'));
  EXPECT_EQ(s.Json()["choices"][0]["finish_reason"], "length");
}

// JSON mode reaches the engine as the model's token table (the engine test checks the mask on
// the real model); a model without one answers 400 naming response_format, as does json_schema.
TEST_F(ServerTest, ResponseFormatJsonObject) {
  StartServer();
  auto c = Client();
  const nlohmann::json json_mode = {{"response_format", {{"type", "json_object"}}}};
  HttpResult none = c.Post("/v1/chat/completions", Chat("SAY:{}", json_mode));
  EXPECT_EQ(none.status, 400) << none.body;
  EXPECT_EQ(none.Json()["error"]["param"], "response_format");
  EXPECT_EQ(engine_->num_submitted(), 0);
  text_.json_mode = true;
  HttpResult r = c.Post("/v1/chat/completions", Chat("SAY:{}", json_mode));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Json()["choices"][0]["message"]["content"], "{}");
  const auto table = engine_->last_sampling().token_table;
  ASSERT_NE(table, nullptr);
  EXPECT_EQ(table->eos_ids, (std::vector<int32_t>{kEos}));
  HttpResult plain = c.Post("/v1/chat/completions", Chat("SAY:hi"));
  ASSERT_EQ(plain.status, 200);
  EXPECT_EQ(engine_->last_sampling().token_table, nullptr);
  // A template that opens <think> in the generation prompt: JSON mode's object is content.
  text_.features.think_tags = text_.features.prompt_opens_think = true;
  HttpResult think = c.Post("/v1/chat/completions", Chat("SAY:{\"a\": 1}", json_mode));
  ASSERT_EQ(think.status, 200) << think.body;
  EXPECT_EQ(think.Json()["choices"][0]["message"]["content"], "{\"a\": 1}");
  EXPECT_TRUE(think.Json()["choices"][0]["message"].value("reasoning_content", json()).is_null()) << think.body;
  text_.features = {};
  HttpResult schema = c.Post("/v1/chat/completions",
                             Chat("SAY:{}", {{"response_format", {{"type", "json_schema"}}}}));
  EXPECT_EQ(schema.status, 400);
  EXPECT_EQ(schema.Json()["error"]["param"], "response_format");
  // A schema reaches the engine compiled, beside the token table.
  const nlohmann::json with_schema = {{"response_format", {{"type", "json_schema"}, {"json_schema",
      {{"name", "n"}, {"schema", {{"type", "object"}, {"properties", {{"n", {{"type", "integer"}}}}}}}}}}}};
  HttpResult typed = c.Post("/v1/chat/completions", Chat("SAY:{\"n\": 3}", with_schema));
  ASSERT_EQ(typed.status, 200) << typed.body;
  EXPECT_EQ(typed.Json()["choices"][0]["message"]["content"], "{\"n\": 3}");
  EXPECT_NE(engine_->last_sampling().token_table, nullptr);
  EXPECT_NE(engine_->last_sampling().json_schema, nullptr);
  HttpResult json_mode_again = c.Post("/v1/chat/completions", Chat("SAY:{}", json_mode));
  EXPECT_EQ(engine_->last_sampling().json_schema, nullptr);
}

// logit_bias reaches the engine as sorted (id, bias) pairs, on both endpoints; a bad one is a 400
// naming the field that never reaches the engine.
TEST_F(ServerTest, LogitBiasReachesTheEngine) {
  StartServer();
  auto c = Client();
  HttpResult r = c.Post("/v1/chat/completions", Chat("SAY:ok", {{"logit_bias", {{"9", 3}, {"2", -100}}}}));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(engine_->last_sampling().logit_bias, (std::vector<std::pair<int32_t, float>>{{2, -100.0f}, {9, 3.0f}}));
  HttpResult comp = c.Post("/v1/completions", {{"prompt", "SAY:ok"}, {"logit_bias", {{"4", 1.5}}}});
  ASSERT_EQ(comp.status, 200) << comp.body;
  EXPECT_EQ(engine_->last_sampling().logit_bias, (std::vector<std::pair<int32_t, float>>{{4, 1.5f}}));
  const int submitted = engine_->num_submitted();
  HttpResult bad = c.Post("/v1/chat/completions", Chat("SAY:ok", {{"logit_bias", {{"4", 101}}}}));
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.Json()["error"]["param"], "logit_bias");
  EXPECT_EQ(engine_->num_submitted(), submitted);
}

TEST_F(ServerTest, CompletionsStreamAndEcho) {
  StartServer();
  auto c = Client();
  HttpResult r = c.Post("/v1/completions", {{"prompt", "SAY:done"}, {"echo", true}, {"logprobs", 2}});
  ASSERT_EQ(r.status, 200) << r.body;
  json j = r.Json();
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], "SAY:donedone");
  const auto& lp = j["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 5u);  // d o n e EOS
  EXPECT_EQ(lp["tokens"][0], "d");
  EXPECT_FLOAT_EQ(lp["token_logprobs"][0].get<float>(), -0.25f);
  EXPECT_EQ(lp["top_logprobs"][0].size(), 2u);
  EXPECT_EQ(lp["text_offset"][1], 1);
  HttpResult s = c.Post("/v1/completions", {{"prompt", "SAY:streamed"}, {"stream", true}});
  std::string text;
  for (const auto& e : s.Events()) {
    if (e == "[DONE]") continue;
    json k = json::parse(e);
    EXPECT_EQ(k["object"], "text_completion");
    text += k["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, "streamed");
  EXPECT_EQ(s.Events().back(), "[DONE]");
}

TEST_F(ServerTest, CachedTokensOnSecondTurn) {
  StartServer();
  auto c = Client();
  json turn1 = Chat("SAY:first answer " + std::string(80, 'p'));
  HttpResult r1 = c.Post("/v1/chat/completions", turn1);
  json msgs = turn1["messages"];
  msgs.push_back({{"role", "assistant"}, {"content", r1.Json()["choices"][0]["message"]["content"]}});
  msgs.push_back({{"role", "user"}, {"content", "SAY:second"}});
  HttpResult r2 = c.Post("/v1/chat/completions", {{"messages", msgs}});
  const int cached = r2.Json()["usage"]["prompt_tokens_details"]["cached_tokens"];
  EXPECT_GE(cached, 96);  // the first turn's prompt, in whole pages
  EXPECT_LT(cached, r2.Json()["usage"]["prompt_tokens"].get<int>());
}

TEST_F(ServerTest, ChatLogprobs) {
  StartServer();
  auto c = Client();
  HttpResult r = c.Post("/v1/chat/completions", Chat("SAY:hi", {{"logprobs", true}, {"top_logprobs", 3}}));
  const json body = r.Json();
  const json& content = body["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 3u);
  EXPECT_EQ(content[0]["token"], "h");
  EXPECT_EQ(content[0]["bytes"], json::array({104}));
  EXPECT_EQ(content[0]["top_logprobs"].size(), 3u);
  EXPECT_EQ(content[0]["top_logprobs"][1]["token"], "i");
}

TEST_F(ServerTest, ToolCallsHermesStreamedAndNot) {
  text_.features.tool_format = parsers::ToolFormat::kHermes;
  StartServer();
  auto c = Client();
  const json tools = {{{"type", "function"},
                       {"function", {{"name", "get_weather"}, {"parameters", {{"type", "object"}}}}}}};
  const std::string say =
      "SAY:<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>";
  HttpResult r = c.Post("/v1/chat/completions", Chat(say, {{"tools", tools}}));
  json msg = r.Json()["choices"][0]["message"];
  EXPECT_EQ(r.Json()["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_TRUE(msg["content"].is_null());
  ASSERT_EQ(msg["tool_calls"].size(), 1u);
  EXPECT_EQ(msg["tool_calls"][0]["type"], "function");
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(msg["tool_calls"][0]["function"]["arguments"].get<std::string>()), json({{"city", "Paris"}}));

  HttpResult s = c.Post("/v1/chat/completions", Chat(say, {{"tools", tools}, {"stream", true}}));
  StreamedChat m = MergeChatStream(s);
  EXPECT_EQ(m.finish_reason, "tool_calls");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0]["name"], "get_weather");
  EXPECT_EQ(json::parse(m.tool_calls[0]["arguments"].get<std::string>()), json({{"city", "Paris"}}));
  EXPECT_GT(m.num_chunks, 5);  // arguments arrive in several deltas

  // tool_choice none: tools are neither rendered nor parsed.
  HttpResult n = c.Post("/v1/chat/completions", Chat(say, {{"tools", tools}, {"tool_choice", "none"}}));
  EXPECT_EQ(n.Json()["choices"][0]["message"]["content"], say.substr(4));
  EXPECT_EQ(n.Json()["choices"][0]["finish_reason"], "stop");
}

TEST_F(ServerTest, NamedToolChoiceForcesTheCall) {
  text_.features.tool_format = parsers::ToolFormat::kHermes;
  StartServer();
  auto c = Client();
  const json tools = {{{"type", "function"}, {"function", {{"name", "lookup"}}}}};
  // The model continues after the forced prefix with just the arguments.
  HttpResult r = c.Post("/v1/chat/completions",
                        Chat("SAY:{\"q\": 1}}</tool_call>",
                             {{"tools", tools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "lookup"}}}}}}));
  json msg = r.Json()["choices"][0]["message"];
  ASSERT_EQ(msg["tool_calls"].size(), 1u) << r.body;
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "lookup");
  EXPECT_EQ(json::parse(msg["tool_calls"][0]["function"]["arguments"].get<std::string>()), json({{"q", 1}}));
}

// With the model's token table, a named call's arguments are constrained to the tool's schema
// (any object when it has none, or uses what JsonSchema cannot enforce) and the output ends at
// the arguments' end: the parser reports the call from the arguments alone.
TEST_F(ServerTest, NamedToolChoiceConstrainsTheArguments) {
  text_.features.tool_format = parsers::ToolFormat::kHermes;
  text_.json_mode = true;
  StartServer();
  auto c = Client();
  const json params = {{"type", "object"}, {"properties", {{"q", {{"type", "integer"}}}}}, {"required", {"q"}}};
  const json tools = {{{"type", "function"}, {"function", {{"name", "lookup"}, {"parameters", params}}}},
                      {{"type", "function"}, {"function", {{"name", "bare"}}}},
                      {{"type", "function"}, {"function", {{"name", "odd"}, {"parameters",
                          {{"type", "object"}, {"properties", {{"s", {{"type", "string"}, {"multipleOf", 2}}}}}}}}}}};
  auto call = [&](const char* name, bool stream) {
    return c.Post("/v1/chat/completions",
                  Chat("SAY:{\"q\": 1}", {{"tools", tools}, {"stream", stream},
                                           {"tool_choice", {{"type", "function"}, {"function", {{"name", name}}}}}}));
  };
  HttpResult r = call("lookup", false);
  json msg = r.Json()["choices"][0]["message"];
  ASSERT_EQ(msg["tool_calls"].size(), 1u) << r.body;
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "lookup");
  EXPECT_EQ(json::parse(msg["tool_calls"][0]["function"]["arguments"].get<std::string>()), json({{"q", 1}}));
  const auto schema = engine_->last_sampling().json_schema;
  ASSERT_NE(schema, nullptr);
  EXPECT_NE(engine_->last_sampling().token_table, nullptr);
  runtime::SchemaMatcher ok(*schema), bad(*schema);
  EXPECT_TRUE(ok.Accept(R"({"q": 7})") && ok.can_end());
  EXPECT_FALSE(bad.Accept(R"({"q": "x"})"));
  StreamedChat s = MergeChatStream(call("lookup", true));
  ASSERT_EQ(s.tool_calls.size(), 1u);
  EXPECT_EQ(json::parse(s.tool_calls[0]["arguments"].get<std::string>()), json({{"q", 1}}));
  for (const char* any_object : {"bare", "odd"}) {  // JSON mode: any object
    HttpResult b = call(any_object, false);
    ASSERT_EQ(b.Json()["choices"][0]["message"]["tool_calls"].size(), 1u) << b.body;
    EXPECT_NE(engine_->last_sampling().token_table, nullptr);
    EXPECT_EQ(engine_->last_sampling().json_schema, nullptr);
  }
}

// tool_choice "required" on a JSON-object format: the prompt ends with "<tool_call>\n" and the
// whole call object is generated under the tools' union (the name, then that tool's arguments).
TEST_F(ServerTest, RequiredToolChoiceConstrainsTheCallObject) {
  text_.features.tool_format = parsers::ToolFormat::kHermes;
  text_.json_mode = true;
  StartServer();
  auto c = Client();
  const json tools = {
      {{"type", "function"}, {"function", {{"name", "lookup"}, {"parameters",
          {{"type", "object"}, {"properties", {{"q", {{"type", "integer"}}}}}, {"required", {"q"}}}}}}},
      {{"type", "function"}, {"function", {{"name", "ping"}}}}};
  HttpResult r = c.Post("/v1/chat/completions",
                        Chat("SAY:{\"name\": \"lookup\", \"arguments\": {\"q\": 2}}",
                             {{"tools", tools}, {"tool_choice", "required"}}));
  json msg = r.Json()["choices"][0]["message"];
  ASSERT_EQ(msg["tool_calls"].size(), 1u) << r.body;
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "lookup");
  EXPECT_EQ(json::parse(msg["tool_calls"][0]["function"]["arguments"].get<std::string>()), json({{"q", 2}}));
  EXPECT_NE(engine_->last_prompt().find("<tool_call>\n"), std::string::npos);
  const auto schema = engine_->last_sampling().json_schema;
  ASSERT_NE(schema, nullptr);
  runtime::SchemaMatcher ok(*schema), wrong_args(*schema), unknown(*schema);
  EXPECT_TRUE(ok.Accept(R"({"name": "ping", "arguments": {"any": [1]}})") && ok.can_end());
  EXPECT_FALSE(wrong_args.Accept(R"({"name": "lookup", "arguments": {"q": "x"}})"));
  EXPECT_FALSE(unknown.Accept(R"({"name": "pong")"));
}

TEST_F(ServerTest, ReasoningContent) {
  text_.features.think_tags = true;
  StartServer();
  auto c = Client();
  HttpResult r = c.Post("/v1/chat/completions", Chat("SAY:<think>2+2=4</think>It is 4."));
  EXPECT_EQ(r.Json()["choices"][0]["message"]["reasoning_content"], "2+2=4");
  EXPECT_EQ(r.Json()["choices"][0]["message"]["content"], "It is 4.");
  StreamedChat s = MergeChatStream(c.Post("/v1/chat/completions", Chat("SAY:<think>hmm</think>Yes.", {{"stream", true}})));
  EXPECT_EQ(s.reasoning, "hmm");
  EXPECT_EQ(s.content, "Yes.");
}

TEST_F(ServerTest, ModelsHealthTokenizeDetokenize) {
  ServerConfig cfg;
  cfg.served_model_name = "my-model";
  StartServer(cfg);
  auto c = Client();
  json models = c.Get("/v1/models").Json();
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["id"], "my-model");
  EXPECT_EQ(models["data"][0]["object"], "model");
  EXPECT_EQ(c.Get("/health").status, 200);
  json tok = c.Post("/tokenize", {{"prompt", "héllo"}}).Json();
  EXPECT_EQ(tok["count"], 6);
  EXPECT_EQ(tok["tokens"][1], 0xC3);
  json detok = c.Post("/detokenize", {{"tokens", tok["tokens"]}}).Json();
  EXPECT_EQ(detok["prompt"], "héllo");
  EXPECT_EQ(c.Post("/detokenize", {{"tokens", {1, 999}}}).status, 400);
  // The served name is the only accepted model.
  EXPECT_EQ(c.Post("/v1/chat/completions", Chat("SAY:x")).status, 400);
  json ok = Chat("SAY:x");
  ok["model"] = "my-model";
  EXPECT_EQ(c.Post("/v1/chat/completions", ok).status, 200);
}

TEST_F(ServerTest, MetricsExposition) {
  StartServer();
  auto c = Client();
  c.Post("/v1/chat/completions", Chat("SAY:some tokens here", {{"stream", true}}));
  c.Post("/v1/chat/completions", Chat("SAY:x", {{"temperature", 9}}));
  HttpResult m = c.Get("/metrics");
  ASSERT_EQ(m.status, 200);
  for (const char* name :
       {"peregrine_http_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"} 1",
        "peregrine_http_requests_total{endpoint=\"/v1/chat/completions\",status=\"400\"} 1",
        "peregrine_time_to_first_token_seconds_count 1", "peregrine_inter_token_latency_seconds_count",
        "peregrine_time_per_output_token_seconds_count 1", "peregrine_e2e_request_latency_seconds_count 1",
        "peregrine_prompt_tokens_total", "peregrine_generation_tokens_total 17"  /* 16 + EOS */,
        "peregrine_prefix_cache_hit_tokens_total", "peregrine_kv_pages{state=\"used\"} 0",
        "peregrine_kv_pages{state=\"free\"} 100000", "peregrine_requests{state=\"running\"} 0",
        "peregrine_requests{state=\"waiting\"} 0"}) {
    EXPECT_NE(m.body.find(name), std::string::npos) << name << "\n" << m.body;
  }
}

}  // namespace
}  // namespace pg::server::testing
