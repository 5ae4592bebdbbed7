// fattn_gpu_check: everything one fused-decode-attention GPU job (issues 6 + 7) runs, in one
// binary:
//   fattn_gpu_check [gtest flags]          the decode-attention op harness (DecodeAttention,
//                                          RopeKvWrite, RopeKvWriteAttention) and the device
//                                          model goldens (gpu_model_test.cpp)
//   fattn_gpu_check --bench [args]         tests/ops/bench_decode_attention.cpp
//   fattn_gpu_check bench gpu-decode ...   `peregrine bench gpu-decode` (src/cli/cmd_bench_gpu.cpp)
#include "gpu_check_main.h"

namespace pg::bench {
int RunDecodeBench(int argc, char** argv);
}

int main(int argc, char** argv) {
  return pg::testing_gpu::GpuCheckMain(argc, argv, "fattn_gpu_check", "--bench",
                                       &pg::bench::RunDecodeBench);
}
