// The row-group loop shared by the int8 GEMV kernels (matmul_gemv_vnni.cpp, AVX-512 VNNI;
// matmul_gemv_q4_avx2.cpp, AVX2): one or several independent matmuls, each prepared as a
// GemvJob (its activation rows quantized into a per-call arena, its weight rows addressed by
// stride), run as ONE parallel loop over all their groups of 4 weight rows. A kernel family
// supplies ActBytes (arena bytes of one matmul's activations) and Prepare (quantizes them and
// fills the job, including `run`, the family's group kernel).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <type_traits>

#include "core/quant.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/kernel_util.h"
#include "kernels/ops.h"

namespace pg::ops::cpu {

// Weight rows per group: the kernels' pass (and RepackRows4's interleave) width.
inline constexpr int64_t kGemvGroupRows = 4;
// Activation rows a job takes (the registry slices batches to at most kGemvMaxRows, 16).
inline constexpr int64_t kGemvMaxActRows = 16;

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

// The job fields every family fills alike (all but run, qs, ds), for weight blocks of
// `block_bytes` bytes (32 weights each).
inline GemvJob JobShape(const MatmulParams& p, int64_t block_bytes) {
  GemvJob j;
  j.p = &p;
  j.n = p.x.dim(0);
  j.nb = p.x.dim(1) / quant::kQK;
  j.m = p.w.dim(0);
  j.groups = (j.m + kGemvGroupRows - 1) / kGemvGroupRows;
  j.w0 = p.w.row_ptr(0);
  j.row_bytes = p.w.strides[0] / quant::kQK * block_bytes;
  PG_CHECK(j.n <= kGemvMaxActRows, "GEMV job: {} activation rows", j.n);
  return j;
}

// Group g's weight rows: rows[i] = row j0 + i, a short last group repeating its last row (the
// kernels compute every row's lanes alone, so padding changes no bits); ahead[i] = the next
// group's rows, this group's at the end (prefetched alongside). RepackRows4 layouts: rows[0] is
// the group's first byte (m % 4 == 0).
struct RowGroup {
  int64_t j0 = 0, count = 0;  // the real rows [j0, j0 + count)
  const uint8_t* rows[kGemvGroupRows];
  const uint8_t* ahead[kGemvGroupRows];
};
inline RowGroup MakeRowGroup(const GemvJob& job, int64_t g) {
  RowGroup rg;
  rg.j0 = g * kGemvGroupRows;
  rg.count = std::min(kGemvGroupRows, job.m - rg.j0);
  for (int64_t i = 0; i < kGemvGroupRows; ++i) {
    const int64_t j = rg.j0 + std::min(i, rg.count - 1);
    rg.rows[i] = job.w0 + j * job.row_bytes;
    rg.ahead[i] = j + kGemvGroupRows < job.m ? rg.rows[i] + kGemvGroupRows * job.row_bytes : rg.rows[i];
  }
  return rg;
}

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

// The job's activation rows against one row group, kA rows a pass, then one at a time:
// pass(r0, std::integral_constant<int, A>{}, v) fills v[a * 4 + i] (activation row r0 + a,
// weight row j0 + i) for A rows; each is written out by StoreGroup.
template <int kA, typename Pass>
void RunActPasses(const GemvJob& job, const RowGroup& rg, Pass&& pass) {
  float v[kA * kGemvGroupRows];
  int64_t r = 0;
  for (; r + kA <= job.n; r += kA) {
    pass(r, std::integral_constant<int, kA>{}, v);
    for (int64_t a = 0; a < kA; ++a) StoreGroup(*job.p, r + a, rg.j0, rg.count, v + a * kGemvGroupRows);
  }
  if constexpr (kA > 1) {
    for (; r < job.n; ++r) {
      pass(r, std::integral_constant<int, 1>{}, v);
      StoreGroup(*job.p, r, rg.j0, rg.count, v);
    }
  }
}

// Bytes rounded up to whole cache lines (arena segments).
inline int64_t CacheLines(int64_t bytes) { return (bytes + 63) / 64 * 64; }

// Software prefetch of the rows a thread reads next (a RowGroup's `ahead`), at the offset being
// read now: one group ahead (4 rows x k/32 blocks, ~4.6 KB for Qwen3's experts) keeps enough
// lines in flight to stream from DRAM. Without it the VNNI 4-row pass ran at 14.7 GB/s of
// streamed weights where memcpy copies 21 (2 threads, Zen 5 VM; 32-38 with it); in cache it
// reached 36-40. Two or four groups ahead measured no better (bench_kernels, noisy). Redundant
// prefetches of lines already fetched cost an issue slot each.
PG_TARGET_AVX2 inline void PrefetchLine(const uint8_t* p) {
  _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
}

}  // namespace pg::ops::cpu
