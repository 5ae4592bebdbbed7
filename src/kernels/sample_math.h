// Token sampling math shared by the host sampler (runtime/sampler.*), the CPU reference of
// ops::Sample (ref/sample_ref.cpp) and the CUDA kernel (cuda/sampling/): the per-row
// parameters, the penalty formula, the counter-based uniform and the float -> sort key map.
// Everything here is header-only and compiles for the host and the device, so every
// implementation applies literally the same arithmetic.
//
// The sampling algorithm (one definition; ref/sample_ref.cpp's ChooseToken is its CPU code):
//   1. penalties (PenalizeLogit) on the raw logits -> x;
//   2. greedy (temperature <= 0 or top_k == 1): the first index of max(x);
//   3. otherwise order tokens by (x descending, index ascending); keep the first top_k
//      (k = vocab when top_k <= 0 or >= vocab); e_i = exp(double((x_i - max) * (1/T)))
//      (float subtract and multiply, double exp); prob_i = e_i / sum over the kept set;
//      top_p < 1 keeps the shortest prefix whose cumulative prob reaches top_p; min_p > 0
//      keeps only tokens with prob_i >= min_p * prob_top; K = the kept tokens;
//   4. draw: r = u * mass, u = SampleUniform(seed, step) in [0, 1), mass = the sum of the
//      weights over K in INDEX order; the token is the first (in index order) whose running
//      sum exceeds r (the last token of K if rounding leaves none). Weights are e_i when
//      nothing is truncated (no top_k, top_p = 1, min_p = 0), prob_i otherwise.
// Drawing in index order (not sorted order) gives the same distribution and needs no sort
// on the device. Two implementations may differ only where double rounding of a sum puts r
// or a top_p / min_p boundary within ~1e-16 of a token edge.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define PG_SAMPLE_HD __host__ __device__ __forceinline__
#else
#define PG_SAMPLE_HD inline
#endif

namespace pg::ops {

// One row's sampling parameters (OpenAI / vLLM semantics, as runtime::SamplingParams).
// All fields are 4 bytes; a row is kSampleRowWords i32 words in SampleParams::rows.
struct SampleRow {
  float temperature = 1.0f;         // <= 0: greedy
  int32_t top_k = 0;                // <= 0 or >= vocab: off; 1: greedy
  float top_p = 1.0f;               // (0, 1]; 1: off
  float min_p = 0.0f;               // [0, 1]; 0: off
  float repetition_penalty = 1.0f;  // 1: off; over tokens in the prompt or generated
  float presence_penalty = 0.0f;    // once per token generated at least once
  float frequency_penalty = 0.0f;   // per generated occurrence
  uint32_t seed_lo = 0, seed_hi = 0;  // the request's seed
  uint32_t step = 0;                // draw counter: tokens sampled so far for this request
  int32_t counts_row = -1;          // row of SampleParams::token_counts; -1: no penalties
  int32_t reserved = 0;
};
inline constexpr int kSampleRowWords = 12;
static_assert(sizeof(SampleRow) == kSampleRowWords * 4, "SampleRow is 12 words");

PG_SAMPLE_HD bool IsGreedy(const SampleRow& r) { return r.temperature <= 0.0f || r.top_k == 1; }

// token_counts encoding: bit 0 = the token is in the prompt, bits 1.. = times generated.
PG_SAMPLE_HD int32_t CountGenerated(int32_t c) { return c >> 1; }
PG_SAMPLE_HD bool CountSeen(int32_t c) { return c != 0; }  // prompt or generated
inline constexpr int32_t kCountPromptBit = 1, kCountGeneratedOne = 2;

// The penalised logit of a token with `generated` occurrences in the output so far; `seen`:
// in the prompt or generated (HF repetition penalty), then presence / frequency (OpenAI).
PG_SAMPLE_HD float PenalizeLogit(float l, int32_t generated, bool seen, const SampleRow& r) {
  if (seen && r.repetition_penalty != 1.0f)
    l = l > 0.0f ? l / r.repetition_penalty : l * r.repetition_penalty;
  if (generated > 0 && (r.presence_penalty != 0.0f || r.frequency_penalty != 0.0f))
    l -= r.presence_penalty + r.frequency_penalty * float(generated);
  return l;
}

// Counter-based uniform in [0, 1) with 53 random bits: a splitmix64 hash of (seed, step).
// The same (seed, step) gives the same draw on every device, in every batch position.
PG_SAMPLE_HD uint64_t SplitMix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
PG_SAMPLE_HD double SampleUniform(uint64_t seed, uint32_t step) {
  const uint64_t z = SplitMix64(SplitMix64(seed) ^ (uint64_t(step) * 0xd1b54a32d192ed03ull));
  return double(z >> 11) * (1.0 / 9007199254740992.0);  // 2^-53
}
PG_SAMPLE_HD uint64_t RowSeed(const SampleRow& r) {
  return uint64_t(r.seed_lo) | (uint64_t(r.seed_hi) << 32);
}

// A key whose unsigned order is the float order (-0 and +0 map to one key; no NaNs).
PG_SAMPLE_HD uint32_t SortKey(float f) {
  if (f == 0.0f) f = 0.0f;
#if defined(__CUDA_ARCH__)
  const uint32_t u = __float_as_uint(f);
#else
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
#endif
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

}  // namespace pg::ops
