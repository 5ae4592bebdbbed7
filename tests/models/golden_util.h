// Reading the goldens made by tools/golden/make_*_goldens.py (HF transformers, float32):
// <dir>/golden.json lists cases {prompt_ids, greedy_ids, top1_margins, logits_file}; each
// logits file is the full-vocab float32 logits after the prompt.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace pg::testing {

struct GoldenCase {
  std::vector<int32_t> prompt, greedy;
  std::vector<float> margins;  // HF's top-1 minus top-2 logit at each greedy step
  std::vector<float> logits;   // [vocab] after the prompt
};

inline std::vector<GoldenCase> LoadGolden(const std::string& dir) {
  std::ifstream in(dir + "/golden.json");
  EXPECT_TRUE(in.good()) << dir << "/golden.json cannot be read";
  nlohmann::json j = nlohmann::json::parse(in);
  std::vector<GoldenCase> cases;
  for (const auto& c : j["cases"]) {
    GoldenCase g;
    g.prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    g.greedy = c["greedy_ids"].get<std::vector<int32_t>>();
    if (c.contains("top1_margins")) g.margins = c["top1_margins"].get<std::vector<float>>();
    std::ifstream lf(dir + "/" + c["logits_file"].get<std::string>(), std::ios::binary);
    lf.seekg(0, std::ios::end);
    g.logits.resize(size_t(lf.tellg()) / 4);
    lf.seekg(0);
    lf.read(reinterpret_cast<char*>(g.logits.data()), std::streamsize(g.logits.size() * 4));
    EXPECT_FALSE(g.logits.empty()) << dir << ": empty logits file";
    cases.push_back(std::move(g));
  }
  return cases;
}

}  // namespace pg::testing
