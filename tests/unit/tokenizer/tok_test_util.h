// Shared loading for the tokenizer tests: tokenizers and goldens are loaded once per process.
#pragma once

#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace pg::tokenizer::testing {

inline const std::string kDataDir = "tests/data/tokenizer/";
inline const std::string kEmbeddedModel = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "missing test data " << path;
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

inline const nlohmann::json& Goldens(const std::string& name) {
  static std::map<std::string, nlohmann::json> cache;
  auto it = cache.find(name);
  if (it == cache.end())
    it = cache.emplace(name, nlohmann::json::parse(ReadFile(kDataDir + "goldens_" + name + ".json")))
             .first;
  return it->second;
}

// "smollm2_added" is smollm2.tokenizer.json with smollm2_added.patch.json applied.
inline const Tokenizer& HfTokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    std::unique_ptr<Tokenizer> tok;
    if (name == "smollm2_added") {
      auto base = nlohmann::json::parse(ReadFile(kDataDir + "smollm2.tokenizer.json"));
      const auto patch = nlohmann::json::parse(ReadFile(kDataDir + "smollm2_added.patch.json"));
      for (const auto& t : patch["added_tokens"]) base["added_tokens"].push_back(t);
      base["post_processor"] = patch["post_processor"];
      tok = Tokenizer::FromHfJsonText(base.dump(), name);
    } else {
      tok = Tokenizer::FromHfJson(kDataDir + name + ".tokenizer.json");
    }
    it = cache.emplace(name, std::move(tok)).first;
  }
  return *it->second;
}

}  // namespace pg::tokenizer::testing
