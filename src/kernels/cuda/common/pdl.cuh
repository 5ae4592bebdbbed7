// Programmatic dependent launch (PDL, sm_90): lets a kernel's blocks start (and run the part
// of their work that reads no upstream output, e.g. streaming weights) while the previous
// kernel on the stream drains. Works inside captured CUDA graphs (programmatic edges).
//
// Contract for a kernel launched with LaunchPdl:
//  * It calls PdlWait() before its first read of anything a previous kernel wrote AND before
//    its first global write (write-after-read hazards with the previous kernel). Before
//    PdlWait it may only read data no kernel of the step writes (weights, constant params).
//  * PdlWait returns once the previous kernel has fully completed and its writes are visible,
//    so ordering stays transitive along the stream as long as every PDL kernel waits.
//  * PdlTrigger() lets the next kernel launch early; calling it anywhere (or never) is safe:
//    the next kernel still blocks in its own PdlWait until this one completes.
// A kernel that never calls PdlWait must be launched with <<<>>> (full serialisation).
// Outside a PDL launch both calls are no-ops, so one kernel body serves both launch modes.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "kernels/cuda/common/block_trace.cuh"  // PG_TRACE_WAIT_* (diagnostic build only)
#include "kernels/cuda/common/context.h"  // PdlEnabled (PEREGRINE_PDL=0 turns PDL off)

namespace pg::cuda {

__device__ __forceinline__ void PdlWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  PG_TRACE_WAIT_BEGIN();
  asm volatile("griddepcontrol.wait;" ::: "memory");
  PG_TRACE_WAIT_END();
#endif
}

__device__ __forceinline__ void PdlTrigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The launch configuration of LaunchPdl: attr[0] allows programmatic stream serialisation
// (when PdlEnabled()); attr must outlive the launch call.
inline cudaLaunchConfig_t PdlConfig(dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                    cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = PdlEnabled() ? 1 : 0;
  config.attrs = attr;
  config.numAttrs = 1;
  return config;
}

// Launches `kernel<<<grid, block, smem, stream>>>(args...)` with programmatic stream
// serialisation allowed (when PdlEnabled()). Returns the launch error (callers check it as
// they check cudaGetLastError after <<<>>>).
template <typename... KArgs, typename... Args>
cudaError_t LaunchPdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                      cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t config = PdlConfig(grid, block, smem, stream, attr);
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

// LaunchPdl with a thread-block cluster of `cluster` blocks (cluster dimensions; the grid a
// multiple of them).
template <typename... KArgs, typename... Args>
cudaError_t LaunchPdlCluster(void (*kernel)(KArgs...), dim3 grid, dim3 block, dim3 cluster,
                             size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attr[2];
  cudaLaunchConfig_t config = PdlConfig(grid, block, smem, stream, attr);
  attr[1].id = cudaLaunchAttributeClusterDimension;
  attr[1].val.clusterDim.x = cluster.x;
  attr[1].val.clusterDim.y = cluster.y;
  attr[1].val.clusterDim.z = cluster.z;
  config.numAttrs = 2;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace pg::cuda
