// Byte-identical renders against Python jinja2 (configured as Hugging Face transformers does),
// from goldens made by tools/golden/chat_template_goldens.py:
//  * goldens.json: the published SmolLM2, Qwen3, Llama-3.1, DeepSeek-V3.1 and Kimi-K2 chat
//    templates over conversations with system prompts, multi-turn, tools, tool calls/results,
//    reasoning content; cases where jinja2 raised must raise here too.
//  * feature_goldens.json: one small template per interpreter feature.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "tokenizer/jinja/chat_template.h"

namespace pg::jinja {
namespace {

using Json = nlohmann::ordered_json;

const std::string kDataDir = "tests/data/chat_templates/";

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "missing test data " << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Json LoadCases(const std::string& file) {
  Json j = Json::parse(ReadFile(kDataDir + file));
  return j.at("cases");
}

// The golden script pins strftime_now to 2024-07-26 14:05:09 (a Friday, day 208 of the year).
TemplateOptions GoldenOptions() {
  std::tm tm{};
  tm.tm_year = 2024 - 1900;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_hour = 14;
  tm.tm_min = 5;
  tm.tm_sec = 9;
  tm.tm_wday = 5;
  tm.tm_yday = 207;
  TemplateOptions o;
  o.now = tm;
  return o;
}

std::string TestName(const std::string& raw, size_t index) {
  std::string out;
  for (char c : raw) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out + "_" + std::to_string(index);
}

// ---- full chat templates ----

class ChatTemplateGolden : public ::testing::TestWithParam<size_t> {
 public:
  static const Json& Cases() {
    static const Json cases = LoadCases("goldens.json");
    return cases;
  }
};

TEST_P(ChatTemplateGolden, MatchesJinja2) {
  const Json& c = Cases()[GetParam()];
  ChatTemplate tmpl(ReadFile(kDataDir + c.at("file").get<std::string>()), c.at("bos_token"), c.at("eos_token"),
                    GoldenOptions());
  ChatRenderParams p;
  p.messages = c.at("messages");
  p.tools = c.at("tools");
  p.add_generation_prompt = c.at("add_generation_prompt");
  p.extra_kwargs = c.at("kwargs");
  if (c.contains("expected")) {
    EXPECT_EQ(tmpl.Render(p), c.at("expected").get<std::string>());
    return;
  }
  // jinja2 raised: so must we. A template's own raise_exception keeps its exact message.
  try {
    std::string out = tmpl.Render(p);
    ADD_FAILURE() << "expected an error like jinja2's '" << c.at("error").get<std::string>() << "', got output:\n" << out;
  } catch (const TemplateError& e) {
    if (c.at("error_type") == "TemplateError") {
      EXPECT_TRUE(e.raised_by_template());
      EXPECT_EQ(std::string(e.what()), c.at("error").get<std::string>());
    } else {
      EXPECT_FALSE(e.raised_by_template()) << e.what();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Templates, ChatTemplateGolden,
                         ::testing::Range<size_t>(0, ChatTemplateGolden::Cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           const Json& c = ChatTemplateGolden::Cases()[info.param];
                           return TestName(c.at("template").get<std::string>() + "_" + c.at("name").get<std::string>(),
                                           info.param);
                         });

TEST(ChatTemplateGoldenCoverage, EveryTemplateHasRenderedCases) {
  std::map<std::string, int> rendered;
  for (const auto& c : ChatTemplateGolden::Cases()) rendered[c.at("template")] += c.contains("expected");
  for (const char* name : {"smollm2", "qwen3", "llama31", "deepseek_v31", "kimi_k2"}) {
    EXPECT_GE(rendered[name], 20) << name;
  }
}

// ---- one feature per template ----

class FeatureGolden : public ::testing::TestWithParam<size_t> {
 public:
  static const Json& Cases() {
    static const Json cases = LoadCases("feature_goldens.json");
    return cases;
  }
};

TEST_P(FeatureGolden, MatchesJinja2) {
  const Json& c = Cases()[GetParam()];
  const std::string src = c.at("template");
  if (c.contains("expected")) {
    Template t(src, GoldenOptions());
    EXPECT_EQ(t.Render(c.at("context")), c.at("expected").get<std::string>()) << "template: " << src;
    return;
  }
  try {
    Template t(src, GoldenOptions());
    std::string out = t.Render(c.at("context"));
    ADD_FAILURE() << "expected an error like jinja2's '" << c.at("error").get<std::string>() << "', got: " << out;
  } catch (const TemplateError& e) {
    std::string msg = e.what();
    if (c.at("error_type") == "TemplateError") {
      EXPECT_TRUE(e.raised_by_template());
      EXPECT_EQ(msg, c.at("error").get<std::string>());
    }
    if (c.contains("error_line")) {
      EXPECT_NE(msg.find("syntax error at line " + std::to_string(c.at("error_line").get<int>()) + ","),
                std::string::npos) << msg;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Features, FeatureGolden, ::testing::Range<size_t>(0, FeatureGolden::Cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return TestName(FeatureGolden::Cases()[info.param].at("name").get<std::string>(), info.param);
                         });

}  // namespace
}  // namespace pg::jinja
