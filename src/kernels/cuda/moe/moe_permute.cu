// Expert-sorted MoE path, the parts around the grouped GEMM (moe_params.h):
//   permute: counts -> offsets -> positions -> tile table, in ONE block (no host sync; the
//            grid of the GEMMs that follow is bounded on the host, surplus blocks exit);
//   combine: weighted un-permute, routes of a token summed in order j = 0..top_k-1.
// A route's position inside its expert's range depends on atomic order, but no value does:
// each GEMM row is computed independently of the rows beside it.
#include "kernels/cuda/common/pdl.cuh"
#include "kernels/cuda/moe/moe_params.h"

namespace pg::cuda {
namespace {

constexpr int kPermuteThreads = 1024;  // >= kRouterMaxExperts: one expert per thread in scans

// Exclusive block scan of one value per thread (blockDim.x == kPermuteThreads). Returns the
// exclusive prefix; *total gets the sum. `warp_sums`: 32 ints of shared memory.
__device__ int BlockExclusiveScan(int v, int* warp_sums, int* total) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int n = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += n;
  }
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    int w = warp_sums[lane];
    int wi = w;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int n = __shfl_up_sync(0xffffffffu, wi, o);
      if (lane >= o) wi += n;
    }
    warp_sums[lane] = wi - w;  // exclusive prefix of warp totals
    if (lane == 31) warp_sums[32] = wi;
  }
  __syncthreads();
  const int excl = warp_sums[warp] + incl - v;
  *total = warp_sums[32];
  __syncthreads();
  return excl;
}

__global__ void __launch_bounds__(kPermuteThreads) PermuteKernel(MoePermuteArgs a) {
  __shared__ int counts[kPermuteThreads], fill[kPermuteThreads], scan_tmp[33];
  PdlWait();  // PDL (pdl.cuh): ids come from the router
  PdlTrigger();
  const int tid = threadIdx.x;
  counts[tid] = 0;
  __syncthreads();
  for (int64_t r = tid; r < a.num_routes; r += kPermuteThreads) {
    const int e = a.ids[r];
    if (e >= 0 && e < a.num_experts) atomicAdd(&counts[e], 1);
  }
  __syncthreads();
  const int cnt = tid < a.num_experts ? counts[tid] : 0;
  int routes = 0, tiles_total = 0;
  const int off = BlockExclusiveScan(cnt, scan_tmp, &routes);
  const int ntiles = (cnt + a.tile_rows - 1) / a.tile_rows;
  const int tile_off = BlockExclusiveScan(ntiles, scan_tmp, &tiles_total);
  fill[tid] = off;
  if (tid < a.num_experts) a.offsets[tid] = off;
  if (tid == 0) {
    a.offsets[a.num_experts] = routes;
    *a.num_tiles = tiles_total < a.max_tiles ? tiles_total : a.max_tiles;  // bound holds; guard
  }
  for (int i = 0; i < ntiles && tile_off + i < a.max_tiles; ++i) {
    int32_t* t = a.tiles + 3 * int64_t(tile_off + i);
    t[0] = tid;
    t[1] = off + i * a.tile_rows;
    t[2] = min(a.tile_rows, cnt - i * a.tile_rows);
  }
  __syncthreads();
  for (int64_t r = tid; r < a.num_routes; r += kPermuteThreads) {
    const int e = a.ids[r];
    int pos = -1;
    if (e >= 0 && e < a.num_experts) {
      pos = atomicAdd(&fill[e], 1);
      a.sorted_route[pos] = int32_t(r);
    }
    a.route_pos[r] = pos;
  }
}

constexpr int kCombineThreads = 256;

__global__ void __launch_bounds__(kCombineThreads) CombineKernel(MoeCombineArgs a) {
  PdlWait();  // PDL (pdl.cuh): y and the routes come from upstream kernels
  PdlTrigger();
  const int c = blockIdx.x * kCombineThreads + threadIdx.x;
  if (c >= a.hidden) return;
  for (int64_t t = blockIdx.y; t < a.num_tokens; t += gridDim.y) {
  float acc = 0.0f;
  for (int j = 0; j < a.top_k; ++j) {
    const int pos = a.route_pos[t * a.top_k + j];
    if (pos < 0) continue;
    acc = fmaf(a.weights[t * a.ldw_route + j], a.y[int64_t(pos) * a.hidden + c], acc);
  }
  bf16* out = a.out + t * a.ldo + c;
  if (a.accumulate) acc += __bfloat162float(*out);
  *out = __float2bfloat16_rn(acc);
  }
}

}  // namespace

void LaunchMoePermute(const MoePermuteArgs& a, cudaStream_t stream) {
  (void)LaunchPdl(PermuteKernel, dim3(1), dim3(kPermuteThreads), 0, stream, a);
}

void LaunchMoeCombine(const MoeCombineArgs& a, cudaStream_t stream) {
  if (a.num_tokens == 0) return;
  const dim3 grid(unsigned((a.hidden + kCombineThreads - 1) / kCombineThreads),
                  unsigned(a.num_tokens < 65535 ? a.num_tokens : 65535));
  (void)LaunchPdl(CombineKernel, grid, dim3(kCombineThreads), 0, stream, a);
}

}  // namespace pg::cuda
