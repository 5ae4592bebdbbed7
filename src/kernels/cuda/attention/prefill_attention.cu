// Tensor-core paged prefill attention; see prefill_attention.h for the work decomposition.
//
// Per block (kWarps warps, BM = 16 * kWarps packed query rows, warp w owns rows [16w, 16w+16)):
//   shared: sQ [BM][D], sK [2][kBlockN][D], sV [2][kBlockN][D] (bf16, double-buffered K/V).
//   Rows of D bf16 are 16-byte chunks stored at chunk ^ (row & 7) (XOR swizzle) so that the
//   8 row addresses of every ldmatrix hit distinct banks.
//   registers per warp: Q fragments [D/16][4], scores S [kBlockN/8][4] f32, O [D/8][4] f32.
// mma.sync m16n8k16 (row.col, bf16 in, f32 accumulate) fragment layout, g = lane / 4,
// t = lane % 4: A regs {(g, 2t), (g+8, 2t), (g, 2t+8), (g+8, 2t+8)} (pairs of bf16);
// B regs {(k 2t, n g), (k 2t+8, n g)}; C {(g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)}.
// S = Q K^T takes K rows (keys) as B directly (ldmatrix); O += P V takes V through
// ldmatrix.trans and P straight from S's accumulators (the C layout of two n-tiles is the A
// layout of one k-step).
// Scores live in the log2 domain (scale * log2(e) folded in), so the softmax uses ex2.
#include "kernels/cuda/attention/prefill_attention.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

namespace pg::cuda {
namespace {

constexpr int kBlockN = 64;  // keys per K/V tile; split chunks are multiples of it
constexpr float kLog2e = 1.4426950408889634f;

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

__device__ __forceinline__ void Ldsm4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void Ldsm4T(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c += a * b (m16n8k16, bf16 inputs, f32 accumulators).
__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
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

// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled [rows][D] bf16 tile.
template <int D>
__device__ __forceinline__ uint32_t TileOffset(int row, int chunk) {
  return uint32_t(row * D * 2 + ((chunk ^ (row & 7)) << 4));
}

template <int D, int kWarps>
__global__ void __launch_bounds__(kWarps * 32) PrefillKernel(const PrefillAttentionArgs a) {
  constexpr int BM = 16 * kWarps;
  constexpr int kThreads = kWarps * 32;
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  constexpr int kTileBytes = kBlockN * D * 2;
  static_assert(kThreads % kChunks == 0, "a thread keeps one chunk column");
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sQ = SmemAddr(smem);
  const uint32_t sK = sQ + BM * D * 2;          // [2][kBlockN][D]
  const uint32_t sV = sK + 2 * kTileBytes;      // [2][kBlockN][D]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int kvh = blockIdx.y, split = blockIdx.z;
  const DeviceBatchView& b = a.batch;
  const int group = a.heads / a.kv_heads;

  // This block's (sequence, tile): sequences in order, a sequence's tiles in reverse (the
  // tiles with the longest key ranges start first). Uniform over the block.
  int s = 0, tile = -1;
  for (int rest = int(blockIdx.x); s < b.num_seqs; ++s) {
    const int ql = b.q_len[s];
    const int n = ql >= a.min_q_len ? (ql * group + BM - 1) / BM : 0;
    if (rest < n) {
      tile = n - 1 - rest;
      break;
    }
    rest -= n;
  }
  if (tile < 0) return;

  const int q_len = b.q_len[s], q0 = b.q_start[s];
  const int prefix = b.kv_len[s] - q_len;  // cached positions before the new tokens
  const int row0 = tile * BM;              // first packed row
  const int rows = min(BM, q_len * group - row0);
  const int pos_first = prefix + row0 / group, pos_last = prefix + (row0 + rows - 1) / group;
  // Keys any row of the block attends to in this split: [key_lo, key_hi).
  int key_lo = a.sliding_window > 0 ? max(0, pos_first - a.sliding_window + 1) : 0;
  int key_hi = pos_last + 1;
  key_lo = max(key_lo, split * a.chunk);
  key_hi = min(key_hi, (split + 1) * a.chunk);
  const int t_begin = key_lo / kBlockN;
  const int num_kv_tiles = key_hi > key_lo ? (key_hi + kBlockN - 1) / kBlockN - t_begin : 0;
  const int32_t* pages = b.page_table + b.page_start[s];
  const int64_t slot_stride = int64_t(a.kv_heads) * D;  // elements between token slots

  // Loads: a thread keeps chunk column c and walks rows r0, r0 + kRowStep, ...
  constexpr int kRowStep = kThreads / kChunks;
  const int c = threadIdx.x % kChunks, r_first = threadIdx.x / kChunks;
  for (int r = r_first; r < BM; r += kRowStep) {
    const bool valid = r < rows;
    const int pr = row0 + (valid ? r : 0);
    const int tok = pr / group, g = pr % group;
    const bf16* src = a.q + int64_t(q0 + tok) * a.q_stride + int64_t(kvh * group + g) * D + c * 8;
    CpAsync16(sQ + TileOffset<D>(r, c), src, valid);
  }
  auto load_kv = [&](int kt, int buf) {
    for (int r = r_first; r < kBlockN; r += kRowStep) {
      const int tok = kt * kBlockN + r;
      const bool valid = tok < key_hi;  // past it: causally masked for every row; not read
      int64_t off = 0;
      if (valid) {
        const int page = pages[tok / b.page_size];
        off = (int64_t(page) * b.page_size + tok % b.page_size) * slot_stride + int64_t(kvh) * D + c * 8;
      }
      const uint32_t o = uint32_t(buf * kTileBytes) + TileOffset<D>(r, c);
      CpAsync16(sK + o, a.k_cache + off, valid);
      CpAsync16(sV + o, a.v_cache + off, valid);
    }
  };
  if (num_kv_tiles > 0) load_kv(t_begin, 0);
  CpAsyncCommit();

  // This thread's two rows: warp row g and g + 8 (packed rows past `rows` compute the last
  // valid row's mask and are never stored).
  const int g4 = lane / 4, t4 = lane % 4;
  int row_pos[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = min(warp * 16 + g4 + 8 * i, rows - 1);
    row_pos[i] = prefix + (row0 + r) / group;
  }
  const float score_scale = a.softcap > 0.0f ? a.logit_scale / a.softcap : a.logit_scale * kLog2e;
  const float cap_log2 = a.softcap * kLog2e;

  uint32_t qf[D / 16][4];
  float o_acc[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) o_acc[n][0] = o_acc[n][1] = o_acc[n][2] = o_acc[n][3] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};

  // ldmatrix lane roles: lane supplies a row address of matrix lane / 8.
  const int lm = lane / 8, lr = lane % 8;

  for (int it = 0; it < num_kv_tiles; ++it) {
    const int kt = t_begin + it, buf = it & 1;
    if (it + 1 < num_kv_tiles) load_kv(kt + 1, buf ^ 1);
    CpAsyncCommit();
    CpAsyncWait<1>();
    __syncthreads();
    if (it == 0) {
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks)  // matrices: (rows 0-7 | 8-15) x (chunk 2ks | 2ks+1)
        Ldsm4(sQ + TileOffset<D>(warp * 16 + lr + (lm & 1) * 8, 2 * ks + (lm >> 1)), qf[ks]);
    }
    const uint32_t k_tile = sK + uint32_t(buf * kTileBytes), v_tile = sV + uint32_t(buf * kTileBytes);

    // S = Q K^T: [16 rows][kBlockN keys] per warp.
    float sc[kBlockN / 8][4];
#pragma unroll
    for (int nt = 0; nt < kBlockN / 8; ++nt) {
      sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.0f;
#pragma unroll
      for (int kp = 0; kp < D / 32; ++kp) {  // matrices: keys 8nt..+7 x chunks 4kp..4kp+3
        uint32_t kf[4];
        Ldsm4(k_tile + TileOffset<D>(nt * 8 + lr, 4 * kp + lm), kf);
        Mma(sc[nt], qf[2 * kp], kf[0], kf[1]);
        Mma(sc[nt], qf[2 * kp + 1], kf[2], kf[3]);
      }
    }

    // Scale (+ softcap) into the log2 domain; mask only tiles crossing a row's bound.
    const int key0 = kt * kBlockN;
    const bool need_mask = key0 + kBlockN - 1 > pos_first ||
                           (a.sliding_window > 0 && key0 < pos_last - a.sliding_window + 1);
#pragma unroll
    for (int nt = 0; nt < kBlockN / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = sc[nt][e] * score_scale;
        if (a.softcap > 0.0f) x = cap_log2 * tanhf(x);
        if (need_mask) {
          const int key = key0 + nt * 8 + 2 * t4 + (e & 1), pos = row_pos[e >> 1];
          const bool ok = key <= pos && (a.sliding_window <= 0 || key > pos - a.sliding_window);
          if (!ok) x = -INFINITY;
        }
        sc[nt][e] = x;
      }

    // Online softmax over the tile, rows i = 0 (g) and 1 (g + 8); a row is spread over the
    // 4 lanes of a quad.
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float mx = m_run[i];
#pragma unroll
      for (int nt = 0; nt < kBlockN / 8; ++nt) mx = fmaxf(mx, fmaxf(sc[nt][2 * i], sc[nt][2 * i + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float base = mx == -INFINITY ? 0.0f : mx;  // a row with no key yet stays at 0
      const float corr = Exp2(m_run[i] - base);
      m_run[i] = mx;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < kBlockN / 8; ++nt) {
        sc[nt][2 * i] = Exp2(sc[nt][2 * i] - base);
        sc[nt][2 * i + 1] = Exp2(sc[nt][2 * i + 1] - base);
        sum += sc[nt][2 * i] + sc[nt][2 * i + 1];
      }
      l_run[i] = l_run[i] * corr + sum;  // per-lane partial; quad-reduced at the end
#pragma unroll
      for (int n = 0; n < D / 8; ++n) o_acc[n][2 * i] *= corr, o_acc[n][2 * i + 1] *= corr;
    }

    // O += P V: k-step j covers keys 16j..16j+15.
#pragma unroll
    for (int j = 0; j < kBlockN / 16; ++j) {
      const uint32_t pf[4] = {PackBf16(sc[2 * j][0], sc[2 * j][1]), PackBf16(sc[2 * j][2], sc[2 * j][3]),
                              PackBf16(sc[2 * j + 1][0], sc[2 * j + 1][1]),
                              PackBf16(sc[2 * j + 1][2], sc[2 * j + 1][3])};
#pragma unroll
      for (int np = 0; np < D / 16; ++np) {  // matrices: (keys +0-7 | +8-15) x (chunk 2np | 2np+1)
        uint32_t vf[4];
        Ldsm4T(v_tile + TileOffset<D>(16 * j + (lm & 1) * 8 + lr, 2 * np + (lm >> 1)), vf);
        Mma(o_acc[2 * np], pf, vf[0], vf[1]);
        Mma(o_acc[2 * np + 1], pf, vf[2], vf[3]);
      }
    }
    __syncthreads();  // the next iteration's loads overwrite this buffer
  }
  CpAsyncWait<0>();

  // Epilogue: rows i of this lane; columns n * 8 + 2 * t4 (+1).
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float l = l_run[i];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int r = warp * 16 + g4 + 8 * i;
    if (r >= rows) continue;
    const int pr = row0 + r, tok = pr / group;
    const int h = kvh * group + pr % group;
    if (a.num_splits == 1) {
      const float inv = l > 0.0f ? a.v_scale / l : 0.0f;
      bf16* dst = a.out + int64_t(q0 + tok) * a.out_stride + int64_t(h) * D + 2 * t4;
#pragma unroll
      for (int n = 0; n < D / 8; ++n)
        *reinterpret_cast<__nv_bfloat162*>(dst + n * 8) =
            __floats2bfloat162_rn(o_acc[n][2 * i] * inv, o_acc[n][2 * i + 1] * inv);
    } else {
      const int64_t base = (int64_t(q0 + tok) * a.heads + h) * a.num_splits + split;
      float* dst = a.partial_acc + base * D + 2 * t4;
#pragma unroll
      for (int n = 0; n < D / 8; ++n)
        *reinterpret_cast<float2*>(dst + n * 8) = make_float2(o_acc[n][2 * i], o_acc[n][2 * i + 1]);
      if (t4 == 0) a.partial_ml[2 * base] = m_run[i], a.partial_ml[2 * base + 1] = l;
    }
  }
}

// Merges the splits of one (row, head) of a handled sequence; threads over head_dim.
__global__ void PrefillCombineKernel(const PrefillAttentionArgs a) {
  const int t = blockIdx.x, h = blockIdx.y, D = a.head_dim;
  if (a.batch.q_len[a.batch.token_seq[t]] < a.min_q_len) return;  // a decode row
  const int64_t base = (int64_t(t) * a.heads + h) * a.num_splits;
  float mx = -INFINITY;
  for (int i = 0; i < a.num_splits; ++i) mx = fmaxf(mx, a.partial_ml[2 * (base + i)]);
  const float m_base = mx == -INFINITY ? 0.0f : mx;
  for (int e = threadIdx.x; e < D; e += blockDim.x) {
    float sum = 0.0f, val = 0.0f;
    for (int i = 0; i < a.num_splits; ++i) {
      const float c = Exp2(a.partial_ml[2 * (base + i)] - m_base);  // empty split: m = -inf -> 0
      sum += a.partial_ml[2 * (base + i) + 1] * c;
      val += a.partial_acc[(base + i) * D + e] * c;
    }
    a.out[int64_t(t) * a.out_stride + int64_t(h) * D + e] =
        __float2bfloat16_rn(sum > 0.0f ? val / sum * a.v_scale : 0.0f);
  }
}

template <int D, int kWarps>
void LaunchFor(const PrefillAttentionArgs& a, cudaStream_t stream) {
  constexpr int BM = 16 * kWarps;
  constexpr int kSmemBytes = (BM + 4 * kBlockN) * D * 2;
  // Opt in to > 48 KiB of dynamic shared memory once per specialisation (thread-safe static).
  static const cudaError_t attr = cudaFuncSetAttribute(
      PrefillKernel<D, kWarps>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
  (void)attr;  // a failure surfaces as the launch error the caller checks
  const dim3 grid(unsigned(a.num_tiles), unsigned(a.kv_heads), unsigned(a.num_splits));
  PrefillKernel<D, kWarps><<<grid, kWarps * 32, kSmemBytes, stream>>>(a);
}

// Blocks of the kernel resident per multiprocessor (occupancy).
int BlocksPerSm(int head_dim, int block_m) {
  auto query = [](auto kernel, int threads, int smem) {
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, size_t(smem)) != cudaSuccess) n = 1;
    return n > 0 ? n : 1;
  };
  // Cached per specialisation (thread-safe statics).
  if (head_dim == 64 && block_m == 128) {
    static const int n = query(PrefillKernel<64, 8>, 256, (128 + 4 * kBlockN) * 64 * 2);
    return n;
  }
  if (head_dim == 64) {
    static const int n = query(PrefillKernel<64, 4>, 128, (64 + 4 * kBlockN) * 64 * 2);
    return n;
  }
  if (block_m == 128) {
    static const int n = query(PrefillKernel<128, 8>, 256, (128 + 4 * kBlockN) * 128 * 2);
    return n;
  }
  static const int n = query(PrefillKernel<128, 4>, 128, (64 + 4 * kBlockN) * 128 * 2);
  return n;
}

}  // namespace

bool PrefillAttentionSupportsHeadDim(int d) { return d == 64 || d == 128; }

void PlanPrefillAttention(PrefillAttentionArgs& a, const int32_t* q_len, const int32_t* kv_len,
                          int num_seqs, int force_splits) {
  const int group = a.heads / a.kv_heads;
  int64_t tiles = 0, max_kv = 1;
  for (int s = 0; s < num_seqs; ++s) {
    if (q_len[s] < a.min_q_len || q_len[s] <= 0) continue;
    tiles += (int64_t(q_len[s]) * group + a.block_m - 1) / a.block_m;
    max_kv = std::max(max_kv, int64_t(kv_len[s]));
  }
  a.num_tiles = int(std::min<int64_t>(tiles, INT32_MAX));
  int64_t splits = 1;
  if (force_splits > 0) {
    splits = force_splits;
  } else if (tiles > 0) {
    int dev = 0, sms = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    const int64_t blocks = tiles * a.kv_heads;
    const int64_t slots = int64_t(std::max(sms, 1)) * BlocksPerSm(a.head_dim, a.block_m);
    if (blocks < 8 * slots) {
      double best = 1e30;
      const int64_t max_splits = std::min<int64_t>(std::max<int64_t>(max_kv / 256, 1), 32);
      for (int64_t sp = 1; sp <= max_splits; ++sp) {
        // Time ~ waves * keys per split; each split costs a little (partials, combine).
        const double cost =
            double((blocks * sp + slots - 1) / slots) / double(sp) * (1.0 + 0.01 * double(sp));
        if (cost < best) best = cost, splits = sp;
      }
    }
  }
  int64_t chunk = (max_kv + splits - 1) / splits;
  chunk = (chunk + kBlockN - 1) / kBlockN * kBlockN;  // whole key tiles
  a.chunk = int(chunk);
  a.num_splits = int((max_kv + chunk - 1) / chunk);
}

void LaunchPrefillAttention(const PrefillAttentionArgs& a, cudaStream_t stream) {
  if (a.num_tiles == 0 || a.batch.num_tokens == 0) return;
  const bool wide = a.block_m == 128;
  switch (a.head_dim) {
    case 64: wide ? LaunchFor<64, 8>(a, stream) : LaunchFor<64, 4>(a, stream); break;
    case 128: wide ? LaunchFor<128, 8>(a, stream) : LaunchFor<128, 4>(a, stream); break;
    default: return;  // the launcher checked PrefillAttentionSupportsHeadDim
  }
  if (a.num_splits > 1)
    PrefillCombineKernel<<<dim3(unsigned(a.batch.num_tokens), unsigned(a.heads)), 128, 0, stream>>>(a);
}

}  // namespace pg::cuda
