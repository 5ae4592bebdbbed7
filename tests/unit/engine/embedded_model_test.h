// Test fixture base: the embedded model (SmolLM2-135M-Instruct, scripts/lib/setup.sh fetches
// it) loaded once per suite, with helpers to tokenize a prompt, build a greedy request and run
// one request to its end.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "engine/local_engine.h"
#include "engine/model_bundle.h"
#include "event_collector.h"
#include "models/loader.h"

namespace pg::engine::test_util {

class EmbeddedModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(std::filesystem::exists(models::EmbeddedModelPath()))
        << "embedded model missing: run scripts/lib/setup.sh";
    bundle_ = new ModelBundle(LoadBundle({.progress_bar = false}));
  }
  static void TearDownTestSuite() {
    delete bundle_;
    bundle_ = nullptr;
  }

  static std::vector<int32_t> Prompt(const std::string& text) {
    return bundle_->tokenizer->Encode(text, {.add_bos = false, .parse_special = true});
  }
  static Request Greedy(std::vector<int32_t> prompt, int max_tokens, std::string session = "") {
    Request r;
    r.prompt_tokens = std::move(prompt);
    r.sampling.temperature = 0;
    r.sampling.max_tokens = max_tokens;
    r.session_id = std::move(session);
    return r;
  }
  static Result Run(LocalEngine& e, Request r) {
    Collector c;
    e.Submit(std::move(r), c.Callback());
    return c.Wait();
  }
  static inline ModelBundle* bundle_ = nullptr;
};

}  // namespace pg::engine::test_util
