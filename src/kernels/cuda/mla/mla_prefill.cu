// Expanded MLA attention (prefill), FlashAttention-2 style on tensor cores.
//
// A block (4 warps) owns kRows = 64 query positions of one (sequence, head); warp w owns rows
// w*16 .. +16 and keeps its Q fragments, its scores and its output accumulator in registers.
// Key tiles of kKeys = 64 history positions are double-buffered in shared memory:
//   K tile [64, NOPE + ROPE] = [kv[t, h, 0:NOPE], rope[t, :]] (the rope key is shared by heads)
//   V tile [64, V]           = kv[t, h, NOPE:NOPE + V]
// S = Q K^T (16 x 64 per warp), online softmax in registers (log2 domain), O += P V with P
// taken straight from the score fragments. Causal: row i (position kv_len - q_len + i) sees
// keys [0, kv_len - q_len + i].
#include <cuda_bf16.h>

#include <cmath>

#include "kernels/cuda/mla/mla_params.h"
#include "kernels/cuda/mla/mma_util.cuh"

namespace pg::cuda {
namespace {

using namespace mla;

constexpr int kRows = 64;
constexpr int kKeys = 64;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr float kNoMax = -1e30f;

template <int NOPE, int ROPE, int V>
struct PrefillShape {
  static constexpr int D = NOPE + ROPE;  // q/k head dim
  static constexpr int KLd = D + 8;      // smem row strides (bf16), 16-byte rows, odd # chunks
  static constexpr int VLd = V + 8;
  static_assert(NOPE % 8 == 0 && ROPE % 8 == 0 && V % 16 == 0 && D % 16 == 0, "tile shapes");
  struct Smem {
    bf16 q[kRows][KLd];
    bf16 k[2][kKeys][KLd];
    bf16 v[2][kKeys][VLd];
  };
};

template <int NOPE, int ROPE, int V>
__global__ void __launch_bounds__(kThreads) MlaPrefillKernel(const MlaPrefillArgs a) {
  using Sh = PrefillShape<NOPE, ROPE, V>;
  constexpr int D = Sh::D, KLd = Sh::KLd;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  typename Sh::Smem& sm = *reinterpret_cast<typename Sh::Smem*>(smem_raw);

  const DeviceBatchView& b = a.batch;
  const int s = blockIdx.z, h = blockIdx.y;
  const int q_len = b.q_len[s], kv_len = b.kv_len[s];
  const int i0 = blockIdx.x * kRows;
  if (i0 >= q_len) return;
  const int first_pos = kv_len - q_len;  // position of query row 0
  const int key_end = first_pos + min(i0 + kRows, q_len);  // keys [0, key_end)
  const int num_tiles = (key_end + kKeys - 1) / kKeys;
  const int64_t hist = a.hist_start[s];
  const int q_start = b.q_start[s];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t4 = lane % 4;

  auto load_tile = [&](int tile, int buf) {
    const int t0 = tile * kKeys;
    constexpr int kKvChunks = (NOPE + V) / 8, kRopeChunks = ROPE / 8;
    constexpr int kPerRow = kKvChunks + kRopeChunks;
    for (int c = tid; c < kKeys * kPerRow; c += kThreads) {
      const int j = c / kPerRow, cc = c % kPerRow;
      const int t = t0 + j;
      const bool ok = t < key_end;
      const int64_t hrow = hist + (ok ? t : 0);
      if (cc < kKvChunks) {
        const bf16* src = a.kv + (hrow * a.heads + h) * (NOPE + V) + cc * 8;
        bf16* dst = cc * 8 < NOPE ? &sm.k[buf][j][cc * 8] : &sm.v[buf][j][cc * 8 - NOPE];
        CpAsync16(dst, src, ok);
      } else {
        const int rc = cc - kKvChunks;
        CpAsync16(&sm.k[buf][j][NOPE + rc * 8], a.rope + hrow * a.rope_stride + rc * 8, ok);
      }
    }
  };

  // Q rows (zero past q_len) and the first tile.
  for (int c = tid; c < kRows * (D / 8); c += kThreads) {
    const int r = c / (D / 8), cc = c % (D / 8);
    const bool ok = i0 + r < q_len;
    const bf16* src = a.q + (ok ? int64_t(q_start + i0 + r) * a.q_stride + h * D + cc * 8 : 0);
    CpAsync16(&sm.q[r][cc * 8], src, ok);
  }
  load_tile(0, 0);
  CpAsyncCommit();
  CpAsyncWaitAll();
  __syncthreads();

  uint32_t qf[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
    Ldmatrix4(qf[kk], &sm.q[warp * 16 + (lane % 8) + ((lane / 8) % 2) * 8][kk * 16 + (lane / 16) * 8]);

  const int pos0 = first_pos + i0 + warp * 16 + g;  // positions of rows g and g + 8
  const int pos1 = pos0 + 8;
  float m0 = kNoMax, m1 = kNoMax, l0 = 0.0f, l1 = 0.0f;
  float o[V / 8][4];
#pragma unroll
  for (int n = 0; n < V / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

  for (int it = 0; it < num_tiles; ++it) {
    const int buf = it & 1;
    if (it + 1 < num_tiles) load_tile(it + 1, buf ^ 1);
    CpAsyncCommit();
    const int t0 = it * kKeys;

    float sc[kKeys / 8][4];
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
    // k-steps outer, key tiles inner: consecutive mma feed independent accumulators.
    const bf16* kb = &sm.k[buf][lane % 8][(lane / 8) * 8];
#pragma unroll
    for (int kk = 0; kk < D / 16; kk += 2) {
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n) {
        uint32_t bb[4];
        Ldmatrix4(bb, kb + n * 8 * KLd + kk * 16);  // k-steps kk and kk + 1 of key tile n
        Mma(sc[n], qf[kk], bb[0], bb[1]);
        Mma(sc[n], qf[kk + 1], bb[2], bb[3]);
      }
    }
    // Scale, mask, running max.
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int t = t0 + n * 8 + 2 * t4 + (e & 1);
        const int pos = e < 2 ? pos0 : pos1;
        const float v = (t <= pos && t < key_end) ? sc[n][e] * a.logit_scale_log2 : -INFINITY;
        sc[n][e] = v;
        if (e < 2) mx0 = fmaxf(mx0, v);
        else mx1 = fmaxf(mx1, v);
      }
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
    }
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    const float al0 = exp2f(m0 - mn0), al1 = exp2f(m1 - mn1);
    m0 = mn0, m1 = mn1;
    float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n) {
      sc[n][0] = exp2f(sc[n][0] - mn0), sc[n][1] = exp2f(sc[n][1] - mn0);
      sc[n][2] = exp2f(sc[n][2] - mn1), sc[n][3] = exp2f(sc[n][3] - mn1);
      sum0 += sc[n][0] + sc[n][1];
      sum1 += sc[n][2] + sc[n][3];
    }
    l0 = l0 * al0 + sum0;  // lane-partial sums; reduced across the quad at the end
    l1 = l1 * al1 + sum1;
#pragma unroll
    for (int n = 0; n < V / 8; ++n) {
      o[n][0] *= al0, o[n][1] *= al0;
      o[n][2] *= al1, o[n][3] *= al1;
    }
    // O += P V: P's A fragments come from the score fragments of key tiles 2kk, 2kk + 1.
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      const uint32_t pa[4] = {PackBf16(sc[2 * kk][0], sc[2 * kk][1]),
                              PackBf16(sc[2 * kk][2], sc[2 * kk][3]),
                              PackBf16(sc[2 * kk + 1][0], sc[2 * kk + 1][1]),
                              PackBf16(sc[2 * kk + 1][2], sc[2 * kk + 1][3])};
      const bf16* vb = &sm.v[buf][kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8][(lane / 16) * 8];
#pragma unroll
      for (int n = 0; n < V / 8; n += 2) {
        uint32_t bb[4];
        Ldmatrix4Trans(bb, vb + n * 8);
        Mma(o[n], pa, bb[0], bb[1]);
        Mma(o[n + 1], pa, bb[2], bb[3]);
      }
    }
    CpAsyncWaitAll();
    __syncthreads();
  }

#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, off);
    l1 += __shfl_xor_sync(0xffffffffu, l1, off);
  }
  const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
  const int row0 = i0 + warp * 16 + g, row1 = row0 + 8;
#pragma unroll
  for (int n = 0; n < V / 8; ++n) {
    const int col = h * V + n * 8 + 2 * t4;
    if (row0 < q_len)
      *reinterpret_cast<__nv_bfloat162*>(a.out + int64_t(q_start + row0) * a.out_stride + col) =
          __floats2bfloat162_rn(o[n][0] * inv0, o[n][1] * inv0);
    if (row1 < q_len)
      *reinterpret_cast<__nv_bfloat162*>(a.out + int64_t(q_start + row1) * a.out_stride + col) =
          __floats2bfloat162_rn(o[n][2] * inv1, o[n][3] * inv1);
  }
}

template <int NOPE, int ROPE, int V>
void Launch(const MlaPrefillArgs& a, cudaStream_t stream) {
  const size_t smem = sizeof(typename PrefillShape<NOPE, ROPE, V>::Smem);
  static bool configured = false;
  if (!configured) {
    cudaFuncSetAttribute(MlaPrefillKernel<NOPE, ROPE, V>,
                         cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    configured = true;
  }
  const dim3 grid((a.max_q_len + kRows - 1) / kRows, a.heads, a.batch.num_seqs);
  MlaPrefillKernel<NOPE, ROPE, V><<<grid, kThreads, smem, stream>>>(a);
}

}  // namespace

bool MlaPrefillSupports(int nope, int rope, int v) {
  return (nope == 128 && rope == 64 && v == 128) || (nope == 64 && rope == 64 && v == 64);
}

void LaunchMlaPrefill(const MlaPrefillArgs& a, int nope, int rope, int v, cudaStream_t stream) {
  if (a.batch.num_seqs == 0 || a.max_q_len == 0) return;
  if (nope == 128 && rope == 64 && v == 128) Launch<128, 64, 128>(a, stream);
  else Launch<64, 64, 64>(a, stream);
}

}  // namespace pg::cuda
