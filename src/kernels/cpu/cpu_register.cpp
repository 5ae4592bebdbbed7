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
    r.avx_vnni = r.avx2 && __builtin_cpu_supports("avxvnni");
    // PEREGRINE_CPU_ISA=avxvnni | avx2 | generic runs the kernels of a CPU without AVX-512
    // (an Intel laptop), without AVX-VNNI either (AMD Zen 3), or without AVX2: what such a
    // machine computes, reproducible here ("native", the default: all this CPU has).
    if (const char* e = std::getenv("PEREGRINE_CPU_ISA")) {
      const std::string_view isa(e);
      PG_CHECK(isa == "native" || isa == "avxvnni" || isa == "avx2" || isa == "generic",
               "PEREGRINE_CPU_ISA={}: expected native, avxvnni, avx2 or generic", isa);
      if (isa != "native") r.avx512 = r.vnni = false;
      if (isa == "avx2" || isa == "generic") r.avx_vnni = false;
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
