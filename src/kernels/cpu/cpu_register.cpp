#include <cstdlib>
#include <string_view>

#include "core/status.h"
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
    // PEREGRINE_CPU_ISA=avx2 | generic runs the kernels of a CPU without AVX-512 (or without
    // AVX2): what such a machine computes, reproducible here ("native", the default: all).
    if (const char* e = std::getenv("PEREGRINE_CPU_ISA")) {
      const std::string_view isa(e);
      PG_CHECK(isa == "native" || isa == "avx2" || isa == "generic",
               "PEREGRINE_CPU_ISA={}: expected native, avx2 or generic", isa);
      if (isa != "native") r.avx512 = r.vnni = false;
      if (isa == "generic") r.avx2 = false;
    }
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
