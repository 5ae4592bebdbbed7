// A lean `peregrine` for the GPU machine: only `bench gpu-decode` and `bench gpu-prefill`
// (gpu_bench_cli.h), so tools/gpu/model_check.sh carries a small binary.
#include "gpu_bench_cli.h"

int main(int argc, char** argv) { return pg::testing_gpu::RunGpuBenchCli("peregrine", argc, argv); }
