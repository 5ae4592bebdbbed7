// Device helpers shared by the two prefill attention kernels (prefill_attention.cu: mma.sync,
// prefill_attention_wgmma.cu: sm_90a wgmma): cp.async, ex2, bf16 packing, and the block ->
// (sequence, tile, key range) mapping of prefill_attention.h's work decomposition.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/attention/prefill_attention.h"

namespace pg::cuda::prefill {

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy; !valid writes zeros and reads nothing.
__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src, bool valid) {
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ float Exp2(float x) {  // ex2(-inf) = 0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (low half) = lo
  return *reinterpret_cast<const uint32_t*>(&v);
}

// What one block of bm packed rows (blockIdx.x), kv head (blockIdx.y) and split (blockIdx.z)
// works on. Uniform over the block.
struct BlockWork {
  int seq = 0, tile = -1;  // tile < 0: nothing (grid padding)
  int q_len, q0, prefix;   // prefix: cached positions before the new tokens
  int row0, rows;          // first packed row, valid packed rows (<= bm)
  int pos_first, pos_last;  // positions of the first / last valid row
  int key_lo, key_hi;       // keys any row attends to in this split: [key_lo, key_hi)
};

// Sequences in order, a sequence's tiles in reverse (the tiles with the longest key ranges
// start first).
__device__ __forceinline__ BlockWork FindBlockWork(const PrefillAttentionArgs& a, int bm) {
  BlockWork w;
  const DeviceBatchView& b = a.batch;
  const int group = a.heads / a.kv_heads;
  for (int rest = int(blockIdx.x); w.seq < b.num_seqs; ++w.seq) {
    const int ql = b.q_len[w.seq];
    const int n = ql >= a.min_q_len ? (ql * group + bm - 1) / bm : 0;
    if (rest < n) {
      w.tile = n - 1 - rest;
      break;
    }
    rest -= n;
  }
  if (w.tile < 0) return w;
  const int s = w.seq, split = int(blockIdx.z);
  w.q_len = b.q_len[s], w.q0 = b.q_start[s];
  w.prefix = b.kv_len[s] - w.q_len;
  w.row0 = w.tile * bm;
  w.rows = min(bm, w.q_len * group - w.row0);
  w.pos_first = w.prefix + w.row0 / group, w.pos_last = w.prefix + (w.row0 + w.rows - 1) / group;
  w.key_lo = a.sliding_window > 0 ? max(0, w.pos_first - a.sliding_window + 1) : 0;
  w.key_hi = w.pos_last + 1;
  w.key_lo = max(w.key_lo, split * a.chunk);
  w.key_hi = min(w.key_hi, (split + 1) * a.chunk);
  return w;
}

}  // namespace pg::cuda::prefill
