// main() of a GPU job binary that bundles gtest suites, one benchmark and the lean bench CLI
// (a GPU job carries one binary: the CUDA kernels are most of each binary's size):
//   <name> [gtest flags]            the linked test suites
//   <name> <bench_flag> [args]      bench(argc - 1, argv + 1)
//   <name> bench gpu-decode ...     as `peregrine bench gpu-decode` (gpu_bench_cli.h)
#pragma once

#include <gtest/gtest.h>

#include <cstring>

#include "gpu_bench_cli.h"

namespace pg::testing_gpu {

inline int GpuCheckMain(int argc, char** argv, const char* name, const char* bench_flag,
                        int (*bench)(int, char**)) {
  if (argc > 1 && std::strcmp(argv[1], bench_flag) == 0) return bench(argc - 1, argv + 1);
  if (argc > 1 && std::strcmp(argv[1], "bench") == 0) return RunGpuBenchCli(name, argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

}  // namespace pg::testing_gpu
