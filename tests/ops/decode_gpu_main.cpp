// decode_gpu_check: the decode-attention harness cases (decode_attention_test.cpp,
// attention_test.cpp) and the decode-attention benchmark in one binary, so that one GPU job
// carries one binary:
//   decode_gpu_check [gtest flags]       the tests
//   decode_gpu_check --bench [--quick]   the benchmark (bench_decode_attention.cpp)
#include <gtest/gtest.h>

#include <cstring>

namespace pg::bench {
int RunDecodeBench(int argc, char** argv);
}

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--bench") == 0)
    return pg::bench::RunDecodeBench(argc - 1, argv + 1);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
