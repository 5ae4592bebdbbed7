// The test's own model of an all-to-all round, independent of AllToAll's packing: what each
// rank sends (regenerated from a seed on any rank), what the "expert" computes, and the
// combined result. Used by transfer_rank to check the real transfer.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "comm/transfer/descriptor.h"
#include "core/dtype.h"

namespace pg::comm::test {

struct A2aShape {
  uint32_t world = 0, num_experts = 0, max_tokens = 0, top_k = 0, hidden = 0;
  uint32_t dispatch_bytes() const { return hidden + 4 * ((hidden + 127) / 128); }  // fp8 + scales
  uint32_t combine_bytes() const { return 2 * hidden; }                           // bf16
};

struct RankInput {
  uint32_t num_tokens = 0;
  std::vector<uint32_t> experts;  // [num_tokens][top_k], distinct per token
  std::vector<uint8_t> payload;   // [num_tokens][dispatch_bytes]
  std::vector<float> weights;     // [num_tokens][top_k]
};

inline RankInput MakeInput(const A2aShape& s, uint32_t rank, uint32_t round) {
  std::mt19937_64 rng(0x9e3779b97f4a7c15ull * (rank + 1) + 7919ull * round);
  RankInput in;
  in.num_tokens = 1 + uint32_t(rng() % s.max_tokens);
  std::vector<uint32_t> all(s.num_experts);
  for (uint32_t e = 0; e < s.num_experts; ++e) all[e] = e;
  for (uint32_t t = 0; t < in.num_tokens; ++t) {
    std::shuffle(all.begin(), all.end(), rng);
    in.experts.insert(in.experts.end(), all.begin(), all.begin() + s.top_k);
    for (uint32_t k = 0; k < s.top_k; ++k) in.weights.push_back(float(rng() % 1000) / 1000.0f);
  }
  in.payload.resize(size_t(in.num_tokens) * s.dispatch_bytes());
  for (auto& b : in.payload) b = uint8_t(rng());
  return in;
}

// The "expert": a bf16 vector from the fp8 bytes (read as int8) and the expert id.
inline void ExpertOutput(const A2aShape& s, const uint8_t* payload, uint32_t expert,
                         uint16_t* out) {
  for (uint32_t h = 0; h < s.hidden; ++h) {
    out[h] = F32ToBf16(float(int8_t(payload[h])) * float(expert + 1) / 64.0f);
  }
}

// Hash of one routed record as a receiver sees it.
inline uint64_t RecordHash(uint32_t src_rank, uint32_t token, uint32_t expert, uint32_t k,
                           const uint8_t* payload, uint32_t bytes) {
  uint32_t head[4] = {src_rank, token, expert, k};
  uint64_t h = Fnv1a64({reinterpret_cast<const uint8_t*>(head), sizeof(head)});
  return Fnv1a64({payload, bytes}, h);
}

// Expected combine output at the source: sum over k in order, in fp32.
inline std::vector<float> ExpectedCombine(const A2aShape& s, const RankInput& in) {
  std::vector<float> out(size_t(in.num_tokens) * s.hidden, 0.0f);
  std::vector<uint16_t> y(s.hidden);
  for (uint32_t t = 0; t < in.num_tokens; ++t) {
    for (uint32_t k = 0; k < s.top_k; ++k) {
      ExpertOutput(s, in.payload.data() + size_t(t) * s.dispatch_bytes(),
                   in.experts[t * s.top_k + k], y.data());
      for (uint32_t h = 0; h < s.hidden; ++h) {
        out[size_t(t) * s.hidden + h] += in.weights[t * s.top_k + k] * Bf16ToF32(y[h]);
      }
    }
  }
  return out;
}

}  // namespace pg::comm::test
