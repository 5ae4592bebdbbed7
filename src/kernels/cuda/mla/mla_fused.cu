// Fused kernels of the absorbed MLA decode path (batch <= kMlaFoldMaxTokens tokens), all
// launched with PDL (common/pdl.cuh): weights are streamed before PdlWait, everything the
// previous kernel wrote is read after it.
//   MlaKvPrepKernel        kv_a_layernorm + k_pe RoPE + latent cache write (one block / token)
//   MlaQAbsorbKernel       q_pe RoPE + q_nope · W_UK_h -> q_lat (grid: 64-column slices x heads,
//                          plus optionally one row of MlaKvPrep blocks)
//   MlaCombineApplyKernel  split merge + o_lat · W_UV_h^T -> out (grid: 32-row slices x heads)
//   MlaQPeKernel           q_pe RoPE / copy alone, any token count (the unfused path)
// They replace, per layer: RmsNorm, Rope (k), MlaCacheWrite; Rope (q), the W_UK GEMM and the
// q_pe copy; the split combine and the W_UV GEMM (mla_register.cpp picks them).
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "core/env.h"
#include "kernels/cuda/common/pdl.cuh"
#include "kernels/cuda/common/rope_device.cuh"
#include "kernels/cuda/mla/mla_params.h"
#include "kernels/cuda/mla/split_merge.cuh"

namespace pg::cuda {
namespace {


__device__ __forceinline__ float Bf(bf16 v) { return __bfloat162float(v); }

// 8 bf16 (one 16-byte load) -> floats.
__device__ __forceinline__ void Unpack8(const uint4& u, float (&f)[8]) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

__device__ __forceinline__ float LoadNormWeight(const void* w, WeightType t, int i) {
  switch (t) {
    case WeightType::kF32: return static_cast<const float*>(w)[i];
    case WeightType::kBF16: return __bfloat162float(static_cast<const bf16*>(w)[i]);
    default: return __half2float(static_cast<const __half*>(w)[i]);
  }
}

// ---- kv prep --------------------------------------------------------------------------------
constexpr int kPrepThreads = 256;

__device__ float BlockSum256(float v) {
  __shared__ float warp_sums[kPrepThreads / 32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
  __syncthreads();
  float s = 0.0f;
#pragma unroll
  for (int w = 0; w < kPrepThreads / 32; ++w) s += warp_sums[w];
  return s;
}

// Stores real value v (bf16-representable) as element e of the latent row at `slot`.
__device__ __forceinline__ void StoreLatent(const MlaCacheWriteArgs& w, int64_t slot, int e, float v) {
  const bool k_half = e < w.half;
  const int64_t off = slot * w.half + (k_half ? e : e - w.half);
  void* base = k_half ? w.k_cache : w.v_cache;
  const float sv = v * (k_half ? w.inv_k_scale : w.inv_v_scale);
  if (w.cache_type == MlaCacheType::kFP8) {
    const __nv_fp8_e4m3 f(sv);  // saturating
    static_cast<uint8_t*>(base)[off] = f.__x;
  } else {
    static_cast<bf16*>(base)[off] = __float2bfloat16_rn(sv);
  }
}

// Token t's kv prep by one block of kPrepThreads threads. The batch plan and the positions
// are uploaded by the host before the step (no kernel of the step writes them, as the decode
// kernel's plan reads): the slot and position are looked up before PdlWait, and the rope pair
// is loaded with the norm elements, so one round trip to the latent row remains after it.
static_assert(kMaxRopePairs <= kPrepThreads, "one rope pair per thread");
__device__ void KvPrepRow(const MlaKvPrepArgs& a, int t) {
  const MlaCacheWriteArgs& w = a.write;
  const int tid = threadIdx.x;
  const DeviceBatchView& b = w.batch;
  const int s = b.token_seq[t];
  const int pos = b.kv_len[s] - b.q_len[s] + (t - b.q_start[s]);
  const int page = b.page_table[b.page_start[s] + pos / b.page_size];
  const int64_t slot = int64_t(page) * b.page_size + pos % b.page_size;
  const float p = a.positions ? float(a.positions[t]) : 0.0f;
  PdlWait();
  PdlTrigger();
  // The latent row is rewritten in place (normed / rotated), as RmsNorm and Rope would.
  bf16* row = const_cast<bf16*>(w.latent) + int64_t(t) * w.latent_stride;
  const int rank = a.rank, L = w.latent_dim, half_pairs = (L - rank) / 2;
  // This thread's rope pair (tid < half_pairs), loaded before the norm's reduction.
  const bool has_pair = a.positions != nullptr && tid < half_pairs;
  int i0 = 0, i1 = 0;
  float x0 = 0.0f, x1 = 0.0f;
  if (has_pair) {
    RopePairIndex(a.neox, tid, half_pairs, i0, i1);
    x0 = Bf(row[rank + i0]);
    x1 = Bf(row[rank + i1]);
  }

  if (a.norm_weight) {
    float ss = 0.0f;
    for (int e = tid; e < rank; e += kPrepThreads) {
      const float v = Bf(row[e]);
      ss += v * v;
    }
    const float inv = rsqrtf(BlockSum256(ss) / float(rank) + a.eps);
    // Each thread rewrites only the elements it read (no barrier needed).
    for (int e = tid; e < rank; e += kPrepThreads) {
      const bf16 nv = __float2bfloat16_rn(Bf(row[e]) * inv * LoadNormWeight(a.norm_weight, a.norm_type, e));
      row[e] = nv;
      StoreLatent(w, slot, e, Bf(nv));
    }
  } else {
    for (int e = tid; e < rank; e += kPrepThreads) StoreLatent(w, slot, e, Bf(row[e]));
  }
  if (a.positions) {
    if (has_pair) {
      RopeRotate(x0, x1, a.inv_freq[tid], p);
      const bf16 b0 = __float2bfloat16_rn(x0), b1 = __float2bfloat16_rn(x1);
      row[rank + i0] = b0;
      row[rank + i1] = b1;
      StoreLatent(w, slot, rank + i0, Bf(b0));
      StoreLatent(w, slot, rank + i1, Bf(b1));
    }
  } else {
    for (int e = rank + tid; e < L; e += kPrepThreads) StoreLatent(w, slot, e, Bf(row[e]));
  }
}

__global__ void __launch_bounds__(kPrepThreads) MlaKvPrepKernel(const __grid_constant__ MlaKvPrepArgs a) {
  PG_BLOCK_TRACE(kTraceMlaKvPrep);
  KvPrepRow(a, blockIdx.x);
}

// ---- q absorb -------------------------------------------------------------------------------
// Block: 256 threads = 8 column threads (8 columns each: 64) x 32 row groups; row group rg
// owns rows rg, rg + 32, rg + 64, rg + 96 of W_UK_h (nope <= 128), held in registers.
constexpr int kFoldThreads = 256, kFoldCols = 64, kFoldRowGroups = 32;
static_assert(kFoldThreads == kPrepThreads, "the fused kv prep runs in q-absorb blocks");
constexpr int kFoldRowIters = kMlaFoldMaxNope / kFoldRowGroups;  // 4

// One unit of q_pe of (token t, head h): pair i rotated in place in q (rounded as the Rope
// kernel) to position p and written to q_lat[t, h, rank:], or (no positions) element i
// copied. Units per head: QPeUnits. QPeLoad reads the unit (x1 unused when copying), QPeStore
// finishes it (split so that a kernel can issue its other loads in between); QPe does both.
__device__ __forceinline__ int QPeUnits(const MlaQAbsorbArgs& a) { return a.positions ? a.rope / 2 : a.rope; }
__device__ __forceinline__ bf16* QPeRow(const MlaQAbsorbArgs& a, int t, int h) {
  return a.q + int64_t(t) * a.q_stride + int64_t(h) * (a.nope + a.rope) + a.nope;
}
__device__ __forceinline__ void QPeLoad(const MlaQAbsorbArgs& a, int t, int h, int i, float& x0, float& x1) {
  const bf16* qp = QPeRow(a, t, h);
  if (!a.positions) {
    x0 = Bf(qp[i]);
    return;
  }
  int i0, i1;
  RopePairIndex(a.neox, i, a.rope / 2, i0, i1);
  x0 = Bf(qp[i0]);
  x1 = Bf(qp[i1]);
}
__device__ __forceinline__ void QPeStore(const MlaQAbsorbArgs& a, int t, int h, int i, float p, float x0, float x1) {
  bf16* qp = QPeRow(a, t, h);
  bf16* ql = a.q_lat + (int64_t(t) * a.heads + h) * (a.rank + a.rope) + a.rank;
  if (!a.positions) {
    ql[i] = __float2bfloat16_rn(x0);  // exact: x0 came from bf16
    return;
  }
  int i0, i1;
  RopePairIndex(a.neox, i, a.rope / 2, i0, i1);
  RopeRotate(x0, x1, a.inv_freq[i], p);
  const bf16 b0 = __float2bfloat16_rn(x0), b1 = __float2bfloat16_rn(x1);
  qp[i0] = b0;
  qp[i1] = b1;
  ql[i0] = b0;
  ql[i1] = b1;
}
__device__ __forceinline__ void QPe(const MlaQAbsorbArgs& a, int t, int h, int i, float p) {
  float x0 = 0.0f, x1 = 0.0f;
  QPeLoad(a, t, h, i, x0, x1);
  QPeStore(a, t, h, i, p, x0, x1);
}

__global__ void __launch_bounds__(kFoldThreads) MlaQAbsorbKernel(const __grid_constant__ MlaQAbsorbArgs a) {
  PG_BLOCK_TRACE(kTraceMlaQAbsorb);
  __shared__ float q_s[kMlaFoldMaxTokens][kMlaFoldMaxNope];
  __shared__ float red[kFoldThreads / 32][kMlaFoldMaxTokens][kFoldCols];  // per-warp sums
  if (blockIdx.y == a.heads) {  // the fused cache write: block x preps token x
    if (blockIdx.x < a.tokens) KvPrepRow(a.prep, blockIdx.x);
    return;
  }
  const int h = blockIdx.y, c0 = blockIdx.x * kFoldCols;
  if (c0 >= a.rank) return;  // grid.x covers the tokens of the kv prep (tiny ranks)
  const int tid = threadIdx.x, cg = tid % 8, rg = tid / 8, warp = tid / 32, lane = tid % 32;
  // Weights first (no upstream kernel writes them): this block's W_UK_h slice; and the
  // positions (host-uploaded with the batch plan) of block 0's q_pe work.
  const bf16* wh = a.w + int64_t(h) * a.w_head * a.ldw + c0 + cg * 8;
  uint4 wv[kFoldRowIters];
#pragma unroll
  for (int k = 0; k < kFoldRowIters; ++k) {
    const int i = rg + kFoldRowGroups * k;
    wv[k] = i < a.nope ? __ldg(reinterpret_cast<const uint4*>(wh + int64_t(i) * a.ldw))
                       : make_uint4(0, 0, 0, 0);
  }
  const int T = a.tokens, qk = a.nope + a.rope, L = a.rank + a.rope;
  const int units = QPeUnits(a);
  // Block 0's q_pe unit of this thread (T * units <= kFoldThreads when positions: 4 x 32).
  const int pe_t = tid / max(units, 1), pe_i = tid % max(units, 1);
  const bool pe_one = blockIdx.x == 0 && units > 0 && T * units <= kFoldThreads && pe_t < T;
  const float pe_p = pe_one && a.positions ? float(a.positions[pe_t]) : 0.0f;
  PdlWait();
  PdlTrigger();
  // Every load first (this thread's q_nope elements, block 0's q_pe unit: one round trip),
  // then the stores (q_pe rotated in place in q: after the loads, which it may alias).
  constexpr int kQnPer = kMlaFoldMaxTokens * kMlaFoldMaxNope / kFoldThreads;  // 2
  float qn[kQnPer];
#pragma unroll
  for (int k = 0; k < kQnPer; ++k) {
    const int idx = tid + k * kFoldThreads, t = idx / a.nope, i = idx % a.nope;
    qn[k] = idx < T * a.nope ? Bf(a.q[int64_t(t) * a.q_stride + int64_t(h) * qk + i]) : 0.0f;
  }
  float pe0 = 0.0f, pe1 = 0.0f;
  if (pe_one) QPeLoad(a, pe_t, h, pe_i, pe0, pe1);
#pragma unroll
  for (int k = 0; k < kQnPer; ++k) {
    const int idx = tid + k * kFoldThreads;
    if (idx < T * a.nope) q_s[idx / a.nope][idx % a.nope] = qn[k];
  }
  if (pe_one) QPeStore(a, pe_t, h, pe_i, pe_p, pe0, pe1);
  if (blockIdx.x == 0 && T * units > kFoldThreads) {  // (not at DeepSeek's shapes)
    for (int idx = tid; idx < T * units; idx += kFoldThreads) {
      const int t = idx / units;
      QPe(a, t, h, idx % units, a.positions ? float(a.positions[t]) : 0.0f);
    }
  }
  __syncthreads();
  float acc[kMlaFoldMaxTokens][8];
#pragma unroll
  for (int t = 0; t < kMlaFoldMaxTokens; ++t)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[t][j] = 0.0f;
#pragma unroll
  for (int k = 0; k < kFoldRowIters; ++k) {
    const int i = rg + kFoldRowGroups * k;
    if (i >= a.nope) break;
    float wf[8];
    Unpack8(wv[k], wf);
#pragma unroll
    for (int t = 0; t < kMlaFoldMaxTokens; ++t) {
      if (t >= T) break;
      const float qv = q_s[t][i];
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[t][j] = fmaf(qv, wf[j], acc[t][j]);
    }
  }
  // A warp holds row groups 4 * warp .. + 3 (lanes cg, cg + 8, cg + 16, cg + 24): summed by
  // shuffles, then the 8 warps' sums in shared memory.
#pragma unroll
  for (int t = 0; t < kMlaFoldMaxTokens; ++t) {
    if (t >= T) break;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      float v = acc[t][j];
      v += __shfl_xor_sync(0xffffffffu, v, 8);
      v += __shfl_xor_sync(0xffffffffu, v, 16);
      if (lane < 8) red[warp][t][cg * 8 + j] = v;
    }
  }
  __syncthreads();
  for (int o = tid; o < T * kFoldCols; o += kFoldThreads) {
    const int t = o / kFoldCols, c = o % kFoldCols;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kFoldThreads / 32; ++w) sum += red[w][t][c];
    a.q_lat[(int64_t(t) * a.heads + h) * L + c0 + c] = __float2bfloat16_rn(sum);
  }
}

// q_pe of every token for the unfused (many-token) path: grid (ceil(heads * units / 256),
// tokens), one unit per thread (a serial loop over 128 heads in one block per token cost
// ~25 us at 8 tokens).
__global__ void __launch_bounds__(kFoldThreads) MlaQPeKernel(const __grid_constant__ MlaQAbsorbArgs a) {
  PdlWait();
  PdlTrigger();
  const int units = QPeUnits(a);
  const int idx = blockIdx.x * kFoldThreads + threadIdx.x;
  const int t = blockIdx.y;
  if (idx < a.heads * units) QPe(a, t, idx / units, idx % units, a.positions ? float(a.positions[t]) : 0.0f);
}

// ---- combine + W_UV ---------------------------------------------------------------------------
// Block: 8 warps x 4 rows of W_UV_h (32 rows); lane holds columns lane*8..+8 and 256+lane*8..+8
// of each row (rank 512) in registers.
constexpr int kApplyThreads = 256, kApplyRowsPerWarp = 4, kApplyRows = 32;
static_assert(kMlaRank == 2 * 32 * 8, "combine-apply: two 16-byte loads per lane per row");

template <bool kSlim>  // kMlaApplyRegs registers (a few bytes spill) or uncapped
__global__ void __launch_bounds__(kApplyThreads) __maxnreg__(kSlim ? kMlaApplyRegs : 255)
    MlaCombineApplyKernel(const __grid_constant__ MlaCombineApplyArgs a) {
  PG_BLOCK_TRACE(kTraceMlaCombineApply);
  __shared__ __align__(16) float o_s[kMlaFoldMaxTokens][kMlaRank];
  __shared__ __align__(16) float red[kApplyThreads / 32][kMlaRank];  // per-warp split sums
  const MlaCombineArgs& cb = a.combine;
  const int h = blockIdx.y, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int j0 = blockIdx.x * kApplyRows + warp * kApplyRowsPerWarp;
  uint4 wv[kApplyRowsPerWarp][2];
#pragma unroll
  for (int k = 0; k < kApplyRowsPerWarp; ++k) {
    const int j = j0 + k;
    const bf16* wr = a.w + (int64_t(h) * a.w_head + j) * a.ldw + lane * 8;
    wv[k][0] = j < a.v ? __ldg(reinterpret_cast<const uint4*>(wr)) : make_uint4(0, 0, 0, 0);
    wv[k][1] = j < a.v ? __ldg(reinterpret_cast<const uint4*>(wr + 256)) : make_uint4(0, 0, 0, 0);
  }
  // Merge roles (below): token t of this warp, sub-index u of wpt; the used splits of its row
  // from the batch plan (readable before PdlWait).
  const int wpt = (kApplyThreads / 32) / a.tokens, t_mine = warp / wpt, u = warp % wpt;
  const int n_mine = t_mine < a.tokens && cb.num_splits > 1
                         ? MlaUsedSplits(cb.batch.kv_len[cb.batch.token_seq[t_mine]],
                                         cb.num_splits, cb.min_chunk)
                         : 0;
  PdlWait();
  PdlTrigger();
  const int T = a.tokens;
  // o_s[t] = the merged latent output of row (t, h), normalised (f32). All tokens merge at
  // once: token t gets warps t * wpt .. + wpt (wpt = 8 / T), warp sub-index u merges splits
  // u, u + wpt, ... (MlaMergeWarp: groups of splits loaded at once), so a row's merge has many
  // loads in flight instead of a serial walk over the splits (batch 1 at 8K keys has ~128).
  __shared__ float m_s[kApplyThreads / 32], l_s[kApplyThreads / 32];
  if (cb.num_splits == 1) {
    for (int i = tid; i < T * kMlaRank / 2; i += kApplyThreads) {
      const int t = i / (kMlaRank / 2), c = (i % (kMlaRank / 2)) * 2;
      const __nv_bfloat162 v = *reinterpret_cast<const __nv_bfloat162*>(
          cb.o_lat + (int64_t(t) * cb.heads + h) * kMlaRank + c);
      o_s[t][c] = __low2float(v);
      o_s[t][c + 1] = __high2float(v);
    }
  } else {
    if (t_mine < T) {
      const int64_t row = int64_t(t_mine) * cb.heads + h;
      float4 acc[4];
      float m, l;
      MlaMergeWarp(cb.partial_ml + row * cb.num_splits * 2,
                   cb.partial_acc + row * cb.num_splits * kMlaRank, n_mine, u, wpt, lane, acc,
                   m, l);
#pragma unroll
      for (int q = 0; q < 4; ++q) reinterpret_cast<float4*>(red[warp])[q * 32 + lane] = acc[q];
      if (lane == 0) m_s[warp] = m, l_s[warp] = l;
    }
    __syncthreads();
    for (int i = tid; i < T * kMlaRank; i += kApplyThreads) {
      const int tt = i / kMlaRank, c = i % kMlaRank;
      o_s[tt][c] = MlaMergeWarps(&red[tt * wpt][0], &m_s[tt * wpt], &l_s[tt * wpt], wpt, c);
    }
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kApplyRowsPerWarp; ++k) {
    const int j = j0 + k;
    if (j >= a.v) break;  // warp-uniform
    float w0[8], w1[8];
    Unpack8(wv[k][0], w0);
    Unpack8(wv[k][1], w1);
    for (int t = 0; t < T; ++t) {
      const float4* o = reinterpret_cast<const float4*>(o_s[t]);
      const float4 a0 = o[lane * 2], a1 = o[lane * 2 + 1], b0 = o[64 + lane * 2], b1 = o[64 + lane * 2 + 1];
      const float o0[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float o1[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
      float d = 0.0f;
#pragma unroll
      for (int e = 0; e < 8; ++e) d = fmaf(w0[e], o0[e], fmaf(w1[e], o1[e], d));
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) d += __shfl_xor_sync(0xffffffffu, d, off);
      if (lane == 0) a.out[int64_t(t) * a.out_stride + int64_t(h) * a.v + j] = __float2bfloat16_rn(d);
    }
  }
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// PEREGRINE_MLA_CARVEOUT=1 (A/B knob): the kernel asks for the largest shared-memory carveout,
// so that an SM running its blocks can also take a decode block (~170 KB of shared memory)
// that PDL launched early, without draining to reconfigure. Once per kernel.
template <typename Kernel>
void MaybeMaxCarveout(Kernel kernel, bool& done) {
  static const bool on = EnvFlag("PEREGRINE_MLA_CARVEOUT", false);
  if (done) return;
  done = true;
  if (on) cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
}

}  // namespace

void LaunchMlaKvPrep(const MlaKvPrepArgs& a, cudaStream_t stream) {
  if (a.write.batch.num_tokens == 0) return;
  LaunchPdl(MlaKvPrepKernel, dim3(unsigned(a.write.batch.num_tokens)), dim3(kPrepThreads), 0,
            stream, a);
}

bool LaunchMlaQAbsorb(const MlaQAbsorbArgs& a, cudaStream_t stream) {
  if (a.tokens < 1 || a.tokens > kMlaFoldMaxTokens || a.nope > kMlaFoldMaxNope ||
      a.rank % kFoldCols != 0 || a.ldw % 8 != 0 || !Aligned16(a.w) || a.rope % 2 != 0)
    return false;
  const int gx = a.with_prep ? std::max(a.rank / kFoldCols, a.tokens) : a.rank / kFoldCols;
  static bool carveout = false;
  MaybeMaxCarveout(MlaQAbsorbKernel, carveout);
  LaunchPdl(MlaQAbsorbKernel, dim3(unsigned(gx), unsigned(a.heads + (a.with_prep ? 1 : 0))),
            dim3(kFoldThreads), 0, stream, a);
  return true;
}

void LaunchMlaQPe(const MlaQAbsorbArgs& a, cudaStream_t stream) {
  if (a.tokens == 0 || a.rope == 0) return;
  const int units = a.heads * (a.positions ? a.rope / 2 : a.rope);
  LaunchPdl(MlaQPeKernel, dim3(unsigned((units + kFoldThreads - 1) / kFoldThreads), unsigned(a.tokens)),
            dim3(kFoldThreads), 0, stream, a);
}

bool LaunchMlaCombineApply(const MlaCombineApplyArgs& a, cudaStream_t stream) {
  if (a.tokens < 1 || a.tokens > kMlaFoldMaxTokens || a.ldw % 8 != 0 || !Aligned16(a.w))
    return false;
  static const bool slim = MlaSlimRegisters();
  static bool carveout = false;
  auto kernel = slim ? MlaCombineApplyKernel<true> : MlaCombineApplyKernel<false>;
  MaybeMaxCarveout(kernel, carveout);
  LaunchPdl(kernel, dim3(unsigned((a.v + kApplyRows - 1) / kApplyRows), unsigned(a.combine.heads)),
            dim3(kApplyThreads), 0, stream, a);
  return true;
}

}  // namespace pg::cuda
