// The fused decode attention's own steps (ops_fused_attention.h RopeKvWriteAttention; the
// kernel is decode_attention_mma.cu's DecodeMmaKernel with kFused): the new token's q/k
// RMSNorm + RoPE + cache write, done by each (sequence, kv head, split) block for its kv head
// after PdlWait, and the merge of a head group's split partials by the last split block to
// finish (a device counter per (row, kv head) that resets itself for the next launch / graph
// replay; no combine kernel).
//
// Invariants the fused kernel relies on (stated here, used in DecodeMmaKernel):
//  * Cache slots of positions < kv_len - 1 of a decode sequence (q_len 1) were written by
//    earlier steps, complete before this step's first kernel; within a step only this op
//    writes this layer's cache, and only at position kv_len - 1. So those slots (and the
//    batch plan, uploaded before the step) may be read before PdlWait (common/pdl.cuh).
//  * The slot of position kv_len - 1 is written by exactly one block per kv head (the split
//    whose key range holds that position), after PdlWait, and read by no block of the launch:
//    that block attends to the new token from shared memory, every block reads the cache only
//    below kv_len - 1.
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include "kernels/cuda/attention/decode_common.cuh"
#include "kernels/cuda/attention/kv_types.cuh"
#include "kernels/cuda/common/rope_device.cuh"

namespace pg::cuda::decode {

// Shared scratch of the new token's preparation, per block (head_dim D, group <= 16 rows).
// q_rows: the q rows it holds (kRows, or the group: the small kernel variant's smaller scratch).
template <int D>
struct FusedScratch {
  static constexpr int kRows = 16;
  __host__ __device__ static constexpr int Bytes(int q_rows) { return q_rows * D * 2 + 3 * D * 4 + kRows * 4; }
  static constexpr int kBytes = Bytes(kRows);
  static_assert(D * 2 % 16 == 0 && kBytes % 16 == 0, "scratch keeps 16-byte alignment");
  bf16* q;       // [q_rows][D] normalised + rotated q of the group, bf16
  float* k;      // [D] the new k as stored in the cache, widened (before the k scale)
  float* v;      // [D] the new v as stored, widened (before the v scale)
  float* cs;     // [D] (cos, sin) of each rotary pair
  float* score;  // [kRows] the new token's logit per head row, log2 units (as the MMA loop's)
  __device__ explicit FusedScratch(void* base, int q_rows = kRows) {
    char* p = static_cast<char*>(base);
    q = reinterpret_cast<bf16*>(p);
    k = reinterpret_cast<float*>(p + q_rows * D * 2);
    v = k + D, cs = v + D, score = cs + D;
  }
};

// Element i of a q/k norm weight as f32 (RopeKvWriteArgs::norm_type).
__device__ __forceinline__ float FusedNormWeight(const void* w, WeightType type, int i) {
  switch (type) {
    case WeightType::kBF16: return __bfloat162float(static_cast<const bf16*>(w)[i]);
    case WeightType::kF16: return __half2float(static_cast<const __half*>(w)[i]);
    default: return static_cast<const float*>(w)[i];
  }
}

// After PdlWait, all threads of the block: query row `row`'s q heads [h0, h0 + group) and kv
// head kvh's k / v go through (RMSNorm,) RoPE and bf16 rounding exactly as kv_write.cu's
// RopeKvWriteKernel does them; k and v are converted to the cache type (KvT), written to
// their slot when `owner` (this block's split holds position kv_len - 1), and kept widened in
// the scratch with the new token's logit of each head row. Ends with __syncthreads.
template <int D, typename KvT>
__device__ void PrepareNewToken(const RopeKvWriteArgs& f, const AttentionArgs& a, int s, int row,
                                int kvh, int group, bool owner, float qscale, float softcap,
                                const FusedScratch<D>& sc) {
  const int tid = threadIdx.x, nthreads = blockDim.x, lane = tid % 32, warp = tid / 32;
  const int warps = nthreads / 32;
  const int h0 = kvh * group;
  const KvWriteArgs& w = f.kv;
  {  // raw q rows of the group (16-byte vectors), k and v rows (loads in flight together)
    const bf16* q = f.q + int64_t(row) * f.q_stride + int64_t(h0) * D;
    for (int i = tid; i < group * D / 8; i += nthreads)
      reinterpret_cast<uint4*>(sc.q)[i] = reinterpret_cast<const uint4*>(q)[i];
    const bf16* k = w.k + int64_t(row) * w.k_stride + int64_t(kvh) * D;
    const bf16* v = w.v + int64_t(row) * w.v_stride + int64_t(kvh) * D;
    for (int e = tid; e < D; e += nthreads) sc.k[e] = __bfloat162float(k[e]), sc.v[e] = __bfloat162float(v[e]);
  }
  const float pos = float(f.positions[row]);
  const int half = f.rotary_dim / 2;
  for (int i = tid; i < half; i += nthreads) {
    float c = 1.0f, sn = 0.0f;
    RopeRotate(c, sn, f.inv_freq[i], pos);
    sc.cs[2 * i] = c, sc.cs[2 * i + 1] = sn;
  }
  __syncthreads();
  // Per-head RMSNorm (Qwen3): warp per head row (q rows, then the k row), as NormHeads.
  if (f.q_norm != nullptr) {
    for (int r = warp; r <= group; r += warps) {
      const bool is_q = r < group;
      const void* wt = is_q ? f.q_norm : f.k_norm;
      float ss = 0.0f;
      for (int e = lane; e < D; e += 32) {
        const float x = is_q ? __bfloat162float(sc.q[r * D + e]) : sc.k[e];
        ss += x * x;
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
      const float inv = rsqrtf(ss / float(D) + f.norm_eps);
      for (int e = lane; e < D; e += 32) {
        const float x = is_q ? __bfloat162float(sc.q[r * D + e]) : sc.k[e];
        const bf16 y = __float2bfloat16_rn(x * inv * FusedNormWeight(wt, f.norm_type, e));
        if (is_q) sc.q[r * D + e] = y;
        else sc.k[e] = __bfloat162float(y);
      }
    }
    __syncthreads();
  }
  // RoPE on the q rows and the k row (dims past rotary_dim stay), rounded to bf16.
  for (int idx = tid; idx < (group + 1) * half; idx += nthreads) {
    const int r = idx / half, i = idx % half;
    int i0, i1;
    RopePairIndex(f.neox, i, half, i0, i1);
    const bool is_q = r < group;
    float x0 = is_q ? __bfloat162float(sc.q[r * D + i0]) : sc.k[i0];
    float x1 = is_q ? __bfloat162float(sc.q[r * D + i1]) : sc.k[i1];
    const float c = sc.cs[2 * i], sn = sc.cs[2 * i + 1];
    const float r0 = x0 * c - x1 * sn, r1 = x1 * c + x0 * sn;
    const bf16 b0 = __float2bfloat16_rn(r0), b1 = __float2bfloat16_rn(r1);
    if (is_q) {
      sc.q[r * D + i0] = b0, sc.q[r * D + i1] = b1;
    } else {
      sc.k[i0] = __bfloat162float(b0), sc.k[i1] = __bfloat162float(b1);
    }
  }
  __syncthreads();
  // The cache type; the owner writes the slot (kv_write.cu SlotOffset).
  const DeviceBatchView& b = a.batch;
  const int p = b.kv_len[s] - 1;
  const int64_t slot = (int64_t(b.page_table[b.page_start[s] + p / b.page_size]) * b.page_size +
                        p % b.page_size) * int64_t(w.kv_heads) * D + int64_t(kvh) * D;
  for (int e = tid; e < D; e += nthreads) {
    const KvT ks = kv::Traits<KvT>::From(sc.k[e] * w.inv_k_scale);
    const KvT vs = kv::Traits<KvT>::From(sc.v[e] * w.inv_v_scale);
    if (owner) static_cast<KvT*>(w.k_cache)[slot + e] = ks, static_cast<KvT*>(w.v_cache)[slot + e] = vs;
    sc.k[e] = float(ks), sc.v[e] = float(vs);
  }
  __syncthreads();
  // The new token's logit per head row (rows >= group: 0, never stored).
  for (int r = warp; r < FusedScratch<D>::kRows; r += warps) {
    float dot = 0.0f;
    if (r < group)
      for (int e = lane; e < D; e += 32) dot += __bfloat162float(sc.q[r * D + e]) * sc.k[e];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    float x = dot * qscale;
    if (softcap > 0.0f) x = softcap * tanhf(x / softcap) * kLog2e;
    if (lane == 0) sc.score[r] = x;
  }
  __syncthreads();
}

// The new token's inputs that no kernel of the step writes, loaded before PdlWait (the batch
// plan and positions are uploaded before the step; norm weights and inv_freq are the model's):
// per lane, for its dims e = lane + 32 j (j < kV): the rotation's (cos, sin) and the q / k
// norm weights; and the new slot's element offset. fast: the rotation pairs a lane's dims with
// its own (neox with half a multiple of 32) or with lane ^ 1's (interleaved), so
// PrepareNewTokenFast holds every row in registers; otherwise PrepareNewToken runs.
template <int D>
struct NewTokenInputs {
  static constexpr int kV = D / 32;
  float c[kV], sn[kV], qw[kV], kw[kV];
  int64_t slot;
  bool fast;
};

template <int D>
__device__ __forceinline__ NewTokenInputs<D> LoadNewTokenInputs(const RopeKvWriteArgs& f,
                                                                const AttentionArgs& a, int s,
                                                                int row, int kvh) {
  constexpr int kV = D / 32;
  NewTokenInputs<D> in;
  const int lane = threadIdx.x % 32, half = f.rotary_dim / 2;
  in.fast = f.neox ? half % 32 == 0 : f.rotary_dim % 2 == 0;
  const float pos = float(f.positions[row]);
#pragma unroll
  for (int j = 0; j < kV; ++j) {
    const int e = lane + 32 * j;
    in.c[j] = 1.0f, in.sn[j] = 0.0f;
    if (e < f.rotary_dim) RopeRotate(in.c[j], in.sn[j], f.inv_freq[f.neox ? e % half : e / 2], pos);
    in.qw[j] = f.q_norm != nullptr ? FusedNormWeight(f.q_norm, f.norm_type, e) : 1.0f;
    in.kw[j] = f.k_norm != nullptr ? FusedNormWeight(f.k_norm, f.norm_type, e) : 1.0f;
  }
  const DeviceBatchView& b = a.batch;
  const int p = b.kv_len[s] - 1;
  in.slot = (int64_t(b.page_table[b.page_start[s] + p / b.page_size]) * b.page_size +
             p % b.page_size) * int64_t(f.kv.kv_heads) * D + int64_t(kvh) * D;
  return in;
}

// One head row held by a lane at dims lane + 32 j: (RMSNorm,) RoPE and the bf16 roundings of
// PrepareNewToken, in the same order (the sums run over j, then across lanes as its loops do).
// x: the raw bf16 values widened; w: the norm weights (norm: whether the row is normalised).
template <int D>
__device__ __forceinline__ void NormRopeRow(float (&x)[D / 32], const float (&w)[D / 32], bool norm,
                                            float eps, const RopeKvWriteArgs& f,
                                            const NewTokenInputs<D>& in) {
  constexpr int kV = D / 32;
  const int lane = threadIdx.x % 32, half = f.rotary_dim / 2;
  if (norm) {
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < kV; ++j) ss += x[j] * x[j];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float inv = rsqrtf(ss / float(D) + eps);
#pragma unroll
    for (int j = 0; j < kV; ++j) x[j] = __bfloat162float(__float2bfloat16_rn(x[j] * inv * w[j]));
  }
  float y[kV];
#pragma unroll
  for (int j = 0; j < kV; ++j) {
    const int e = lane + 32 * j;
    float x0, x1;  // the pair (low, high) this dim belongs to
    bool low;
    if (f.neox) {
      low = e < half;
      const int jp = low ? j + half / 32 : j - half / 32;  // the partner dim, same lane
      float px = 0.0f;  // x[jp] by selects (a runtime index would put x in local memory)
#pragma unroll
      for (int k = 0; k < kV; ++k) px = jp == k ? x[k] : px;
      x0 = low ? x[j] : px, x1 = low ? px : x[j];
    } else {
      low = e % 2 == 0;
      const float px = __shfl_xor_sync(0xffffffffu, x[j], 1);
      x0 = low ? x[j] : px, x1 = low ? px : x[j];
    }
    const float c = in.c[j], sn = in.sn[j];
    const float r0 = x0 * c - x1 * sn, r1 = x1 * c + x0 * sn;
    y[j] = e < f.rotary_dim ? __bfloat162float(__float2bfloat16_rn(low ? r0 : r1)) : x[j];
  }
#pragma unroll
  for (int j = 0; j < kV; ++j) x[j] = y[j];
}

// PrepareNewToken's work where in.fast holds (same results, same scratch contents that the
// kernel reads: q rows, v, score): every warp loads the new k and v rows and its q rows
// (r = warp + warps * i) in one round of loads, normalises and rotates them in registers (the
// k row redundantly in every warp, so its q rows' logits need no barrier), warp 0 writes the
// slot when `owner`; one __syncthreads at the end. kMaxQ: the q rows a warp holds, so group <=
// kWarps * kMaxQ (the caller checks); a plan that knows its group fits one row a warp takes 1,
// so its kernel carries one row's code, not four rows it would branch over (H200, Llama-3.1-8B
// 1 x 1K, the two-tile kernel 204 -> 173 registers, -7 to -19 us a step in three calls;
// docs/PERF.md "Session 23").
template <int D, typename KvT, int kMaxQ = (FusedScratch<D>::kRows + kWarps - 1) / kWarps>
__device__ void PrepareNewTokenFast(const RopeKvWriteArgs& f, int row, int kvh, int group,
                                    bool owner, float qscale, float softcap,
                                    const NewTokenInputs<D>& in, const FusedScratch<D>& sc) {
  constexpr int kV = D / 32;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = kWarps;  // the fused block's
  const KvWriteArgs& w = f.kv;
  const bf16* qg = f.q + int64_t(row) * f.q_stride + int64_t(kvh * group) * D;
  const bf16* kg = w.k + int64_t(row) * w.k_stride + int64_t(kvh) * D;
  const bf16* vg = w.v + int64_t(row) * w.v_stride + int64_t(kvh) * D;
  float kx[kV], vx[kV], qx[kMaxQ][kV];
#pragma unroll
  for (int j = 0; j < kV; ++j) kx[j] = __bfloat162float(kg[lane + 32 * j]), vx[j] = __bfloat162float(vg[lane + 32 * j]);
#pragma unroll
  for (int i = 0; i < kMaxQ; ++i) {
    const int r = warp + warps * i;
#pragma unroll
    for (int j = 0; j < kV; ++j) qx[i][j] = r < group ? __bfloat162float(qg[r * D + lane + 32 * j]) : 0.0f;
  }
  const bool norm = f.q_norm != nullptr;
  NormRopeRow<D>(kx, in.kw, norm, f.norm_eps, f, in);
#pragma unroll
  for (int j = 0; j < kV; ++j) {  // the cache type; the stored value widened (before the k scale)
    const int e = lane + 32 * j;
    const KvT ks = kv::Traits<KvT>::From(kx[j] * w.inv_k_scale);
    const KvT vs = kv::Traits<KvT>::From(vx[j] * w.inv_v_scale);
    if (owner && warp == 0)
      static_cast<KvT*>(w.k_cache)[in.slot + e] = ks, static_cast<KvT*>(w.v_cache)[in.slot + e] = vs;
    kx[j] = float(ks), vx[j] = float(vs);
    if (warp == 0) sc.k[e] = kx[j], sc.v[e] = vx[j];
  }
#pragma unroll
  for (int i = 0; i < kMaxQ; ++i) {
    const int r = warp + warps * i;
    // Warp-uniform. Rows past the group get no logit: the kernel reads score[r] for r < group
    // only (their reduction's five dependent shuffles were on every warp's path).
    if (r >= group) break;
    NormRopeRow<D>(qx[i], in.qw, norm, f.norm_eps, f, in);
    float dot = 0.0f;
#pragma unroll
    for (int j = 0; j < kV; ++j) {
      const bf16 qb = __float2bfloat16_rn(qx[i][j]);  // exact: qx is a bf16 value
      sc.q[r * D + lane + 32 * j] = qb;
      dot += __bfloat162float(qb) * kx[j];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    float x = dot * qscale;
    if (softcap > 0.0f) x = softcap * tanhf(x / softcap) * kLog2e;
    if (lane == 0) sc.score[r] = x;
  }
  __syncthreads();
}

// PrepareNewTokenFast's work done by one warp for its kv head (the streaming kernel's consumer
// warp, decode_stream.cu kFused; in.fast must hold): the raw q rows of the group go to q_smem
// ([group][D] bf16, 16-byte aligned) with the k and v rows' loads in flight together, then row
// after row (RMSNorm,) RoPE and the bf16 rounding in place, each row's logit against the new
// k. Returns in vx the stored v widened (before the v scale; lane dims lane + 32 j) and in s0
// / s1 the logits (log2 units) of rows g and g + 8 of the lane's quad (g = lane / 4; 0 past
// the group); writes the cache slot when write_slot. Ends with __syncwarp.
template <int D, typename KvT>
__device__ void PrepareNewTokenWarp(const RopeKvWriteArgs& f, int row, int kvh, int group,
                                    bool write_slot, float qscale, float softcap,
                                    const NewTokenInputs<D>& in, bf16* q_smem,
                                    float (&vx)[D / 32], float& s0, float& s1) {
  constexpr int kV = D / 32;
  const int lane = threadIdx.x % 32, g = lane / 4;
  const KvWriteArgs& w = f.kv;
  const bf16* qg = f.q + int64_t(row) * f.q_stride + int64_t(kvh * group) * D;
  const bf16* kg = w.k + int64_t(row) * w.k_stride + int64_t(kvh) * D;
  const bf16* vg = w.v + int64_t(row) * w.v_stride + int64_t(kvh) * D;
  for (int i = lane; i < group * D / 8; i += 32)
    reinterpret_cast<uint4*>(q_smem)[i] = reinterpret_cast<const uint4*>(qg)[i];
  float kx[kV];
#pragma unroll
  for (int j = 0; j < kV; ++j) kx[j] = __bfloat162float(kg[lane + 32 * j]), vx[j] = __bfloat162float(vg[lane + 32 * j]);
  const bool norm = f.q_norm != nullptr;
  NormRopeRow<D>(kx, in.kw, norm, f.norm_eps, f, in);
#pragma unroll
  for (int j = 0; j < kV; ++j) {  // the cache type; the stored value widened (before the scale)
    const int e = lane + 32 * j;
    const KvT ks = kv::Traits<KvT>::From(kx[j] * w.inv_k_scale);
    const KvT vs = kv::Traits<KvT>::From(vx[j] * w.inv_v_scale);
    if (write_slot) static_cast<KvT*>(w.k_cache)[in.slot + e] = ks, static_cast<KvT*>(w.v_cache)[in.slot + e] = vs;
    kx[j] = float(ks), vx[j] = float(vs);
  }
  __syncwarp();  // the raw q rows are in shared memory
  s0 = 0.0f, s1 = 0.0f;
  for (int r = 0; r < group; ++r) {
    float qx[kV];
#pragma unroll
    for (int j = 0; j < kV; ++j) qx[j] = __bfloat162float(q_smem[r * D + lane + 32 * j]);
    NormRopeRow<D>(qx, in.qw, norm, f.norm_eps, f, in);
    float dot = 0.0f;
#pragma unroll
    for (int j = 0; j < kV; ++j) {
      const bf16 qb = __float2bfloat16_rn(qx[j]);  // exact: qx is a bf16 value
      q_smem[r * D + lane + 32 * j] = qb;
      dot += __bfloat162float(qb) * kx[j];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    float x = dot * qscale;
    if (softcap > 0.0f) x = softcap * tanhf(x / softcap) * kLog2e;
    if (r == g) s0 = x;
    if (r == g + 8) s1 = x;
  }
  __syncwarp();  // the rotated q rows are visible to the warp
}

// After the block stored its split's partials (MergeWarpsAndStore with finish = false) of row
// t's heads [h0, h0 + ng): the last of the row's `active` split blocks of this kv head merges
// the splits and resets the counter (threadFenceReduction, as FinishSplits) — spread over all
// threads: one warp per head computes the split weights into `w` (shared, [ng][active]
// floats), then every thread merges 4 dims of one head with independent 16-byte loads.
__device__ __forceinline__ void FusedFinishSplits(const AttentionArgs& a, int t, int h0, int ng,
                                                  int active, float* w) {
  const bool registers = a.fused_prep_registers;
  if (active == 1) return;
  __shared__ float inv_sum[16];
  if (!LastSplitArrives(a, t, active)) return;
  const int lane = threadIdx.x % 32, warps = blockDim.x / 32, D = a.head_dim;
  constexpr int kRegSplits = 32;
  if (registers && active <= kRegSplits && D <= 128) {
    // Up to 32 splits: a warp per head, lane v merges dims 4v..4v+3; its split partials and the
    // (max, sum) pairs load in one round (no shared memory, no barrier). Same sums, same order.
    for (int g = threadIdx.x / 32; g < ng; g += warps) {
      const int64_t hb = int64_t(t) * a.heads + h0 + g;
      const float* ml = a.partial_ml + 2 * hb * a.num_splits;
      const float4* acc = reinterpret_cast<const float4*>(a.partial_acc + hb * a.num_splits * D) + lane;
      const int vecs = D / 4;
      const bool live = lane < vecs;
      float4 p[kRegSplits];
#pragma unroll
      for (int i = 0; i < kRegSplits; ++i)
        p[i] = live && i < active ? __ldcg(acc + int64_t(i) * vecs) : make_float4(0, 0, 0, 0);
      const float mi = lane < active ? __ldcg(ml + 2 * lane) : -INFINITY;
      const float li = lane < active ? __ldcg(ml + 2 * lane + 1) : 0.0f;
      float mx = mi;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float c = lane < active ? Exp2Or0(mi, mx) : 0.0f;
      float sum = lane < active ? c * li : 0.0f;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      float4 o = make_float4(0, 0, 0, 0);
#pragma unroll
      for (int i = 0; i < kRegSplits; ++i) {
        const float ci = __shfl_sync(0xffffffffu, c, i);
        if (i < active) AddScaled(o, ci, p[i]);
      }
      const float inv = sum > 0.0f ? a.v_scale / sum : 0.0f;
      if (live) {
        bf16* out = a.out + int64_t(t) * a.out_stride + int64_t(h0 + g) * D + 4 * lane;
        out[0] = __float2bfloat16_rn(o.x * inv), out[1] = __float2bfloat16_rn(o.y * inv);
        out[2] = __float2bfloat16_rn(o.z * inv), out[3] = __float2bfloat16_rn(o.w * inv);
      }
    }
    return;
  }
  for (int g = threadIdx.x / 32; g < ng; g += warps) {
    const float* ml = a.partial_ml + 2 * ((int64_t(t) * a.heads + h0 + g) * a.num_splits);
    float mx = -INFINITY;
    for (int i = lane; i < active; i += 32) mx = fmaxf(mx, __ldcg(ml + 2 * i));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float sum = 0.0f;
    for (int i = lane; i < active; i += 32) {
      const float c = Exp2Or0(__ldcg(ml + 2 * i), mx);
      sum += c * __ldcg(ml + 2 * i + 1);
      w[g * active + i] = c;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) inv_sum[g] = sum > 0.0f ? a.v_scale / sum : 0.0f;
  }
  __syncthreads();
  const int vecs = D / 4;
  for (int item = threadIdx.x; item < ng * vecs; item += blockDim.x) {
    const int g = item / vecs, v = item % vecs;
    const float4* acc = reinterpret_cast<const float4*>(
        a.partial_acc + (int64_t(t) * a.heads + h0 + g) * a.num_splits * D) + v;
    float4 o = make_float4(0, 0, 0, 0);
#pragma unroll 16
    for (int i = 0; i < active; ++i) {
      const float c = w[g * active + i];
      const float4 p = __ldcg(acc + int64_t(i) * vecs);
      AddScaled(o, c, p);
    }
    const float inv = inv_sum[g];
    bf16* out = a.out + int64_t(t) * a.out_stride + int64_t(h0 + g) * D + 4 * v;
    out[0] = __float2bfloat16_rn(o.x * inv), out[1] = __float2bfloat16_rn(o.y * inv);
    out[2] = __float2bfloat16_rn(o.z * inv), out[3] = __float2bfloat16_rn(o.w * inv);
  }
}

// The cluster merge (AttentionArgs::cluster_merge): a block's merged split partial of its ng
// head rows in its own shared memory, [ng][D] unnormalised sums, then [ng] maxima (log2
// units) and [ng] sums of weights. Byte offset past the kernel's warp-merge buffers
// (kWarps x rows x (D + 2) floats and rows x num_splits split weights), 16-byte aligned.
__host__ __device__ constexpr int ClusterPartOffset(int rows, int D, int num_splits) {
  return ((kWarps * rows * (D + 2) + rows * num_splits) * 4 + 15) / 16 * 16;
}
__host__ __device__ constexpr int ClusterPartBytes(int ng, int D) { return (ng * D + 2 * ng) * 4; }

// The merge's inbox (AttentionArgs::cluster_inbox): [active][P] partial sums of the owner's
// items (P = ceil(ng D / active)), then, at ng D + kMaxClusterSplits floats, [active][ng] (max,
// sum) pairs. Bytes for the largest active (kMaxClusterSplits): active P < ng D + active.
__host__ __device__ constexpr int ClusterInboxBytes(int ng, int D) {
  return (ng * D + kMaxClusterSplits + 2 * kMaxClusterSplits * ng) * 4;
}

// Owner r < active of the merge: items [r P, min((r + 1) P, ng D)), P = MergeShare.
__device__ __forceinline__ int MergeShare(int items, int active) { return (items + active - 1) / active; }
// Where split `split`'s item idx lands: owner r's inbox, at float offset off.
struct InboxSlot {
  int r, off;
};
__device__ __forceinline__ InboxSlot InboxItem(int idx, int P, int split) {
  const int r = idx / P;
  return {r, split * P + idx - r * P};
}
// Float offset of split `split`'s (max, sum) of row g in every owner's inbox (even: 8-byte
// aligned pairs).
__device__ __forceinline__ int InboxMl(int items, int ng, int split, int g) {
  return items + kMaxClusterSplits + 2 * (split * ng + g);
}

// The cluster merge. The kernel calls ClusterMergeStart at its start (every block: the
// cluster barrier's first phase, which the first distributed-shared-memory store waits for, so
// that no store reaches a block that has not started), then every block calls
// ClusterMergeSplits once, also one with no keys (surplus split: part null) and with one active
// split (its output written already): split `split`'s partial (part: the ClusterPart layout
// above, in this block's shared memory) goes to each owner's inbox (AttentionArgs::
// cluster_inbox: peers store into it while this block may still walk its keys, so it lies past
// everything the block writes itself), one cluster barrier (release / acquire), and each owner
// r < active merges its items from its own shared memory. After the barrier no block touches
// another's shared memory, so none waits at a second one (the earlier pull form loaded every
// split's partial from its block after the barrier and held all blocks at a second barrier
// until those loads were done: H200, session 22, a layer's attention 0.4-0.8 us longer).
// Sums in FusedFinishSplits' order: over the splits in order, each weighted by 2^(m - max).
__device__ __forceinline__ void ClusterMergeStart() {
  asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory");
}
// This block's rank in its cluster (a kv head's splits: the split index).
__device__ __forceinline__ int ClusterRank() { return int(cooperative_groups::this_cluster().block_rank()); }

// The owners' merge after every split's partial has reached the inboxes: owner r < active
// merges its items [r P, min((r + 1) P, ng D)) from its own shared memory into the output.
__device__ __forceinline__ void ClusterMergeItems(const AttentionArgs& a, int t, int h0, int ng,
                                                  int active, int r) {
  extern __shared__ uint4 smem_base[];
  const float* inbox = reinterpret_cast<const float*>(reinterpret_cast<const char*>(smem_base) + a.cluster_inbox);
  const int D = a.head_dim, items = ng * D;
  const int P = MergeShare(items, active);
  const float* ml = inbox + InboxMl(items, ng, 0, 0);  // split i's row g at 2 (i ng + g)
  constexpr int kMax = kMaxClusterSplits;
  for (int j = threadIdx.x; j < P; j += blockDim.x) {
    const int idx = r * P + j;
    if (idx >= items) break;
    const int g = idx / D;
    // The maxima first (their loads in one round), then the sums, four splits' loads at a
    // time (a fully unrolled round took the 2-stage kernel from 203 to 222 registers; unroll 1
    // and 8 measured 5-30 us a step slower, H200, session 22).
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < kMax; ++i)
      if (i < active) mx = fmaxf(mx, ml[2 * (i * ng + g)]);
    float sum = 0.0f, o = 0.0f;
#pragma unroll 4
    for (int i = 0; i < active; ++i) {
      const float c = Exp2Or0(ml[2 * (i * ng + g)], mx);
      sum += c * ml[2 * (i * ng + g) + 1];
      o += c * inbox[i * P + j];
    }
    const float inv = sum > 0.0f ? a.v_scale / sum : 0.0f;
    a.out[int64_t(t) * a.out_stride + int64_t(h0 + g) * D + idx % D] = __float2bfloat16_rn(o * inv);
  }
}

// The merge barrier's second phase: every block's pushes are visible to their owners.
__device__ __forceinline__ void ClusterMergeBarrier() {
  asm volatile("barrier.cluster.arrive.release;" ::: "memory");
  asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
}

// The merge's first half: this block's split partial (part, complete in its threads' stores)
// into the owners' inboxes, after the barrier phase that says every block has started. With
// one active split or no partial it only waits for that phase.
__device__ __forceinline__ void ClusterMergePush(const AttentionArgs& a, int ng, int active,
                                                 int split, const float* part) {
  namespace cg = cooperative_groups;
  cg::cluster_group cl = cg::this_cluster();
  extern __shared__ uint4 smem_base[];
  float* inbox = reinterpret_cast<float*>(reinterpret_cast<char*>(smem_base) + a.cluster_inbox);
  const int D = a.head_dim, items = ng * D;
  const bool push = part != nullptr && active > 1;
  if (push) __syncthreads();  // part was written by the block's threads (MergeWarpsAndStore)
  asm volatile("barrier.cluster.wait;" ::: "memory");  // every block has started
  if (push) {
    const int P = MergeShare(items, active);
    for (int idx = threadIdx.x; idx < items; idx += blockDim.x) {
      const InboxSlot s = InboxItem(idx, P, split);
      cl.map_shared_rank(inbox, s.r)[s.off] = part[idx];
    }
    for (int x = threadIdx.x; x < active * ng; x += blockDim.x) {
      const int r = x / ng, g = x % ng;
      float* ml = cl.map_shared_rank(inbox + InboxMl(items, ng, split, g), r);
      ml[0] = part[items + g], ml[1] = part[items + ng + g];
    }
  }
}

__device__ __forceinline__ void ClusterMergeSplits(const AttentionArgs& a, int t, int h0, int ng,
                                                   int active, int split, const float* part) {
  ClusterMergePush(a, ng, active, split, part);
  ClusterMergeBarrier();
  const int r = ClusterRank();
  if (part != nullptr && active > 1 && r < active) ClusterMergeItems(a, t, h0, ng, active, r);
}

}  // namespace pg::cuda::decode
