// The streaming decode kernel's fused form (decode_stream.cu with kFused; ops_fused_attention.h
// RopeKvWriteAttention): the new token's q/k RMSNorm + RoPE + cache write for EVERY head of
// the row, done by the consumer threads of each (sequence, split) block after PdlWait, as
// decode_fused.cuh's PrepareNewToken does it for one kv head (same rounding: the outputs are
// those of kv_write.cu's RopeKvWriteKernel). decode_fused.cuh's invariants hold: cache slots
// below kv_len - 1 were written by earlier steps (the producer streams them before PdlWait),
// the slot kv_len - 1 is written by the block whose split holds it ("owner") and read by no
// block (the owner attends to the new token from shared memory).
#pragma once

#include <cuda_bf16.h>

#include "kernels/cuda/attention/decode_fused.cuh"  // FusedNormWeight
#include "kernels/cuda/attention/kv_types.cuh"
#include "kernels/cuda/common/rope_device.cuh"

namespace pg::cuda::decode {

// Shared scratch of the new token (head_dim D): heads x D q rows (bf16, normalised + rotated),
// kv_heads x D k and v rows as stored in the cache (widened, before the scales), the rotary
// (cos, sin) pairs and the new token's logit per query head (log2 units, as the MMA loop's).
template <int D>
struct StreamFusedScratch {
  bf16* q;
  float* k;
  float* v;
  float* cs;
  float* score;
  __host__ __device__ static int Bytes(int heads, int kv_heads) {
    return (heads * D * 2 + 2 * kv_heads * D * 4 + D * 4 + heads * 4 + 15) / 16 * 16;
  }
  __device__ StreamFusedScratch(void* base, int heads, int kv_heads) {
    char* p = static_cast<char*>(base);
    q = reinterpret_cast<bf16*>(p);
    k = reinterpret_cast<float*>(p + heads * D * 2);
    v = k + kv_heads * D, cs = v + kv_heads * D, score = cs + D;
  }
};

// nthreads threads (ids tid; sync(): their barrier): row `row` of sequence s. Ends with sync().
template <int D, typename KvT, typename Sync>
__device__ __forceinline__ void PrepareNewTokenAllHeads(const RopeKvWriteArgs& f,
                                                        const AttentionArgs& a, int s, int row,
                                                        bool owner, float qscale,
                                                        const StreamFusedScratch<D>& sc, int tid,
                                                        int nthreads, Sync sync) {
  const int lane = tid % 32, warp = tid / 32, warps = nthreads / 32;
  const int heads = a.heads, kvh = a.kv_heads, group = heads / kvh;
  const KvWriteArgs& w = f.kv;
  {  // raw rows (16-byte vectors): q [heads][D], k and v [kv_heads][D]
    const uint4* q = reinterpret_cast<const uint4*>(f.q + int64_t(row) * f.q_stride);
    for (int i = tid; i < heads * D / 8; i += nthreads) reinterpret_cast<uint4*>(sc.q)[i] = q[i];
    const bf16* k = w.k + int64_t(row) * w.k_stride;
    const bf16* v = w.v + int64_t(row) * w.v_stride;
    for (int e = tid; e < kvh * D; e += nthreads) sc.k[e] = __bfloat162float(k[e]), sc.v[e] = __bfloat162float(v[e]);
  }
  const float pos = float(f.positions[row]);
  const int half = f.rotary_dim / 2;
  for (int i = tid; i < half; i += nthreads) {
    float c = 1.0f, sn = 0.0f;
    RopeRotate(c, sn, f.inv_freq[i], pos);
    sc.cs[2 * i] = c, sc.cs[2 * i + 1] = sn;
  }
  sync();
  if (f.q_norm != nullptr) {  // per-head RMSNorm (Qwen3): a warp per row, q rows then k rows
    for (int r = warp; r < heads + kvh; r += warps) {
      const bool is_q = r < heads;
      const void* wt = is_q ? f.q_norm : f.k_norm;
      float ss = 0.0f;
      for (int e = lane; e < D; e += 32) {
        const float x = is_q ? __bfloat162float(sc.q[r * D + e]) : sc.k[(r - heads) * D + e];
        ss += x * x;
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
      const float inv = rsqrtf(ss / float(D) + f.norm_eps);
      for (int e = lane; e < D; e += 32) {
        const float x = is_q ? __bfloat162float(sc.q[r * D + e]) : sc.k[(r - heads) * D + e];
        const bf16 y = __float2bfloat16_rn(x * inv * FusedNormWeight(wt, f.norm_type, e));
        if (is_q) sc.q[r * D + e] = y;
        else sc.k[(r - heads) * D + e] = __bfloat162float(y);
      }
    }
    sync();
  }
  // RoPE on the q rows and the k rows (dims past rotary_dim stay), rounded to bf16.
  for (int idx = tid; idx < (heads + kvh) * half; idx += nthreads) {
    const int r = idx / half, i = idx % half;
    int i0, i1;
    RopePairIndex(f.neox, i, half, i0, i1);
    const bool is_q = r < heads;
    float* kr = sc.k + (r - heads) * D;
    const float x0 = is_q ? __bfloat162float(sc.q[r * D + i0]) : kr[i0];
    const float x1 = is_q ? __bfloat162float(sc.q[r * D + i1]) : kr[i1];
    const float c = sc.cs[2 * i], sn = sc.cs[2 * i + 1];
    const bf16 b0 = __float2bfloat16_rn(x0 * c - x1 * sn), b1 = __float2bfloat16_rn(x1 * c + x0 * sn);
    if (is_q) sc.q[r * D + i0] = b0, sc.q[r * D + i1] = b1;
    else kr[i0] = __bfloat162float(b0), kr[i1] = __bfloat162float(b1);
  }
  sync();
  // The cache type; the owner writes the slot of every kv head (one contiguous run).
  const DeviceBatchView& b = a.batch;
  const int p = b.kv_len[s] - 1;
  const int64_t slot = (int64_t(b.page_table[b.page_start[s] + p / b.page_size]) * b.page_size +
                        p % b.page_size) * int64_t(kvh) * D;
  for (int e = tid; e < kvh * D; e += nthreads) {
    const KvT ks = kv::Traits<KvT>::From(sc.k[e] * w.inv_k_scale);
    const KvT vs = kv::Traits<KvT>::From(sc.v[e] * w.inv_v_scale);
    if (owner) static_cast<KvT*>(w.k_cache)[slot + e] = ks, static_cast<KvT*>(w.v_cache)[slot + e] = vs;
    sc.k[e] = float(ks), sc.v[e] = float(vs);
  }
  sync();
  // The new token's logit per query head (its kv head's k).
  for (int r = warp; r < heads; r += warps) {
    float dot = 0.0f;
    for (int e = lane; e < D; e += 32) dot += __bfloat162float(sc.q[r * D + e]) * sc.k[(r / group) * D + e];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    float x = dot * qscale;
    if (a.softcap > 0.0f) x = a.softcap * tanhf(x / a.softcap) * kLog2e;
    if (lane == 0) sc.score[r] = x;
  }
  sync();
}

}  // namespace pg::cuda::decode
