// Tensor-core decode attention (bf16 KV, head_dim 64 / 128, GQA group <= 16): the default
// decode kernel for those shapes (decode_attention.cu dispatches; its CUDA-core kernel does
// the rest). Same work split and outputs as that kernel: a block owns (sequence, kv head,
// split), its 4 warps take 16-key tiles round robin through a 3-stage cp.async ring each.
//
// mma.sync m16n8k16 (bf16 in, f32 accumulate; fragment layouts in mla/mma_util.cuh), with the
// kv head's query heads as the 16 A rows (rows >= group are zero):
//   S[16 x 16 keys] = Q · K^T: K rows are B operands read straight from a thread-private
//     smem copy: lane (g, t) = (lane / 4, lane % 4) holds key g of each 8-key half, 16-byte
//     vectors v at dims v * 32 + t * 8 (coalesced 64-byte runs per key); a k-chunk c of 16 is
//     the dims {v * 32 + t' * 8 + (c % 2) * 4 + 0..3 : t'} with v = c / 2. The dot product
//     is invariant under this permutation when Q's A fragments use the same one.
//   O[16 x D] += P · V: P from S's accumulators (the C layout of two 8-key tiles is the A
//     layout), V through ldmatrix.trans from a [16 keys][D] tile swizzled by 16-byte chunk
//     (chunk ^ key % 8: conflict-free).
// Online softmax in fp32, log2 units, per row; the scale multiplies S in fp32 (q stays bf16).
#include <cuda_bf16.h>

#include "kernels/cuda/attention/decode_common.cuh"
#include "kernels/cuda/mla/mma_util.cuh"

namespace pg::cuda::decode {
namespace {

constexpr int kStages = 3;
constexpr int kTK = 16;  // keys per warp tile

template <int D>
struct MmaGeo {
  static constexpr int kNvt = D / 32;           // K vectors per lane per key
  static constexpr int kKc = D / 16;            // QK k-chunks
  static constexpr int kNb = D / 8;             // PV n-blocks (also V chunks per key row)
  static constexpr int kKU4 = 2 * kNvt * 32;    // K uint4 per stage (thread-private)
  static constexpr int kVU4 = kTK * D / 8;      // V uint4 per stage ([key][chunk], swizzled)
  static constexpr int kStageU4 = kKU4 + kVU4;
  static constexpr int kSmemBytes = kWarps * kStages * kStageU4 * 16;
  static_assert(D % 64 == 0, "head_dim 64 or 128");
  static_assert(kWarps * 16 * (D + 2) * 4 <= kSmemBytes, "merge does not fit the ring");
};

__device__ __forceinline__ uint32_t Word(const uint4& u, int i) {
  return i == 0 ? u.x : (i == 1 ? u.y : (i == 2 ? u.z : u.w));
}

template <int D>
__global__ void __launch_bounds__(kThreads) DecodeMmaKernel(const __grid_constant__ AttentionArgs a) {
  using M = MmaGeo<D>;
  extern __shared__ uint4 smem[];
  const DeviceBatchView& b = a.batch;
  const int s = blockIdx.x;
  if (b.q_len[s] != 1) return;  // a multi-token sequence: another kernel's (block-uniform)
  const int group = a.heads / a.kv_heads;
  const int kvh = blockIdx.y, split = blockIdx.z, num_splits = gridDim.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int row = b.q_start[s];
  const int h0 = kvh * group;
  const SplitRange r = SplitOf(a, s, split, num_splits);
  const int32_t* pages = b.page_table + b.page_start[s];
  const int ps = b.page_size;

  // Q as A fragments: rows g and g + 8 = heads h0 + g, h0 + g + 8 (zero past the group).
  uint32_t qa[M::kKc][4];
  {
    const bf16* q = a.q + int64_t(row) * a.q_stride + int64_t(h0) * D + t * 8;
#pragma unroll
    for (int v = 0; v < M::kNvt; ++v) {
      const uint4 z = make_uint4(0, 0, 0, 0);
      const uint4 lo = g < group ? *reinterpret_cast<const uint4*>(q + g * D + v * 32) : z;
      const uint4 hi = g + 8 < group ? *reinterpret_cast<const uint4*>(q + (g + 8) * D + v * 32) : z;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int c = 2 * v + half, w = 2 * half;
        qa[c][0] = Word(lo, w), qa[c][1] = Word(hi, w);
        qa[c][2] = Word(lo, w + 1), qa[c][3] = Word(hi, w + 1);
      }
    }
  }
  const float qscale = a.logit_scale * (a.softcap > 0.0f ? 1.0f : kLog2e);

  float o[M::kNb][4];
#pragma unroll
  for (int nb = 0; nb < M::kNb; ++nb) o[nb][0] = o[nb][1] = o[nb][2] = o[nb][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;  // rows g and g + 8

  const int keys = max(0, r.end - r.begin);
  const int tiles = (keys + kTK - 1) / kTK;
  const int my_tiles = warp < tiles ? (tiles - warp + kWarps - 1) / kWarps : 0;
  uint4* ring = smem + warp * (kStages * M::kStageU4);
  const char* kc = static_cast<const char*>(a.k_cache);
  const char* vc = static_cast<const char*>(a.v_cache);
  const int64_t row_bytes = int64_t(D) * 2;
  const int64_t slot_bytes = int64_t(a.kv_heads) * row_bytes;
  auto slot = [&](int key) {
    return (int64_t(pages[key / ps]) * ps + key % ps) * slot_bytes + int64_t(kvh) * row_bytes;
  };

  auto issue = [&](int i) {
    uint4* st = ring + (i % kStages) * M::kStageU4;
    const int key0 = r.begin + (warp + i * kWarps) * kTK;
#pragma unroll
    for (int bb = 0; bb < 2; ++bb) {  // K: key g of each 8-key half, this lane's vectors
      const int64_t off = slot(min(key0 + bb * 8 + g, r.end - 1)) + t * 16;  // clamped: masked
#pragma unroll
      for (int v = 0; v < M::kNvt; ++v) CpAsync16(st + (bb * M::kNvt + v) * 32 + lane, kc + off + v * 64, 16);
    }
    uint4* sv = st + M::kKU4;  // V: key lane / 2, chunks 2 i2 + lane % 2
    const int vk = lane / 2;
    const int64_t off = slot(min(key0 + vk, r.end - 1));
#pragma unroll
    for (int i2 = 0; i2 < M::kNb / 2; ++i2) {
      const int chunk = 2 * i2 + lane % 2;
      CpAsync16(sv + vk * M::kNb + (chunk ^ (vk % 8)), vc + off + chunk * 16, 16);
    }
  };

#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < my_tiles) issue(i);
    CpAsyncCommit();
  }
  for (int i = 0; i < my_tiles; ++i) {
    __syncwarp();  // every lane is done reading the stage the next issue overwrites
    if (i + kStages - 1 < my_tiles) issue(i + kStages - 1);
    CpAsyncCommit();
    CpAsyncWait<kStages - 1>();
    __syncwarp();  // the V tile (copied by other lanes) is visible
    const uint4* st = ring + (i % kStages) * M::kStageU4;
    const int key0 = r.begin + (warp + i * kWarps) * kTK;

    float sc[2][4];
#pragma unroll
    for (int bb = 0; bb < 2; ++bb) {
      sc[bb][0] = sc[bb][1] = sc[bb][2] = sc[bb][3] = 0.0f;
#pragma unroll
      for (int v = 0; v < M::kNvt; ++v) {
        const uint4 kv = st[(bb * M::kNvt + v) * 32 + lane];
        mla::Mma(sc[bb], qa[2 * v], kv.x, kv.y);
        mla::Mma(sc[bb], qa[2 * v + 1], kv.z, kv.w);
      }
    }
    // Scores in log2 units; keys past the split's end masked.
#pragma unroll
    for (int bb = 0; bb < 2; ++bb)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = sc[bb][e] * qscale;
        if (a.softcap > 0.0f) x = a.softcap * tanhf(x / a.softcap) * kLog2e;
        sc[bb][e] = key0 + bb * 8 + 2 * t + (e & 1) < r.end ? x : -INFINITY;
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
      for (int nb = 0; nb < M::kNb; ++nb) o[nb][0] *= c, o[nb][1] *= c;
      m0 = mx0;
    }
    if (mx1 > m1) {
      const float c = Exp2Or0(m1, mx1);
      l1 *= c;
#pragma unroll
      for (int nb = 0; nb < M::kNb; ++nb) o[nb][2] *= c, o[nb][3] *= c;
      m1 = mx1;
    }
#pragma unroll
    for (int bb = 0; bb < 2; ++bb) {
      sc[bb][0] = Exp2Or0(sc[bb][0], m0), sc[bb][1] = Exp2Or0(sc[bb][1], m0);
      sc[bb][2] = Exp2Or0(sc[bb][2], m1), sc[bb][3] = Exp2Or0(sc[bb][3], m1);
      l0 += sc[bb][0] + sc[bb][1];
      l1 += sc[bb][2] + sc[bb][3];
    }
    const uint32_t pa[4] = {mla::PackBf16(sc[0][0], sc[0][1]), mla::PackBf16(sc[0][2], sc[0][3]),
                            mla::PackBf16(sc[1][0], sc[1][1]), mla::PackBf16(sc[1][2], sc[1][3])};
    const uint4* sv = st + M::kKU4;
    const int lk = lane % 8 + ((lane / 8) % 2) * 8;  // ldmatrix row (key) this lane addresses
#pragma unroll
    for (int np = 0; np < M::kNb / 2; ++np) {
      const int chunk = 2 * np + lane / 16;
      uint32_t vb[4];
      mla::Ldmatrix4Trans(vb, sv + lk * M::kNb + (chunk ^ (lk % 8)));
      mla::Mma(o[2 * np], pa, vb[0], vb[1]);
      mla::Mma(o[2 * np + 1], pa, vb[2], vb[3]);
    }
  }
  CpAsyncWait<0>();

  // Row sums over the quad; then the warps merge through shared memory (the ring is free).
#pragma unroll
  for (int off = 1; off <= 2; off <<= 1) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, off);
    l1 += __shfl_xor_sync(0xffffffffu, l1, off);
  }
  __syncthreads();
  float* sm_acc = reinterpret_cast<float*>(smem);  // [kWarps][16][D]
  float* sm_m = sm_acc + kWarps * 16 * D;          // [kWarps][16]
  float* sm_l = sm_m + kWarps * 16;
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int rr = g + 8 * hr;
    if (rr >= group) continue;
    if (t == 0) sm_m[warp * 16 + rr] = hr ? m1 : m0, sm_l[warp * 16 + rr] = hr ? l1 : l0;
    float* dst = sm_acc + (warp * 16 + rr) * D + 2 * t;
#pragma unroll
    for (int nb = 0; nb < M::kNb; ++nb) dst[nb * 8] = o[nb][2 * hr], dst[nb * 8 + 1] = o[nb][2 * hr + 1];
  }
  __syncthreads();
  MergeWarpsAndStore(a, sm_acc, sm_m, sm_l, 16, min(group, 16), D, row, h0, split, num_splits);
}

template <int D>
int Occupancy() {
  static const int blocks = [] {
    const void* k = reinterpret_cast<const void*>(&DecodeMmaKernel<D>);
    cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, MmaGeo<D>::kSmemBytes);
    int n = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, kThreads, MmaGeo<D>::kSmemBytes);
    return n > 0 ? n : 1;
  }();
  return blocks;
}

template <int D>
void Launch(const AttentionArgs& a, dim3 grid, cudaStream_t stream) {
  (void)Occupancy<D>();  // sets the shared-memory attribute
  DecodeMmaKernel<D><<<grid, kThreads, MmaGeo<D>::kSmemBytes, stream>>>(a);
}

}  // namespace

bool MmaSupports(int head_dim, int group, KvType kv_type) {
  return kv_type == KvType::kBF16 && (head_dim == 64 || head_dim == 128) && group >= 1 &&
         group <= 16;
}

int MmaOccupancy(int head_dim) { return head_dim == 64 ? Occupancy<64>() : Occupancy<128>(); }

void LaunchMma(const AttentionArgs& a, dim3 grid, cudaStream_t stream) {
  if (a.head_dim == 64) Launch<64>(a, grid, stream);
  else Launch<128>(a, grid, stream);
}

}  // namespace pg::cuda::decode
