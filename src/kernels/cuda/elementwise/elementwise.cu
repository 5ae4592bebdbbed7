// Row-wise and elementwise CUDA kernels: Add, SwiGLU, Embedding, fused residual-add + RMSNorm,
// RoPE, bias add. bf16 in and out, f32 arithmetic. Launch errors are reported by the host
// launchers' caller (cuda_register.cpp checks cudaGetLastError after each launch).
// PDL (common/pdl.cuh): Add, SwiGLU, Embedding, RMSNorm and BiasAdd are launched with
// LaunchPdl; each triggers its dependents, then waits for its upstream kernel before it
// touches memory (these kernels have no weight stream worth starting early).
#include <cuda_bf16.h>

#include <cmath>

#include "kernels/cuda/common/device_params.h"
#include "kernels/cuda/common/pdl.cuh"
#include "kernels/cuda/common/rope_device.cuh"
#include "kernels/cuda/elementwise/row_device.cuh"

namespace pg::cuda {
namespace {

constexpr int kBlock = 256;

int Blocks(int64_t n, int per_block, int cap = 65535 * 8) {
  int64_t b = (n + per_block - 1) / per_block;
  return int(b < 1 ? 1 : (b > cap ? cap : b));
}

// ---- Add: 8 elements (16 bytes) per thread where aligned, scalar tail --------------------
__global__ void AddKernel(AddArgs a) {
  PdlTrigger();
  PdlWait();
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t nthreads = int64_t(gridDim.x) * blockDim.x;
  const bool vec = ((reinterpret_cast<uintptr_t>(a.a) | reinterpret_cast<uintptr_t>(a.b) |
                     reinterpret_cast<uintptr_t>(a.out)) & 15) == 0;
  int64_t done = 0;
  if (vec) {
    const int64_t nv = a.n / 8;
    for (int64_t i = tid; i < nv; i += nthreads) {
      uint4 va = reinterpret_cast<const uint4*>(a.a)[i];
      uint4 vb = reinterpret_cast<const uint4*>(a.b)[i];
      const __nv_bfloat162* pa = reinterpret_cast<const __nv_bfloat162*>(&va);
      const __nv_bfloat162* pb = reinterpret_cast<const __nv_bfloat162*>(&vb);
      uint4 vo;
      __nv_bfloat162* po = reinterpret_cast<__nv_bfloat162*>(&vo);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        float2 fa = __bfloat1622float2(pa[j]), fb = __bfloat1622float2(pb[j]);
        po[j] = __floats2bfloat162_rn(fa.x + fb.x, fa.y + fb.y);
      }
      reinterpret_cast<uint4*>(a.out)[i] = vo;
    }
    done = nv * 8;
  }
  for (int64_t i = done + tid; i < a.n; i += nthreads) a.out[i] = ToB(ToF(a.a[i]) + ToF(a.b[i]));
}

// ---- SwiGLU ------------------------------------------------------------------------------
__global__ void SwiGluKernel(SwiGluArgs a) {
  PdlTrigger();
  PdlWait();
  const int64_t r = blockIdx.y;
  const bf16* g = a.gate + r * a.gate_stride;
  const bf16* u = a.up + r * a.up_stride;
  bf16* o = a.out + r * a.out_stride;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < a.inter;
       i += int64_t(gridDim.x) * blockDim.x) {
    o[i] = SiluMul(ToF(g[i]), ToF(u[i]));
  }
}

// ---- Embedding ---------------------------------------------------------------------------
__global__ void EmbeddingKernel(EmbeddingArgs a) {
  PG_BLOCK_TRACE(kTraceEmbedding);
  PdlTrigger();
  PdlWait();  // ids come from upstream (device sampling)
  const int64_t t = blockIdx.x;
  const int32_t id = a.ids[t];
  bf16* o = a.out + t * a.out_stride;
  if (id < 0 || id >= a.vocab) {
    if (threadIdx.x == 0) atomicExch(a.error_flag, 1);
    for (int64_t i = threadIdx.x; i < a.hidden; i += blockDim.x) o[i] = ToB(0.0f);
    return;
  }
  const bf16* src = a.table + int64_t(id) * a.table_stride;
  // 16-byte vectors where the rows allow, each thread's loads issued before its stores: one
  // round trip to the table's (cold) row, where the element loop's stores kept every next load
  // behind them (src and o may alias for all the compiler knows): 16 dependent HBM round trips
  // at hidden 4096, 9.1 us of the first kernel of each step (H200 block trace, Llama-3.1-8B).
  constexpr int kVecs = 4;  // 16-byte vectors a thread an iteration
  const uintptr_t rows = reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(o);
  if (a.hidden % 8 == 0 && (rows & 15) == 0) {
    const uint4* s4 = reinterpret_cast<const uint4*>(src);
    uint4* o4 = reinterpret_cast<uint4*>(o);
    const int64_t n4 = a.hidden / 8, step = int64_t(kVecs) * blockDim.x;
    for (int64_t base = threadIdx.x; base < n4; base += step) {
      uint4 v[kVecs];
#pragma unroll
      for (int j = 0; j < kVecs; ++j)
        if (base + j * blockDim.x < n4) v[j] = __ldg(s4 + base + j * blockDim.x);
#pragma unroll
      for (int j = 0; j < kVecs; ++j)
        if (base + j * blockDim.x < n4) o4[base + j * blockDim.x] = v[j];
    }
    return;
  }
  for (int64_t i = threadIdx.x; i < a.hidden; i += blockDim.x) o[i] = src[i];
}

// ---- RMSNorm (optionally fused with the residual add) --------------------------------------
__device__ float BlockSum(float v) {
  __shared__ float warp_sums[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  const int nwarps = (blockDim.x + 31) / 32;
  v = lane < nwarps ? warp_sums[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;  // every thread holds the block's sum
}

// One block per row. With a residual, the stored (bf16-rounded) residual is what is
// normalised, as a bf16 model's next layer would see it.
__global__ void RmsNormKernel(RmsNormArgs a) {
  PG_BLOCK_TRACE(kTraceRmsNorm);
  PdlTrigger();
  PdlWait();
  const int64_t r = blockIdx.x;
  const bf16* x = a.x + r * a.x_stride;
  bf16* res = a.residual ? a.residual + r * a.residual_stride : nullptr;
  bf16* out = a.out + r * a.out_stride;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < a.hidden; i += blockDim.x) {
    float v = ToF(x[i]);
    if (res) {
      bf16 nv = ToB(ToF(res[i]) + v);
      res[i] = nv;
      v = ToF(nv);
    }
    ss += v * v;
  }
  const float inv = InvRms(BlockSum(ss), a.hidden, a.eps);
  // Each thread re-reads only the elements it wrote above (same i), so no barrier is needed
  // between the residual update and this pass; out may alias x (same-index read then write).
  for (int64_t i = threadIdx.x; i < a.hidden; i += blockDim.x) {
    const float v = res ? ToF(res[i]) : ToF(x[i]);
    out[i] = NormElement(v, inv, LoadNormWeight(a.weight, a.weight_type, i));
  }
}

// ---- RoPE --------------------------------------------------------------------------------
// One block per token; threads over (head, pair). Angle = float(inv_freq[i] * pos) as HF.
__global__ void RopeKernel(const __grid_constant__ RopeArgs a) {
  const int64_t t = blockIdx.x;
  const float pos = float(a.positions[t]);
  const int half = a.rotary_dim / 2;
  bf16* row = a.x + t * a.x_stride;
  for (int idx = threadIdx.x; idx < a.heads * half; idx += blockDim.x) {
    const int h = idx / half, i = idx % half;
    bf16* xh = row + int64_t(h) * a.head_dim;
    int i0, i1;
    RopePairIndex(a.neox, i, half, i0, i1);
    float x0 = ToF(xh[i0]), x1 = ToF(xh[i1]);
    RopeRotate(x0, x1, a.inv_freq[i], pos);
    xh[i0] = ToB(x0);
    xh[i1] = ToB(x1);
  }
}

__global__ void BiasAddKernel(BiasAddArgs a) {
  PdlTrigger();
  PdlWait();
  const int64_t r = blockIdx.y;
  bf16* o = a.out + r * a.out_stride;
  for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < a.cols;
       j += int64_t(gridDim.x) * blockDim.x)
    o[j] = ToB(ToF(o[j]) + a.bias[j]);
}

}  // namespace

void LaunchAdd(const AddArgs& a, cudaStream_t stream) {
  if (a.n == 0) return;
  LaunchPdl(AddKernel, dim3(Blocks(a.n / 8 + 1, kBlock, 132 * 16)), dim3(kBlock), 0, stream, a);
}

void LaunchSwiGlu(const SwiGluArgs& a, cudaStream_t stream) {
  if (a.rows == 0 || a.inter == 0) return;
  dim3 grid(Blocks(a.inter, kBlock, 1024), unsigned(a.rows));
  LaunchPdl(SwiGluKernel, grid, dim3(kBlock), 0, stream, a);
}

void LaunchEmbedding(const EmbeddingArgs& a, cudaStream_t stream) {
  if (a.num_tokens == 0) return;
  LaunchPdl(EmbeddingKernel, dim3(unsigned(a.num_tokens)), dim3(kBlock), 0, stream, a);
}

void LaunchRmsNorm(const RmsNormArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return;
  const int threads = a.hidden >= 1024 ? 1024 : (a.hidden >= 256 ? 256 : 64);
  LaunchPdl(RmsNormKernel, dim3(unsigned(a.rows)), dim3(threads), 0, stream, a);
}

void LaunchRope(const RopeArgs& a, cudaStream_t stream) {
  if (a.tokens == 0) return;
  RopeKernel<<<unsigned(a.tokens), 128, 0, stream>>>(a);
}

void LaunchBiasAdd(const BiasAddArgs& a, cudaStream_t stream) {
  if (a.rows == 0 || a.cols == 0) return;
  dim3 grid(Blocks(a.cols, kBlock, 1024), unsigned(a.rows));
  LaunchPdl(BiasAddKernel, grid, dim3(kBlock), 0, stream, a);
}

}  // namespace pg::cuda
