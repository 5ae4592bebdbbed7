// Kernel-boundary probe (H200): what does one dependency between two kernels of a captured
// decode step cost, and is a release/acquire counter cheaper than griddepcontrol.wait?
//
// A graph of N kernels, each one block an SM (132 x 256 threads). Kernel i (before its wait)
// loads its weight slice of B bytes into shared memory, then waits for kernel i-1, reads all
// of kernel i-1's outputs (one float a block: an all-to-all dependency, as a GEMV's input
// vector), and stores one float. Modes:
//   plain : <<<>>> launches (full serialisation)
//   pdl   : programmatic launches, trigger at the top, griddepcontrol.wait (what the step does)
//   flag  : programmatic launches, trigger at the top, but instead of griddepcontrol.wait a
//           block spins (ld.acquire.gpu) until every block of kernel i-1 has added one to its
//           counter (red.release.gpu after its store); counters zeroed by a memset node
//   grid  : one persistent kernel doing the N steps with a grid-wide counter barrier
// Prints µs a kernel (graph replay / N) and, for B > 0, the floor N * B / HBM rate (D2D copy
// measured in the same process). The slice load is plain 16-byte loads from 256 threads (no
// deep bytes in flight): at 16-24 MB a kernel it is far from HBM's rate, so only the
// differences between the modes mean something there.
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a boundary.cu -o boundary
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x) do { cudaError_t err_ = (x); if (err_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(err_)); std::exit(1); } } while (0)

namespace {

constexpr int kThreads = 256;

struct Args {
  const uint4* w;      // [grid][slice16] weight slices of this kernel
  int64_t slice16;     // uint4 per block
  const float* x_in;   // [grid] previous kernel's outputs
  float* x_out;        // [grid]
  const unsigned* wait_counter;  // flag mode: previous kernel's counter (null: none)
  unsigned* done_counter;        // flag mode: this kernel's counter
  int mode;            // 0 plain, 1 pdl, 2 flag
};

__device__ __forceinline__ unsigned LoadAcquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void AddRelease(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Loads the block's slice into shared memory (plain 16-byte loads), returns a checksum term.
__device__ float LoadSlice(const Args& a, uint4* smem) {
  const uint4* src = a.w + int64_t(blockIdx.x) * a.slice16;
  for (int64_t i = threadIdx.x; i < a.slice16; i += blockDim.x) smem[i] = __ldg(src + i);
  __syncthreads();
  return a.slice16 > 0 ? __uint_as_float(smem[threadIdx.x % a.slice16].x & 0x3f7fffffu) : 0.f;
}

__device__ float ReadInputs(const float* x_in) {
  float s = 0.f;
  for (int i = threadIdx.x; i < gridDim.x; i += blockDim.x) s += x_in[i];
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  return s;
}

__global__ void __launch_bounds__(kThreads) Step(Args a) {
  extern __shared__ uint4 smem[];
  if (a.mode != 0) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const float w = LoadSlice(a, smem);
  if (a.mode == 1) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
  } else if (a.mode == 2 && a.wait_counter != nullptr) {
    if (threadIdx.x == 0)
      while (LoadAcquire(a.wait_counter) < gridDim.x) __nanosleep(20);
    __syncthreads();
  }
  const float s = ReadInputs(a.x_in) * 0.5f + w * 1e-30f;
  if (threadIdx.x == 0) a.x_out[blockIdx.x] = s;
  if (a.mode == 2) {
    __syncthreads();
    if (threadIdx.x == 0) AddRelease(a.done_counter, 1);
  }
}

// Persistent: N steps, each loads its slice, grid barrier on counter[step], reads inputs.
// The weights of step s start at (s * grid * slice16) mod wrap16 uint4 (wrap16: the buffer
// less one step's weights, as the graph modes wrap).
__global__ void __launch_bounds__(kThreads) Persistent(const uint4* w, int64_t slice16, int64_t wrap16,
                                                       int steps, float* x, unsigned* counters) {
  extern __shared__ uint4 smem[];
  for (int s = 0; s < steps; ++s) {
    Args a{w + (int64_t(s) * gridDim.x * slice16) % wrap16, slice16, nullptr, nullptr, nullptr,
           nullptr, 0};
    const float wv = LoadSlice(a, smem);
    if (s > 0) {
      if (threadIdx.x == 0)
        while (LoadAcquire(counters + s - 1) < gridDim.x) __nanosleep(20);
      __syncthreads();
    }
    const float v = ReadInputs(x + int64_t(s) * gridDim.x) * 0.5f + wv * 1e-30f;
    if (threadIdx.x == 0) x[int64_t(s + 1) * gridDim.x + blockIdx.x] = v;
    __syncthreads();
    if (threadIdx.x == 0) AddRelease(counters + s, 1);
    __syncthreads();  // the slice buffer is reused by the next step
  }
}

float HbmGBs(void* a, void* b, size_t bytes, cudaStream_t st) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, st));
  CK(cudaEventRecord(e0, st));
  for (int i = 0; i < 10; ++i) CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, st));
  CK(cudaEventRecord(e1, st));
  CK(cudaEventSynchronize(e1));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  return 2.0 * bytes * 10 / (ms * 1e-3) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 256;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const size_t hbm_bytes = size_t(1) << 30;
  void *ha, *hb;
  CK(cudaMalloc(&ha, hbm_bytes));
  CK(cudaMalloc(&hb, hbm_bytes));
  CK(cudaMemset(ha, 1, hbm_bytes));
  const float gbs = HbmGBs(ha, hb, hbm_bytes, st);
  printf("HBM D2D %.0f GB/s, %d SMs, %d kernels a graph\n", gbs, sms, n);
  CK(cudaFuncSetAttribute(Step, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  CK(cudaFuncSetAttribute(Persistent, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  float* x;
  unsigned* counters;
  CK(cudaMalloc(&x, sizeof(float) * sms * (n + 1)));
  CK(cudaMemset(x, 0, sizeof(float) * sms * (n + 1)));
  CK(cudaMalloc(&counters, sizeof(unsigned) * n));
  const char* names[] = {"plain", "pdl", "flag", "grid"};
  printf("%10s %8s %10s %10s %10s %10s\n", "KB/kernel", "mode", "us/kernel", "floor us", "over us", "floor/t");
  for (int kb : {0, 4 * 1024, 16 * 1024, 24 * 1024}) {  // KB a kernel: 0, 4 MB, 16 MB, 24 MB
    int64_t slice16 = int64_t(kb) * 1024 / sms / 16;
    int64_t smem_bytes = slice16 * 16;
    if (smem_bytes > 192 * 1024) slice16 = 0;  // 48 MB does not fit a block's shared memory: loads only
    const uint4* w = static_cast<const uint4*>(ha);  // n slices of grid x slice16 (wraps in 1 GB)
    const int64_t per_kernel16 = int64_t(sms) * slice16;
    const int64_t total16 = int64_t(hbm_bytes / 16);
    if (kb > 0 && slice16 == 0) continue;
    for (int mode = 0; mode < 4; ++mode) {
      cudaGraph_t g;
      CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
      CK(cudaMemsetAsync(counters, 0, sizeof(unsigned) * n, st));
      if (mode == 3) {
        Persistent<<<sms, kThreads, slice16 * 16, st>>>(
            w, slice16, std::max<int64_t>(1, total16 - per_kernel16), n, x, counters);
        CK(cudaGetLastError());
      } else {
        for (int i = 0; i < n; ++i) {
          Args a{};
          a.w = w + (per_kernel16 * i) % std::max<int64_t>(1, total16 - per_kernel16);
          a.slice16 = slice16;
          a.x_in = x + int64_t(i) * sms;
          a.x_out = x + int64_t(i + 1) * sms;
          a.wait_counter = i > 0 ? counters + i - 1 : nullptr;
          a.done_counter = counters + i;
          a.mode = mode;
          cudaLaunchConfig_t cfg{};
          cfg.gridDim = dim3(sms);
          cfg.blockDim = dim3(kThreads);
          cfg.dynamicSmemBytes = slice16 * 16;
          cfg.stream = st;
          cudaLaunchAttribute attr[1];
          attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
          attr[0].val.programmaticStreamSerializationAllowed = mode == 0 ? 0 : 1;
          cfg.attrs = attr;
          cfg.numAttrs = 1;
          CK(cudaLaunchKernelEx(&cfg, Step, a));
        }
      }
      CK(cudaStreamEndCapture(st, &g));
      cudaGraphExec_t ge;
      CK(cudaGraphInstantiate(&ge, g, 0));
      for (int i = 0; i < 3; ++i) CK(cudaGraphLaunch(ge, st));
      CK(cudaStreamSynchronize(st));
      cudaEvent_t e0, e1;
      CK(cudaEventCreate(&e0));
      CK(cudaEventCreate(&e1));
      const int reps = 20;
      std::vector<float> times;
      for (int r = 0; r < reps; ++r) {
        CK(cudaEventRecord(e0, st));
        CK(cudaGraphLaunch(ge, st));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        times.push_back(ms);
      }
      std::sort(times.begin(), times.end());
      const double us = times[reps / 2] * 1e3 / n;
      const double floor_us = double(per_kernel16) * 16 / (gbs * 1e3);
      printf("%10d %8s %10.2f %10.2f %10.2f %9.1f%%\n", kb, names[mode], us, floor_us, us - floor_us,
             floor_us > 0 ? 100.0 * floor_us / us : 0.0);
      CK(cudaGraphExecDestroy(ge));
      CK(cudaGraphDestroy(g));
    }
  }
  return 0;
}
