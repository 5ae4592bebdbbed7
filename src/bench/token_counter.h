// Counting tokens the way the served model does, through the server's /tokenize endpoint.
// Two request shapes exist:
//   vLLM / SGLang / Peregrine: POST /tokenize {"model": M, "prompt": text} -> {"tokens": [...],
//                              "count": N, ...}
//   llama.cpp llama-server:    POST /tokenize {"content": text}            -> {"tokens": [...]}
// When neither answers, a chars/4 estimate is used and a warning is logged (token targets of
// the synthetic generator are then approximate).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "bench/http_client.h"

namespace pg::bench {

class TokenCounter {
 public:
  virtual ~TokenCounter() = default;
  // Tokens of `text` alone (no chat template; special tokens as the server adds them).
  virtual int64_t Count(std::string_view text) = 0;
  // "vllm", "llama.cpp", "estimate" or a test name: recorded in the result JSON.
  virtual std::string Name() const = 0;
};

// ceil(bytes / 4): the usual rough figure for English text and code under BPE vocabularies.
class CharEstimateCounter final : public TokenCounter {
 public:
  int64_t Count(std::string_view text) override {
    return static_cast<int64_t>((text.size() + 3) / 4);
  }
  std::string Name() const override { return "estimate"; }
};

enum class TokenizeShape { kVllm, kLlamaCpp };

class ServerTokenCounter final : public TokenCounter {
 public:
  ServerTokenCounter(HttpClientParams client, std::string model, TokenizeShape shape)
      : client_(std::move(client)), model_(std::move(model)), shape_(shape) {}
  // Throws pg::Error(kIo / kMalformed) when the server fails or answers in another shape.
  int64_t Count(std::string_view text) override;
  std::string Name() const override { return shape_ == TokenizeShape::kVllm ? "vllm" : "llama.cpp"; }

 private:
  HttpClient client_;
  std::string model_;
  TokenizeShape shape_;
};

// Probes the server with a short text in both shapes (vLLM first); falls back to the
// estimate with a warning. Never throws for an unreachable /tokenize.
std::unique_ptr<TokenCounter> MakeTokenCounter(const HttpClientParams& client,
                                               const std::string& model);

}  // namespace pg::bench
