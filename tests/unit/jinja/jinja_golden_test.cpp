// Byte-identical renders against Python jinja2 (configured as Hugging Face transformers does),
// from goldens made by tools/golden/chat_template_goldens.py:
//  * goldens.json: the published SmolLM2, Qwen3, Llama-3.1, DeepSeek-V3.1 and Kimi-K2 chat
//    templates over conversations with system prompts, multi-turn, tools, tool calls/results,
//    reasoning content; cases where jinja2 raised must raise here too.
//  * feature_goldens.json: one small template per interpreter feature.
//  * corpus_goldens.json: all 70 templates of llama.cpp's models/templates (as vendored in the
//    llama-cpp-python 0.3.36 sdist) over the same conversations; outputs as length + FNV-1a.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
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

// ---- corpus of published templates (hash goldens) ----

std::string Fnv1a64(const std::string& s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001B3ull;
  }
  return fmt::format("{:016x}", h);
}

class CorpusGolden : public ::testing::TestWithParam<std::string> {
 public:
  static const Json& Data() {
    static const Json data = Json::parse(ReadFile(kDataDir + "corpus_goldens.json"));
    return data;
  }
  static std::vector<std::string> Names() {
    std::vector<std::string> names;
    for (auto it = Data().at("templates").begin(); it != Data().at("templates").end(); ++it) names.push_back(it.key());
    return names;
  }
};

TEST_P(CorpusGolden, MatchesJinja2) {
  const Json& data = Data();
  const Json& entry = data.at("templates").at(GetParam());
  ChatTemplate tmpl(ReadFile(kDataDir + "corpus/" + GetParam()), data.at("bos_token"), data.at("eos_token"),
                    GoldenOptions());
  std::map<std::string, const Json*> conversations;
  for (const auto& c : data.at("conversations")) conversations[c.at("name")] = &c;
  for (const auto& r : entry.at("cases")) {
    const Json& conv = *conversations.at(r.at("conversation"));
    SCOPED_TRACE(r.at("conversation").get<std::string>() + " agp=" + (r.at("add_generation_prompt").get<bool>() ? "1" : "0"));
    ChatRenderParams p;
    p.messages = conv.at("messages");
    p.tools = conv.at("tools");
    p.add_generation_prompt = r.at("add_generation_prompt");
    p.extra_kwargs = conv.at("kwargs");
    if (r.contains("error")) {
      EXPECT_THROW(tmpl.Render(p), TemplateError) << "jinja2 raised: " << r.at("error").get<std::string>();
      continue;
    }
    std::string out = tmpl.Render(p);
    EXPECT_EQ(out.size(), r.at("length").get<size_t>());
    EXPECT_EQ(Fnv1a64(out), r.at("fnv1a64").get<std::string>());
  }
}

INSTANTIATE_TEST_SUITE_P(Corpus, CorpusGolden, ::testing::ValuesIn(CorpusGolden::Names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return TestName(info.param, info.index); });

// Two corpus templates need variables no conversation passes (firefunction's `functions`,
// command-r-plus's `datetime`) and fail in jinja2 too; every other one must render cases.
TEST(CorpusGoldenCoverage, AllTemplatesPresentAndMostRender) {
  EXPECT_GE(CorpusGolden::Names().size(), 70u);
  size_t num_templates_rendered = 0, num_cases_rendered = 0;
  for (const auto& [name, entry] : CorpusGolden::Data().at("templates").items()) {
    size_t n = 0;
    for (const auto& r : entry.at("cases")) n += !r.contains("error");
    num_templates_rendered += n > 0;
    num_cases_rendered += n;
  }
  EXPECT_GE(num_templates_rendered, 68u);
  EXPECT_GE(num_cases_rendered, 2000u);
}

}  // namespace
}  // namespace pg::jinja
