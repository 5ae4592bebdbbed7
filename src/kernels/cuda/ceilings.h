// Hardware ceilings measured on the device in the same run as a benchmark, so that every
// figure is held against a floor of the same machine, clocks and driver:
//   HBM bandwidth  = bytes read + bytes written per second of a 2 GiB device-to-device copy;
//   bf16 GEMM rate = FLOP/s of a cuBLASLt n = k = m GEMM (default 8192^3), random data.
// Both allocate (cudaMalloc) and free their own buffers: call them before an arena is sized.
#pragma once

#include <cstdint>

namespace pg::cuda {

// Best of 3 timed runs (after one warm-up) of 8 back-to-back 2 GiB copies. bytes/s.
double MeasureHbmBytesPerS();

// Median of 10 timed GEMMs (after 3 warm-ups) of x[size, size] · w[size, size]^T. FLOP/s.
double MeasureBf16GemmFlopsPerS(int64_t size = 8192);

}  // namespace pg::cuda
