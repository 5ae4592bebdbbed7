// Decode GEMV for Q4_0 / Q4_1 weights (and their RepackRows4 layouts) with AVX2, for CPUs
// without AVX-512 VNNI (AMD Zen 2/3, most Intel laptops; those with AVX-VNNI, Intel 12th
// generation on, take its 256-bit vpdpbusd for the block dot products: same bits).
//
// Activations: int8 blocks (as llama.cpp's q8_0 activations), laid out per PAIR of blocks
// (Act, below) so that one 32-byte load of a weight pair's nibbles lines up with them:
//   lo nibbles of [b0 | b1] = elements [b0 0-15 | b1 0-15], hi nibbles = [b0 16-31 | b1 16-31].
// Per pair and per weight row r of a group of 4: vpmaddubsw of lo and of hi against the
// activation halves, added in int16 (|sum| <= 4 * 15 * 127 fits), vpmaddwd to 8 int32 lanes
// [b0 x4 | b1 x4]. Three vphaddd fold the 4 rows into ONE vector
//   h = [r0 b0, r1 b0, r2 b0, r3 b0 | r0 b1, r1 b1, r2 b1, r3 b1]   (exact block dot products)
// so each pair costs one convert and one fma for all 4 rows: acc += h * (dw * da), lane-wise.
// Offsets fold through the activation sums s = da * Σq (Q4_0: -8 * dw * s; Q4_1: + m * s) into
// a second accumulator. Row r's result = its two lanes (r, r + 4) summed at the end.
//
// Bits: lane r's operations depend only on weight row r and the activation row, whatever the
// other lanes hold, so a group padded with copies of its last row (m % 4 tail), a RepackRows4
// group (the same values loaded into the same lanes), and any number of activation rows per
// pass all give every row the same bits (batch_invariance_test.cpp). An odd last block is a
// pair whose b1 has zero activations and zero weight scales: its lanes add +0.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "core/quant.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/gemv_jobs.h"
#include "kernels/cpu/q4_groups.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/registry.h"

namespace pg::ops::cpu {
namespace {

using q4::Q4;

// One activation row: per pair p (blocks 2p, 2p + 1; an odd last block pairs with zeros)
//   qs[p * 64 ..]: [b0 0-15 | b1 0-15 | b0 16-31 | b1 16-31] int8,
//   sc[p * 16 ..]: [da0 x4 | da1 x4 | s0 x4 | s1 x4] f32, s = da * Σ q (the block's sum).
struct Act {
  int8_t* qs;
  float* sc;
};

PG_TARGET_AVX2 void QuantizeAct(const float* x, int64_t nb, const Act& a) {
  alignas(32) int8_t q[32];
  for (int64_t b = 0; b < nb; ++b, x += 32) {
    float d;
    const int32_t sum = simd::QuantizeBlock32(x, q, &d);
    int8_t* dst = a.qs + (b / 2) * 64 + (b % 2) * 16;
    std::memcpy(dst, q, 16);
    std::memcpy(dst + 32, q + 16, 16);
    float* sc = a.sc + (b / 2) * 16 + (b % 2) * 4;
    for (int i = 0; i < 4; ++i) sc[i] = d, sc[8 + i] = d * float(sum);
  }
  if (nb % 2) {  // the zero partner of an odd last block
    int8_t* dst = a.qs + (nb / 2) * 64 + 16;
    std::memset(dst, 0, 16);
    std::memset(dst + 32, 0, 16);
    float* sc = a.sc + (nb / 2) * 16 + 4;
    for (int i = 0; i < 4; ++i) sc[i] = 0.0f, sc[8 + i] = 0.0f;
  }
}

// DotGroup, per instruction set (matmul_gemv_q4_avx2_dot.inc).
namespace avx2 {
#define PG_Q4_TARGET PG_TARGET_AVX2
#define PG_Q4_AVXVNNI 0
#include "kernels/cpu/matmul_gemv_q4_avx2_dot.inc"
#undef PG_Q4_TARGET
#undef PG_Q4_AVXVNNI
}  // namespace avx2
namespace avxvnni {
#define PG_Q4_TARGET PG_TARGET_AVXVNNI
#define PG_Q4_AVXVNNI 1
#include "kernels/cpu/matmul_gemv_q4_avx2_dot.inc"
#undef PG_Q4_TARGET
#undef PG_Q4_AVXVNNI
}  // namespace avxvnni

constexpr int kActsPerPass = 2;  // activation rows sharing each weight unpack (prefill)

// Per activation row: npairs * 64 bytes of qs, npairs * 16 floats of sc.
int64_t ActRowQs(int64_t nb) { return (nb + 1) / 2 * 64; }
int64_t ActRowSc(int64_t nb) { return (nb + 1) / 2 * 16; }

template <bool kQ4_1, bool kRows4, bool kVnni>
void RunGroup(const GemvJob& job, int64_t g) {
  const RowGroup rg = MakeRowGroup(job, g);
  RunActPasses<kActsPerPass>(job, rg, [&](int64_t r0, auto count, float* v) {
    constexpr int kA = decltype(count)::value;
    Act acts[kA];
    for (int a = 0; a < kA; ++a)
      acts[a] = Act{static_cast<int8_t*>(job.qs) + (r0 + a) * ActRowQs(job.nb),
                    job.ds + (r0 + a) * ActRowSc(job.nb)};
    if constexpr (kVnni) avxvnni::DotGroup<kQ4_1, kRows4, kA>(rg, acts, job.nb, v);
    else avx2::DotGroup<kQ4_1, kRows4, kA>(rg, acts, job.nb, v);
  });
}

// Whether Prepare picks the AVX-VNNI instantiation (UseAvxVnniForQ4); first use reads the
// CPU's features, so no static-initialisation order is involved.
std::atomic<bool>& UseAvxVnni() {
  static std::atomic<bool> on{Features().avx_vnni};
  return on;
}

template <bool kVnni>
void (*PickRun(DType t))(const GemvJob&, int64_t) {
  switch (t) {
    case DType::kQ4_0: return &RunGroup<false, false, kVnni>;
    case DType::kQ4_1: return &RunGroup<true, false, kVnni>;
    case DType::kQ4_0x4: return &RunGroup<false, true, kVnni>;
    case DType::kQ4_1x4: return &RunGroup<true, true, kVnni>;
    default: PG_CHECK(false, "GemvQ4Avx2: dtype {}", Name(t));
  }
  return nullptr;
}

int64_t ActBytes(const MatmulParams& p) {
  const int64_t n = p.x.dim(0), nb = p.x.dim(1) / 32;
  return CacheLines(n * ActRowQs(nb)) + CacheLines(n * ActRowSc(nb) * 4);
}

GemvJob Prepare(const MatmulParams& p, uint8_t* arena) {
  const bool q4_1 = p.w.dtype == DType::kQ4_1 || p.w.dtype == DType::kQ4_1x4;
  GemvJob j = JobShape(p, q4_1 ? Q4<true>::kBytes : Q4<false>::kBytes);
  j.run = UseAvxVnni().load(std::memory_order_relaxed) ? PickRun<true>(p.w.dtype)
                                                       : PickRun<false>(p.w.dtype);
  j.qs = arena;
  j.ds = reinterpret_cast<float*>(arena + CacheLines(j.n * ActRowQs(j.nb)));
  for (int64_t r = 0; r < j.n; ++r)
    QuantizeAct(detail::RowF32(p.x, r), j.nb,
                Act{static_cast<int8_t*>(j.qs) + r * ActRowQs(j.nb), j.ds + r * ActRowSc(j.nb)});
  return j;
}

}  // namespace

void UseAvxVnniForQ4(bool on) { UseAvxVnni() = on && Features().avx_vnni; }

bool GemvQ4Avx2Reads(DType t) {
  return t == DType::kQ4_0 || t == DType::kQ4_1 || t == DType::kQ4_0x4 || t == DType::kQ4_1x4;
}

bool GemvQ4Avx2Takes(const MatmulParams& p) {
  return Features().avx2 && MaxKernelPriority() >= kPriorityCpuAvx2 && GemvQ4Avx2Reads(p.w.dtype) &&
         p.x.dim(0) <= kGemvMaxActRows && !p.w_scale.data;
}

void GemvQ4Avx2Many(std::span<const MatmulParams> ps) {
  RunGemvJobs(ps, GemvFamily{&ActBytes, &Prepare});
}

}  // namespace pg::ops::cpu
