// The real chat templates (vendored in tests/data/chat_templates) against the tool-call
// parsers: each template renders an assistant turn with tool calls in its own markup, and the
// detected parser must recover exactly the calls that were rendered (the template is the
// oracle for the markup).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "server/tokenizer_text_model.h"
#include "tokenizer/parsers/tool_call_parser.h"

namespace pg::server {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Case {
  const char* file;
  parsers::ToolFormat format;
  const char* assistant_header;  // the rendered assistant turn starts after the last one
};

TEST(TemplateToolMarkup, DetectedParserRecoversRenderedCalls) {
  const std::vector<Case> cases = {
      {"Qwen-Qwen3-0.6B.jinja", parsers::ToolFormat::kHermes, "<|im_start|>assistant\n"},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", parsers::ToolFormat::kLlama31,
       "<|start_header_id|>assistant<|end_header_id|>\n\n"},
      {"deepseek-ai-DeepSeek-V3.1.jinja", parsers::ToolFormat::kDeepSeekV3, "<｜Assistant｜>"},
      {"moonshotai-Kimi-K2.jinja", parsers::ToolFormat::kKimiK2, "<|im_middle|>"},
      {"HuggingFaceTB-SmolLM2-135M-Instruct.jinja", parsers::ToolFormat::kNone, ""},
  };
  const json args = {{"city", "Zürich"}, {"days", 3}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.file);
    const std::string source = ReadFile(std::string("tests/data/chat_templates/") + c.file);
    EXPECT_EQ(DetectToolFormat(source), c.format);
    if (c.format == parsers::ToolFormat::kNone) continue;
    jinja::ChatTemplate tmpl(source, "<s>", "</s>");
    ordered_json messages = ordered_json::array();
    messages.push_back({{"role", "user"}, {"content", "Weather?"}});
    ordered_json call = {{"id", "functions.get_weather:0"}, {"type", "function"},
                         {"function", {{"name", "get_weather"}, {"arguments", args.dump()}}}};
    messages.push_back({{"role", "assistant"}, {"content", ""}, {"tool_calls", ordered_json::array({call})}});
    ordered_json tools = ordered_json::array(
        {{{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", {{"type", "object"}}}}}}});
    std::string rendered = tmpl.Render(MessagesForTemplate(messages), tools, /*add_generation_prompt=*/false);
    const size_t at = rendered.rfind(c.assistant_header);
    ASSERT_NE(at, std::string::npos) << rendered;
    std::string turn = rendered.substr(at + std::string(c.assistant_header).size());
    auto parser = parsers::MakeToolCallParser(c.format);
    parsers::ToolCallAccumulator acc;
    acc.Add(parser->Feed(turn));
    acc.Add(parser->Finish());
    ASSERT_EQ(acc.calls.size(), 1u) << turn;
    EXPECT_EQ(acc.calls[0].name, "get_weather");
    EXPECT_EQ(json::parse(acc.calls[0].arguments), args) << turn;
  }
}

}  // namespace
}  // namespace pg::server
