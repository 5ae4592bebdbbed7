// Request validation and response shapes (no HTTP).
#include "server/protocol.h"

#include <gtest/gtest.h>

#include "runtime/json_schema.h"

namespace pg::server {
namespace {

json Msgs() { return json::array({{{"role", "user"}, {"content", "hi"}}}); }

int StatusOf(const json& body) {
  try {
    ParseChatRequest(body);
  } catch (const ApiError& e) {
    return e.status;
  }
  return 200;
}

std::string ParamOf(const json& body) {
  try {
    ParseChatRequest(body);
  } catch (const ApiError& e) {
    return e.param;
  }
  return "";
}

TEST(ChatRequest, ParsesSamplingFields) {
  ChatRequest r = ParseChatRequest({{"messages", Msgs()},
                                    {"model", "m"},
                                    {"temperature", 0.3},
                                    {"top_p", 0.9},
                                    {"top_k", 40},
                                    {"min_p", 0.05},
                                    {"seed", 1234},
                                    {"max_completion_tokens", 77},
                                    {"presence_penalty", 0.5},
                                    {"frequency_penalty", -0.5},
                                    {"repetition_penalty", 1.1},
                                    {"stop", {"###", "END"}},
                                    {"logprobs", true},
                                    {"top_logprobs", 3},
                                    {"stream", true},
                                    {"stream_options", {{"include_usage", true}}},
                                    {"ignore_eos", true},
                                    {"response_format", {{"type", "text"}}},  // the default: accepted
                                    {"logit_bias", json::object()},           // empty: accepted
                                    {"session_id", "conv-9"}});
  const auto& s = r.options.sampling;
  EXPECT_FLOAT_EQ(s.temperature, 0.3f);
  EXPECT_FLOAT_EQ(s.top_p, 0.9f);
  EXPECT_EQ(s.top_k, 40);
  EXPECT_FLOAT_EQ(s.min_p, 0.05f);
  ASSERT_TRUE(s.seed.has_value());
  EXPECT_EQ(*s.seed, 1234u);
  EXPECT_EQ(s.max_tokens, 77);
  EXPECT_TRUE(r.options.max_tokens_given);
  EXPECT_FLOAT_EQ(s.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(s.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(s.repetition_penalty, 1.1f);
  EXPECT_EQ(r.options.stop, (std::vector<std::string>{"###", "END"}));
  EXPECT_EQ(s.top_logprobs, 3);
  EXPECT_TRUE(r.options.stream && r.options.include_usage);
  EXPECT_TRUE(s.ignore_eos);
  EXPECT_EQ(r.options.session_id, "conv-9");
}

TEST(ChatRequest, NormalisesContentPartsAndRoles) {
  ChatRequest r = ParseChatRequest(
      {{"messages",
        {{{"role", "developer"}, {"content", "be brief"}},
         {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}},
         {{"role", "assistant"}, {"content", nullptr},
          {"tool_calls", {{{"id", "call_1"}, {"type", "function"},
                           {"function", {{"name", "f"}, {"arguments", "{\"x\":1}"}}}}}}},
         {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "42"}}}}});
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0]["role"], "system");
  EXPECT_EQ(r.messages[1]["content"], "ab");
  EXPECT_TRUE(r.messages[2]["content"].is_null());
  EXPECT_EQ(r.messages[2]["tool_calls"][0]["function"]["arguments"], "{\"x\":1}");
  EXPECT_EQ(r.messages[3]["tool_call_id"], "call_1");
  EXPECT_FALSE(r.options.max_tokens_given);
  EXPECT_EQ(r.options.sampling.top_logprobs, -1);
}

TEST(ChatRequest, RejectsWrongTypesAndRanges) {
  const std::vector<std::pair<json, std::string>> bad = {
      {{{"messages", "hi"}}, "messages"},
      {{{"messages", json::array()}}, "messages"},
      {json::object(), "messages"},
      {{{"messages", Msgs()}, {"temperature", "hot"}}, "temperature"},
      {{{"messages", Msgs()}, {"temperature", 2.5}}, "temperature"},
      {{{"messages", Msgs()}, {"top_p", 0}}, "top_p"},
      {{{"messages", Msgs()}, {"top_p", 1.5}}, "top_p"},
      {{{"messages", Msgs()}, {"max_tokens", 0}}, "max_tokens"},
      {{{"messages", Msgs()}, {"max_tokens", -5}}, "max_tokens"},
      {{{"messages", Msgs()}, {"max_tokens", 3.5}}, "max_tokens"},
      {{{"messages", Msgs()}, {"max_tokens", "10"}}, "max_tokens"},
      {{{"messages", Msgs()}, {"n", 17}}, "n"},
      {{{"messages", Msgs()}, {"n", 0}}, "n"},
      {{{"messages", Msgs()}, {"stop", 5}}, "stop"},
      {{{"messages", Msgs()}, {"stop", {"a", 1}}}, "stop"},
      {{{"messages", Msgs()}, {"stop", {""}}}, "stop"},
      {{{"messages", Msgs()}, {"presence_penalty", 3}}, "presence_penalty"},
      {{{"messages", Msgs()}, {"top_logprobs", 3}}, "top_logprobs"},  // without logprobs
      {{{"messages", Msgs()}, {"logprobs", true}, {"top_logprobs", 21}}, "top_logprobs"},
      {{{"messages", Msgs()}, {"stream", "yes"}}, "stream"},
      {{{"messages", Msgs()}, {"stream_options", {{"include_usage", true}}}}, "stream_options"},
      {{{"messages", {{{"role", "wizard"}, {"content", "x"}}}}}, "messages[0].role"},
      {{{"messages", {{{"role", "user"}}}}}, "messages[0].content"},
      {{{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}}, "messages[0].content"},
      {{{"messages", Msgs()}, {"tools", {{{"type", "function"}, {"function", {{"name", "f"}}}}}},
        {"tool_choice", {{"type", "function"}, {"function", {{"name", "g"}}}}}}, "tool_choice"},
      {{{"messages", Msgs()}, {"tool_choice", "required"}}, "tool_choice"},
      {{{"messages", Msgs()}, {"tools", {{{"type", "function"}}}}}, "tools[0].function"},
      {{{"messages", Msgs()}, {"seed", "abc"}}, "seed"},
      {{{"messages", Msgs()}, {"response_format", {{"type", "json_object"}}}, {"ignore_eos", true}}, "ignore_eos"},
      {{{"messages", Msgs()}, {"response_format", {{"type", "json_object"}}},
        {"tools", {{{"type", "function"}, {"function", {{"name", "f"}}}}}}, {"tool_choice", "required"}},
       "response_format"},
      {{{"messages", Msgs()}, {"response_format", {{"type", "json_schema"}, {"json_schema", json::object()}}}},
       "response_format"},  // no schema
      {{{"messages", Msgs()}, {"response_format", {{"type", "json_schema"},
        {"json_schema", {{"name", "x"}, {"schema", {{"type", "string"}, {"pattern", "(?=a)"}}}}}}}}, "response_format"},
      {{{"messages", Msgs()}, {"guided_json", "{not json"}}, "guided_json"},
      {{{"messages", Msgs()}, {"guided_json", 5}}, "guided_json"},
      {{{"messages", Msgs()}, {"response_format", {{"type", "json_object"}}}, {"guided_json", json::object()}},
       "guided_json"},
      {{{"messages", Msgs()}, {"structured_outputs", {{"grammar", "root ::= x"}}}}, "structured_outputs.grammar"},
      {{{"messages", Msgs()}, {"structured_outputs", {{"structural_tag", "{}"}}}}, "structured_outputs.structural_tag"},
      {{{"messages", Msgs()}, {"grammar", 5}}, "grammar"},
      {{{"messages", Msgs()}, {"grammar", "root ::= root \"a\" | \"b\""}}, "grammar"},
      {{{"messages", Msgs()}, {"guided_regex", "a"}, {"guided_grammar", "root ::= \"a\""}}, "guided_grammar"},
      {{{"messages", Msgs()}, {"structured_outputs", {{"choice", {"a"}}, {"regex", "b"}}}}, "structured_outputs.regex"},
      {{{"messages", Msgs()}, {"structured_outputs", {{"json_object", "yes"}}}}, "structured_outputs.json_object"},
      {{{"messages", Msgs()}, {"structured_outputs", 3}}, "structured_outputs"},
      {{{"messages", Msgs()}, {"response_format", {{"type", "yaml"}}}}, "response_format"},
      {{{"messages", Msgs()}, {"response_format", "json"}}, "response_format"},
      {{{"messages", Msgs()}, {"logit_bias", {{"abc", -100}}}}, "logit_bias"},
      {{{"messages", Msgs()}, {"logit_bias", {{"-1", 5}}}}, "logit_bias"},
      {{{"messages", Msgs()}, {"logit_bias", {{"12x", 5}}}}, "logit_bias"},
      {{{"messages", Msgs()}, {"logit_bias", {{"", 5}}}}, "logit_bias"},
      {{{"messages", Msgs()}, {"logit_bias", {{"7", 100.5}}}}, "logit_bias"},
      {{{"messages", Msgs()}, {"logit_bias", {{"7", "1"}}}}, "logit_bias"},
      {{{"messages", Msgs()}, {"logit_bias", {{"7", 1}, {"07", 2}}}}, "logit_bias"},
      {{{"messages", Msgs()}, {"logit_bias", {1, 2}}}, "logit_bias"},
      {{{"messages", Msgs()}, {"guided_regex", "(a"}}, "guided_regex"},
      {{{"messages", Msgs()}, {"guided_regex", 5}}, "guided_regex"},
      {{{"messages", Msgs()}, {"guided_regex", "a\\1"}}, "guided_regex"},
      {{{"messages", Msgs()}, {"guided_choice", json::array()}}, "guided_choice"},
      {{{"messages", Msgs()}, {"guided_choice", {1, 2}}}, "guided_choice"},
      {{{"messages", Msgs()}, {"guided_regex", "a"}, {"guided_choice", {"a"}}}, "guided_choice"},
      {{{"messages", Msgs()}, {"guided_grammar", "root ::= x"}}, "guided_grammar"},
      {{{"messages", Msgs()}, {"guided_json", json::object()}, {"guided_whitespace_pattern", " "}},
       "guided_whitespace_pattern"},
  };
  for (const auto& [body, param] : bad) {
    SCOPED_TRACE(body.dump());
    EXPECT_EQ(StatusOf(body), 400);
    EXPECT_EQ(ParamOf(body), param);
  }
}

TEST(ChatRequest, ResponseFormatJsonObjectIsJsonMode) {
  EXPECT_TRUE(ParseChatRequest({{"messages", Msgs()}, {"response_format", {{"type", "json_object"}}}})
                  .options.constrained);
  EXPECT_FALSE(ParseChatRequest({{"messages", Msgs()}, {"response_format", {{"type", "text"}}}}).options.constrained);
  EXPECT_FALSE(ParseChatRequest({{"messages", Msgs()}}).options.constrained);
  EXPECT_TRUE(ParseCompletionRequest({{"prompt", "x"}, {"response_format", {{"type", "json_object"}}}}, 100)
                  .options.constrained);
}

// A schema arrives compiled, from response_format json_schema, vLLM's guided_json (object or
// JSON string) or structured_outputs.json; each sets the JSON-output flag.
TEST(ChatRequest, JsonSchemaFormsCompileTheSchema) {
  const json schema = {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}, {"required", {"a"}}};
  const json bodies[] = {
      {{"messages", Msgs()}, {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "s"}, {"schema", schema}}}}}},
      {{"messages", Msgs()}, {"guided_json", schema}},
      {{"messages", Msgs()}, {"guided_json", schema.dump()}},
      {{"messages", Msgs()}, {"structured_outputs", {{"json", schema}}}},
  };
  for (const json& body : bodies) {
    SCOPED_TRACE(body.dump());
    const ChatRequest r = ParseChatRequest(body);
    EXPECT_TRUE(r.options.constrained);
    ASSERT_NE(r.options.sampling.json_schema, nullptr);
    runtime::SchemaMatcher m(*r.options.sampling.json_schema);
    EXPECT_TRUE(m.Accept(R"({"a": 1})") && m.can_end());
    runtime::SchemaMatcher bad(*r.options.sampling.json_schema);
    EXPECT_FALSE(bad.Accept(R"({"b")"));
  }
  EXPECT_EQ(ParseChatRequest({{"messages", Msgs()}, {"response_format", {{"type", "json_object"}}}}).options.sampling.json_schema,
            nullptr);
  EXPECT_NE(ParseCompletionRequest({{"prompt", "x"}, {"guided_json", schema}}, 100).options.sampling.json_schema, nullptr);
}

// vLLM's regex and choice forms arrive compiled (full match: the whole output), each setting
// the constrained flag; structured_outputs.json_object is JSON mode.
TEST(ChatRequest, RegexAndChoiceFormsCompile) {
  const json bodies[] = {
      {{"messages", Msgs()}, {"guided_regex", "(yes|no)!?"}},
      {{"messages", Msgs()}, {"structured_outputs", {{"regex", "(yes|no)!?"}, {"disable_fallback", true}}}},
      {{"messages", Msgs()}, {"guided_choice", {"yes", "no", "yes!", "no!"}}},
      {{"messages", Msgs()}, {"structured_outputs", {{"choice", {"yes", "no", "yes!", "no!"}}}}},
  };
  for (const json& body : bodies) {
    SCOPED_TRACE(body.dump());
    const ChatRequest r = ParseChatRequest(body);
    EXPECT_TRUE(r.options.constrained);
    EXPECT_EQ(r.options.sampling.json_schema, nullptr);
    ASSERT_NE(r.options.sampling.regex, nullptr);
    for (const char* ok : {"yes", "no!"}) EXPECT_TRUE(r.options.sampling.regex->FullMatch(ok)) << ok;
    for (const char* bad : {"", "yes!!", "maybe", "xyes"}) EXPECT_FALSE(r.options.sampling.regex->FullMatch(bad)) << bad;
  }
  const ChatRequest mode = ParseChatRequest({{"messages", Msgs()}, {"structured_outputs", {{"json_object", true}}}});
  EXPECT_TRUE(mode.options.constrained);
  EXPECT_EQ(mode.options.sampling.regex, nullptr);
  EXPECT_EQ(mode.options.sampling.json_schema, nullptr);
  EXPECT_NE(ParseCompletionRequest({{"prompt", "x"}, {"guided_regex", "[a-z]+"}}, 100).options.sampling.regex, nullptr);
}

// A GBNF grammar from vLLM's guided_grammar or structured_outputs.grammar, or llama.cpp's
// grammar field, arrives compiled.
TEST(ChatRequest, GrammarFormsCompile) {
  const std::string g = "root ::= (\"yes\" | \"no\") \"!\"?";
  const json bodies[] = {
      {{"messages", Msgs()}, {"guided_grammar", g}},
      {{"messages", Msgs()}, {"structured_outputs", {{"grammar", g}}}},
      {{"messages", Msgs()}, {"grammar", g}},
  };
  for (const json& body : bodies) {
    SCOPED_TRACE(body.dump());
    const ChatRequest r = ParseChatRequest(body);
    EXPECT_TRUE(r.options.constrained);
    ASSERT_NE(r.options.sampling.grammar, nullptr);
    EXPECT_EQ(r.options.sampling.regex, nullptr);
  }
  EXPECT_NE(ParseCompletionRequest({{"prompt", "x"}, {"grammar", g}}, 100).options.sampling.grammar, nullptr);
}

TEST(ChatRequest, LogitBiasIsSortedById) {
  const auto bias = ParseChatRequest({{"messages", Msgs()}, {"logit_bias", {{"50256", -100}, {"7", 2.5}, {"0", 100}}}})
                        .options.sampling.logit_bias;
  const std::vector<std::pair<int32_t, float>> want = {{0, 100.0f}, {7, 2.5f}, {50256, -100.0f}};
  EXPECT_EQ(bias, want);
  EXPECT_TRUE(ParseCompletionRequest({{"prompt", "x"}, {"logit_bias", {{"3", -1}}}}, 100).options.sampling.logit_bias ==
              (std::vector<std::pair<int32_t, float>>{{3, -1.0f}}));
}

TEST(ChatRequest, ToolChoiceForms) {
  json tools = {{{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", {{"type", "object"}}}}}}};
  EXPECT_EQ(ParseChatRequest({{"messages", Msgs()}, {"tools", tools}}).tool_choice, ToolChoice::kAuto);
  EXPECT_EQ(ParseChatRequest({{"messages", Msgs()}, {"tools", tools}, {"tool_choice", "none"}}).tool_choice,
            ToolChoice::kNone);
  EXPECT_EQ(ParseChatRequest({{"messages", Msgs()}, {"tools", tools}, {"tool_choice", "required"}}).tool_choice,
            ToolChoice::kRequired);
  ChatRequest named = ParseChatRequest(
      {{"messages", Msgs()}, {"tools", tools},
       {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}});
  EXPECT_EQ(named.tool_choice, ToolChoice::kNamed);
  EXPECT_EQ(named.tool_choice_name, "get_weather");
}

TEST(CompletionRequest, PromptForms) {
  EXPECT_EQ(ParseCompletionRequest({{"prompt", "abc"}}, 100).prompt_text, "abc");
  auto t = ParseCompletionRequest({{"prompt", {5, 7, 99}}}, 100);
  EXPECT_TRUE(t.prompt_is_tokens);
  EXPECT_EQ(t.prompt_tokens, (std::vector<int32_t>{5, 7, 99}));
  auto lp = ParseCompletionRequest({{"prompt", "x"}, {"logprobs", 2}, {"echo", true}}, 100);
  EXPECT_TRUE(lp.options.logprobs);
  EXPECT_EQ(lp.options.sampling.top_logprobs, 2);
  EXPECT_TRUE(lp.options.echo);
  for (const json& bad : {json{{"prompt", {5, 100}}}, json{{"prompt", {-1}}}, json{{"prompt", 3}},
                          json::object(), json{{"prompt", {"a", "b"}}}, json{{"prompt", "x"}, {"logprobs", 9}},
                          json{{"prompt", "x"}, {"best_of", 2}},
                          json{{"prompt", "x"}, {"response_format", {{"type", "json_schema"}}}},
                          json{{"prompt", "x"}, {"guided_regex", "[a-z"}}}) {
    SCOPED_TRACE(bad.dump());
    EXPECT_THROW(ParseCompletionRequest(bad, 100), ApiError);
  }
}

TEST(Protocol, BodyAndErrorShapes) {
  EXPECT_THROW(ParseBody("{\"a\": "), ApiError);
  EXPECT_THROW(ParseBody("[1, 2]"), ApiError);
  const json e = ErrorBody(ApiError(401, "bad key", "", "invalid_api_key"));
  EXPECT_EQ(e["error"]["type"], "authentication_error");
  EXPECT_EQ(e["error"]["message"], "bad key");
  EXPECT_TRUE(e["error"]["param"].is_null());
  EXPECT_EQ(e["error"]["code"], "invalid_api_key");
  const json u = UsageJson(10, 5, 8);
  EXPECT_EQ(u["total_tokens"], 15);
  EXPECT_EQ(u["prompt_tokens_details"]["cached_tokens"], 8);
  EXPECT_STREQ(FinishReasonString(engine::FinishReason::kStop, true), "tool_calls");
  EXPECT_STREQ(FinishReasonString(engine::FinishReason::kLength, true), "length");
}

}  // namespace
}  // namespace pg::server
