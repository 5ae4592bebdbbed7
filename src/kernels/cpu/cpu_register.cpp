#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_kernels.h"

namespace pg::ops {
namespace cpu {

const CpuFeatures& Features() {
  static const CpuFeatures f = [] {
    CpuFeatures r;
    __builtin_cpu_init();
    r.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    r.avx512 = r.avx2 && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    r.vnni = r.avx512 && __builtin_cpu_supports("avx512vnni");
    return r;
  }();
  return f;
}

}  // namespace cpu

void RegisterCpuKernels(Registry& r) {
  cpu::RegisterMatmul(r);
  cpu::RegisterAttention(r);
  cpu::RegisterElementwise(r);
}

}  // namespace pg::ops
