// Runtime CPU feature detection for the CPU backends. Kernels are compiled with
// per-function target attributes, so the binary runs on any x86-64; the registry's
// capability predicates consult these flags before choosing a SIMD kernel.
#pragma once

namespace pg::ops::cpu {

struct CpuFeatures {
  bool avx2 = false;     // + fma + f16c
  bool avx512 = false;   // avx512f + bw + vl
  bool vnni = false;     // avx512_vnni (with avx512vl: 256-bit vpdpbusd)
  bool avx_vnni = false; // avx2 + AVX-VNNI (VEX vpdpbusd; Intel Alder Lake on, AMD Zen 5)
};

// Detected once; immutable afterwards.
const CpuFeatures& Features();

}  // namespace pg::ops::cpu

#define PG_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define PG_TARGET_AVXVNNI __attribute__((target("avx2,fma,f16c,avxvnni")))
#define PG_TARGET_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
