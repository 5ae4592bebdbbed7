// Per-request sampling parameters (OpenAI / vLLM semantics).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace pg::runtime {

struct TokenTable;  // runtime/token_mask.h
class JsonSchema;  // runtime/json_schema.h
class Regex;       // runtime/regex.h
class Grammar;     // runtime/grammar.h

struct SamplingParams {
  float temperature = 1.0f;   // 0 = greedy
  float top_p = 1.0f;         // (0, 1]
  int top_k = 0;              // 0 = off
  float min_p = 0.0f;         // [0, 1]
  float presence_penalty = 0.0f;    // subtracted once from every token already generated
  float frequency_penalty = 0.0f;   // subtracted per occurrence in the generated tokens
  float repetition_penalty = 1.0f;  // 1 = off; HF-style, over prompt and generated tokens
  std::optional<uint64_t> seed;     // same seed + same request -> same output
  int max_tokens = 256;             // generated tokens, >= 1
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;  // in addition to the model's EOS tokens
  int top_logprobs = -1;                // -1: no logprobs; 0..20: chosen + alternatives
  // Constrained output, sampled on the host: with the model's token table set the output is
  // a sentence of `grammar` (GBNF: guided_grammar, llama.cpp's grammar) when it is set, else
  // text matching `regex` in full (guided_regex / guided_choice) when that is set, else one
  // JSON value: any object (JSON mode, response_format json_object) when json_schema is null,
  // else an instance of json_schema (runtime/json_schema.h); then EOS.
  std::shared_ptr<const TokenTable> token_table;
  std::shared_ptr<const JsonSchema> json_schema;
  std::shared_ptr<const Regex> regex;
  std::shared_ptr<const Grammar> grammar;
  // OpenAI logit_bias: (token id, bias in [-100, 100]) added to the raw logits before anything
  // else of sampling (penalties, temperature, JSON mode's mask); ids unique, inside the
  // vocabulary (the engine checks). Logprobs stay those of the raw logits. Sampled on the host.
  std::vector<std::pair<int32_t, float>> logit_bias;

  bool greedy() const { return temperature <= 0.0f || top_k == 1; }
  bool has_penalties() const {
    return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f;
  }
};

}  // namespace pg::runtime
