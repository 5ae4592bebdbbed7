// Register-level helpers of the tensor-core decode kernels (decode_attention_mma.cu,
// decode_stream.cu): 16-bit word access, fp8 e4m3 / bf16 -> f16 widening, and the m16n8k16
// MMA in f16 (fp8 caches: K and V widened to f16 exactly, q and p rounded to f16) or bf16
// (bf16 caches). Fragment layouts: mla/mma_util.cuh.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/cuda/attention/decode_common.cuh"
#include "kernels/cuda/mla/mma_util.cuh"

namespace pg::cuda::decode {

__device__ __forceinline__ uint32_t Word(const uint4& u, int i) {
  return i == 0 ? u.x : (i == 1 ? u.y : (i == 2 ? u.z : u.w));
}
// Two e4m3 (low and high byte of the 16-bit x) -> f16x2.
__device__ __forceinline__ uint32_t F8x2ToH2(uint32_t x) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(x & 0xffffu), __NV_E4M3);
  return uint32_t(h.x) | (uint32_t(h.y) << 16);
}
__device__ __forceinline__ uint32_t Bf2ToH2(uint32_t x) {
  const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&x));
  const __half2 h = __floats2half2_rn(f.x, f.y);
  return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ uint32_t PackH2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}
// c += a · b in f16 (the bf16 form is mla::Mma).
__device__ __forceinline__ void MmaF16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                       uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <bool kF8>
__device__ __forceinline__ void MmaT(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (kF8) MmaF16(c, a, b0, b1);
  else mla::Mma(c, a, b0, b1);
}

// One 16-key tile's online-softmax step of the tensor-core decode kernels, on S's
// accumulators sc (rows g and g + 8 of the lane's quad, keys key0 + bb * 8 + 2t + {0, 1}):
// scores to log2 units (softcap > 0: capped first), keys at or past kv_end masked by a select
// (stale tile bytes may be NaN), the running maxima m0 / m1 raised with the rescale of l and
// o (quad-uniform), p = 2^(s - m) summed into l0 / l1 and packed as the PV MMA's A fragment.
template <bool kF8, int kNb>
__device__ __forceinline__ void SoftmaxTileStep(float (&sc)[2][4], float qscale, float softcap,
                                                int key0, int t, int kv_end, float& m0,
                                                float& m1, float& l0, float& l1,
                                                float (&o)[kNb][4], uint32_t (&pa)[4]) {
#pragma unroll
  for (int bb = 0; bb < 2; ++bb)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float x = sc[bb][e] * qscale;
      if (softcap > 0.0f) x = softcap * tanhf(x / softcap) * kLog2e;
      sc[bb][e] = key0 + bb * 8 + 2 * t + (e & 1) < kv_end ? x : -INFINITY;
    }
  float mx0 = fmaxf(fmaxf(sc[0][0], sc[0][1]), fmaxf(sc[1][0], sc[1][1]));
  float mx1 = fmaxf(fmaxf(sc[0][2], sc[0][3]), fmaxf(sc[1][2], sc[1][3]));
#pragma unroll
  for (int off = 1; off <= 2; off <<= 1) {  // the quad holds the row's 16 keys
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
  }
  if (mx0 > m0) {  // the running max grew: rescale (quad-uniform)
    const float c = Exp2Or0(m0, mx0);
    l0 *= c;
#pragma unroll
    for (int nb = 0; nb < kNb; ++nb) o[nb][0] *= c, o[nb][1] *= c;
    m0 = mx0;
  }
  if (mx1 > m1) {
    const float c = Exp2Or0(m1, mx1);
    l1 *= c;
#pragma unroll
    for (int nb = 0; nb < kNb; ++nb) o[nb][2] *= c, o[nb][3] *= c;
    m1 = mx1;
  }
#pragma unroll
  for (int bb = 0; bb < 2; ++bb) {
    sc[bb][0] = Exp2Or0(sc[bb][0], m0), sc[bb][1] = Exp2Or0(sc[bb][1], m0);
    sc[bb][2] = Exp2Or0(sc[bb][2], m1), sc[bb][3] = Exp2Or0(sc[bb][3], m1);
    l0 += sc[bb][0] + sc[bb][1];
    l1 += sc[bb][2] + sc[bb][3];
  }
  auto pack = [](float lo, float hi) { return kF8 ? PackH2(lo, hi) : mla::PackBf16(lo, hi); };
  pa[0] = pack(sc[0][0], sc[0][1]), pa[1] = pack(sc[0][2], sc[0][3]);
  pa[2] = pack(sc[1][0], sc[1][1]), pa[3] = pack(sc[1][2], sc[1][3]);
}

// S[16 rows x 16 keys] = Q · K^T of one tile (decode_attention_mma.cu's layout): K as B
// operands from the warp's thread-private stage st (lane (g, t): key g of each 8-key half,
// kNvt 16-byte vectors a key, kCpv k-chunks a vector), Q as the A fragments qa.
template <bool kF8, int kNvt, int kCpv, int kKc>
__device__ __forceinline__ void QkTile(float (&sc)[2][4], const uint4* st,
                                       const uint32_t (&qa)[kKc][4], int lane) {
#pragma unroll
  for (int bb = 0; bb < 2; ++bb) {
    sc[bb][0] = sc[bb][1] = sc[bb][2] = sc[bb][3] = 0.0f;
#pragma unroll
    for (int v = 0; v < kNvt; ++v) {
      const uint4 kv = st[(bb * kNvt + v) * 32 + lane];
#pragma unroll
      for (int sub = 0; sub < kCpv; ++sub) {
        uint32_t b0, b1;
        if constexpr (kF8) {
          const uint32_t w = Word(kv, sub);  // dims +0..3 as e4m3
          b0 = F8x2ToH2(w), b1 = F8x2ToH2(w >> 16);
        } else {
          b0 = Word(kv, 2 * sub), b1 = Word(kv, 2 * sub + 1);
        }
        MmaT<kF8>(sc[bb], qa[v * kCpv + sub], b0, b1);
      }
    }
  }
}

// o[2 q], o[2 q + 1] += P · V for the n-block pairs np0 + q (q < kN / 2, 8 dims a block) of
// one tile: P as the A fragment pa, V through ldmatrix.trans from the tile sv ([16 keys][kNb
// 16-byte chunks], chunk c of key k at c ^ (k % 8)).
template <bool kF8, int kNb, int kN>
__device__ __forceinline__ void PvTile(float (&o)[kN][4], const uint32_t (&pa)[4], const uint4* sv,
                                       int np0, int lane) {
  const int lk = lane % 8 + ((lane / 8) % 2) * 8;  // ldmatrix row (key) this lane addresses
#pragma unroll
  for (int q = 0; q < kN / 2; ++q) {
    const int chunk = 2 * (np0 + q) + lane / 16;
    uint32_t vb[4];
    mla::Ldmatrix4Trans(vb, sv + lk * kNb + (chunk ^ (lk % 8)));
    MmaT<kF8>(o[2 * q], pa, vb[0], vb[1]);
    MmaT<kF8>(o[2 * q + 1], pa, vb[2], vb[3]);
  }
}

// Where a warp's rows of one split go (StoreWarpRows): query row `row`'s heads h0 + rr for the
// rows rr < rows, split `split` of num_splits (active of them live).
struct WarpRowsDest {
  int row, h0, rows, split, num_splits, active;
  // With more than one active split: the cluster merge's partial in shared memory ([rows][D]
  // unnormalised sums, then [rows] maxima and [rows] sums: decode_fused.cuh ClusterPart), or,
  // null, the global partials at a.partial_acc / a.partial_ml ([row][head][num_splits][...]).
  float* part = nullptr;
  int nb0 = 0;      // the warp's first 8-dim n-block: o[q] holds n-block nb0 + q
  bool ml = true;   // this warp's lanes t 0 store (m, l) (warps holding the same rows: one does)
};

// A warp's rows g and g + 8 (< d.rows) after its key loop, over its n-blocks: with one active
// split the bf16 output (o / l, times a.v_scale), else its split's partial (o, and (m, l) from
// the quad's lane t 0) where d says. D: head_dim; o: the PV accumulators.
template <int D, int kN>
__device__ __forceinline__ void StoreWarpRows(const AttentionArgs& a, const WarpRowsDest& d, int g,
                                              int t, float m0, float m1, float l0, float l1,
                                              const float (&o)[kN][4]) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int rr = g + 8 * hr;
    if (rr >= d.rows) continue;
    const int h = d.h0 + rr;
    const float m = hr ? m1 : m0, l = hr ? l1 : l0;
    if (d.active == 1) {
      const float inv = l > 0.0f ? a.v_scale / l : 0.0f;
      bf16* out = a.out + int64_t(d.row) * a.out_stride + int64_t(h) * D + d.nb0 * 8 + 2 * t;
#pragma unroll
      for (int nb = 0; nb < kN; ++nb)
        *reinterpret_cast<__nv_bfloat162*>(out + nb * 8) =
            __floats2bfloat162_rn(o[nb][2 * hr] * inv, o[nb][2 * hr + 1] * inv);
    } else if (d.part != nullptr) {
      float* acc = d.part + rr * D + d.nb0 * 8 + 2 * t;
#pragma unroll
      for (int nb = 0; nb < kN; ++nb)
        *reinterpret_cast<float2*>(acc + nb * 8) = make_float2(o[nb][2 * hr], o[nb][2 * hr + 1]);
      if (d.ml && t == 0) d.part[d.rows * D + rr] = m, d.part[d.rows * D + d.rows + rr] = l;
    } else {
      const int64_t base = (int64_t(d.row) * a.heads + h) * d.num_splits + d.split;
      float* acc = a.partial_acc + base * D + d.nb0 * 8 + 2 * t;
#pragma unroll
      for (int nb = 0; nb < kN; ++nb)
        *reinterpret_cast<float2*>(acc + nb * 8) = make_float2(o[nb][2 * hr], o[nb][2 * hr + 1]);
      if (d.ml && t == 0) a.partial_ml[2 * base] = m, a.partial_ml[2 * base + 1] = l;
    }
  }
}

// Q as the QK MMA's A fragments: rows g and g + 8 = q rows g, g + 8 of the head group at q
// (row stride D; zero at rows >= rows). Chunk c of lane (g, t) holds dims base(c) + 0..3,
// base(c) = v * 4 kVe + t kVe + sub * 4 (v = c / kCpv, sub = c % kCpv): the kernels' K vector
// layout (kVe dims per 16-byte K vector, kCpv k-chunks per vector, kKc = D / 16 chunks). kF8:
// widened to f16 (the products run in f16 against fp8 caches).
template <bool kF8, int D, int kKc, int kCpv, int kVe>
__device__ __forceinline__ void LoadQFragments(uint32_t (&qa)[kKc][4], const bf16* q, int rows,
                                               int g, int t) {
#pragma unroll
  for (int c = 0; c < kKc; ++c) {
    const int base = (c / kCpv) * 4 * kVe + t * kVe + (c % kCpv) * 4;
    const uint2 z = make_uint2(0, 0);
    uint2 lo = g < rows ? *reinterpret_cast<const uint2*>(q + g * D + base) : z;
    uint2 hi = g + 8 < rows ? *reinterpret_cast<const uint2*>(q + (g + 8) * D + base) : z;
    if constexpr (kF8) {
      lo = make_uint2(Bf2ToH2(lo.x), Bf2ToH2(lo.y));
      hi = make_uint2(Bf2ToH2(hi.x), Bf2ToH2(hi.y));
    }
    qa[c][0] = lo.x, qa[c][1] = hi.x, qa[c][2] = lo.y, qa[c][3] = hi.y;
  }
}

}  // namespace pg::cuda::decode
