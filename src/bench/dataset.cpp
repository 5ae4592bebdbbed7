#include "bench/dataset.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "core/status.h"

namespace pg::bench {

using nlohmann::json;

namespace {

std::string ContentText(const json& content, std::string_view where) {
  if (content.is_string()) return content.get<std::string>();
  PG_ENSURE(content.is_array(), kMalformed, "{}: \"content\" must be a string or a list of parts",
            where);
  std::string text;
  bool first = true;
  for (const json& part : content) {
    std::string piece;
    if (part.is_string()) {
      piece = part.get<std::string>();
    } else if (part.is_object() && part.value("type", "") == "text" && part.contains("text") &&
               part["text"].is_string()) {
      piece = part["text"].get<std::string>();
    } else {
      continue;  // non-text parts (images) carry no text for a text benchmark
    }
    if (!first) text.push_back('\n');
    text += piece;
    first = false;
  }
  return text;
}

ChatMessage ParseMessage(const json& m, const std::string& where) {
  PG_ENSURE(m.is_object(), kMalformed, "{}: a message must be an object", where);
  PG_ENSURE(m.contains("role") && m["role"].is_string(), kMalformed,
            "{}: message has no string \"role\"", where);
  PG_ENSURE(m.contains("content"), kMalformed, "{}: message has no \"content\"", where);
  ChatMessage out;
  out.role = m["role"].get<std::string>();
  PG_ENSURE(out.role == "system" || out.role == "user" || out.role == "assistant" ||
                out.role == "tool",
            kMalformed, "{}: unknown role '{}'", where, out.role);
  out.content = ContentText(m["content"], where);
  return out;
}

}  // namespace

Dataset ParseEvalscopeJson(std::string_view json_text, std::string_view source) {
  json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  PG_ENSURE(!root.is_discarded(), kMalformed, "{}: not valid JSON", source);
  PG_ENSURE(root.is_object() && root.contains("conversations"), kMalformed,
            "{}: expected an object with a \"conversations\" list", source);
  const json& convs = root["conversations"];
  PG_ENSURE(convs.is_array(), kMalformed, "{}: \"conversations\" must be a list", source);
  Dataset out;
  for (size_t c = 0; c < convs.size(); ++c) {
    const json& conv = convs[c];
    PG_ENSURE(conv.is_array(), kMalformed, "{}: conversation {} must be a list of turns", source,
              c);
    if (conv.empty()) {
      ++out.num_skipped_empty;
      continue;
    }
    Conversation parsed;
    for (size_t t = 0; t < conv.size(); ++t) {
      const std::string where = fmt::format("{}: conversation {} turn {}", source, c, t);
      const json& turn = conv[t];
      PG_ENSURE(turn.is_object() && turn.contains("messages") && turn["messages"].is_array(),
                kMalformed, "{}: a turn must be an object with a \"messages\" list", where);
      PG_ENSURE(!turn["messages"].empty(), kMalformed, "{}: \"messages\" is empty", where);
      Turn parsed_turn;
      for (size_t m = 0; m < turn["messages"].size(); ++m) {
        parsed_turn.messages.push_back(
            ParseMessage(turn["messages"][m], fmt::format("{} message {}", where, m)));
      }
      if (turn.contains("prompt_tokens") && !turn["prompt_tokens"].is_null()) {
        const json& pt = turn["prompt_tokens"];
        PG_ENSURE(pt.is_number_integer() && pt.get<int64_t>() >= 0, kMalformed,
                  "{}: \"prompt_tokens\" must be a non-negative integer", where);
        parsed_turn.prompt_tokens = pt.get<int64_t>();
      }
      parsed.turns.push_back(std::move(parsed_turn));
    }
    out.conversations.push_back(std::move(parsed));
  }
  return out;
}

Dataset LoadEvalscopeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  PG_ENSURE(in.good(), kNotFound, "dataset file '{}' cannot be opened", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ParseEvalscopeJson(ss.str(), path);
}

std::string DatasetToEvalscopeJson(const Dataset& dataset) {
  json convs = json::array();
  for (const Conversation& conv : dataset.conversations) {
    json turns = json::array();
    for (const Turn& turn : conv.turns) {
      json msgs = json::array();
      for (const ChatMessage& m : turn.messages) {
        msgs.push_back({{"role", m.role}, {"content", m.content}});
      }
      json t = {{"messages", std::move(msgs)}};
      if (turn.prompt_tokens >= 0) t["prompt_tokens"] = turn.prompt_tokens;
      turns.push_back(std::move(t));
    }
    convs.push_back(std::move(turns));
  }
  return json{{"conversations", std::move(convs)}}.dump();
}

}  // namespace pg::bench
