// A kernel that keeps the stream busy for a given time (profiling: the host enqueues the work
// behind it, so events between the queued kernels time the GPU alone, not host launch gaps).
#pragma once

#include <cuda_runtime.h>

namespace pg::cuda {

void LaunchSpin(double microseconds, cudaStream_t stream);

}  // namespace pg::cuda
