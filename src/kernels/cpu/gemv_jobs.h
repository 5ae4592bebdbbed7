// The row-group loop shared by the int8 GEMV kernels (matmul_gemv_vnni.cpp, AVX-512 VNNI;
// matmul_gemv_q4_avx2.cpp, AVX2): one or several independent matmuls, each prepared as a
// GemvJob (its activation rows quantized into a per-call arena, its weight rows addressed by
// stride), run as ONE parallel loop over all their groups of 4 weight rows. A kernel family
// supplies ActBytes (arena bytes of one matmul's activations) and Prepare (quantizes them and
// fills the job, including `run`, the family's group kernel).
#pragma once

#include <cstdint>
#include <span>

#include "kernels/kernel_util.h"
#include "kernels/ops.h"

namespace pg::ops::cpu {

// Weight rows per group: the kernels' pass (and RepackRows4's interleave) width.
inline constexpr int64_t kGemvGroupRows = 4;

// One matmul prepared for the row-group loop. Group g = weight rows [4g, min(4g + 4, m)).
struct GemvJob {
  const MatmulParams* p = nullptr;
  void (*run)(const GemvJob&, int64_t g) = nullptr;
  const uint8_t* w0 = nullptr;  // weight row 0
  int64_t row_bytes = 0, m = 0, n = 0, nb = 0, groups = 0;  // nb: 32-wide blocks a row
  void* qs = nullptr;   // the family's quantized activations, [n] rows
  float* ds = nullptr;  // their per-block scales, [n] rows
};

struct GemvFamily {
  int64_t (*act_bytes)(const MatmulParams& p);
  GemvJob (*prepare)(const MatmulParams& p, uint8_t* arena);  // arena: act_bytes(p), 64-aligned
};

// Runs every job's groups on the default pool, one dispatch for all of ps.
void RunGemvJobs(std::span<const MatmulParams> ps, const GemvFamily& family);

// Writes v[0 .. rows_here) (weight rows j0.., activation row r) to p.out with p's bias and
// accumulate flag.
inline void StoreGroup(const MatmulParams& p, int64_t r, int64_t j0, int64_t rows_here,
                       const float* v) {
  const float* bias = p.bias.data ? p.bias.as<float>() : nullptr;
  float* out = detail::RowF32(p.out, r);
  for (int64_t i = 0; i < rows_here; ++i) {
    const float x = bias ? v[i] + bias[j0 + i] : v[i];
    out[j0 + i] = p.accumulate ? out[j0 + i] + x : x;
  }
}

// Bytes rounded up to whole cache lines (arena segments).
inline int64_t CacheLines(int64_t bytes) { return (bytes + 63) / 64 * 64; }

}  // namespace pg::ops::cpu
