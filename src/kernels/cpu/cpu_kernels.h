// Registration entry points of the CPU backend's files (called by RegisterCpuKernels).
#pragma once

#include <span>

#include "kernels/ops.h"
#include "kernels/registry.h"

namespace pg::ops::cpu {
void RegisterMatmul(Registry& r);       // matmul_gemv.cpp, matmul_gemm.cpp
void RegisterAttention(Registry& r);    // attention.cpp
void RegisterElementwise(Registry& r);  // elementwise.cpp

// matmul_gemv_vnni.cpp: independent matmuls as one parallel loop over all their weight row
// groups, i.e. one pool dispatch for, say, every hit expert's gate and up projections instead
// of one each. Each runs the cpu_vnni_q8 kernel's row arithmetic (the same bits as Matmul
// choosing it). GemvQuantVnni512Takes(p): this CPU has AVX-512 VNNI, the kernel cap allows
// it, the weights are Q4_0 / Q4_1 / Q8_0 and p has at most 16 activation rows.
bool GemvQuantVnni512Reads(DType w);  // Q4_0 / Q4_1 / Q8_0 and their IsRows4 layouts
bool GemvQuantVnni512Takes(const MatmulParams& p);
void GemvQuantVnni512Many(std::span<const MatmulParams> ps);

// matmul_gemv_q4_avx2.cpp, the same for cpu_avx2_q8's Q4 weights (AVX2 without VNNI):
// GemvQ4Avx2Takes(p): this CPU has AVX2, the kernel cap allows it, the weights are Q4_0 / Q4_1
// (or their IsRows4 layouts) and p has at most 16 activation rows.
bool GemvQ4Avx2Reads(DType w);
bool GemvQ4Avx2Takes(const MatmulParams& p);
void GemvQ4Avx2Many(std::span<const MatmulParams> ps);
// Whether that kernel takes AVX-VNNI's vpdpbusd where the CPU has it (default) or the plain
// AVX2 instructions: the same bits either way (tests and benchmarks compare the two).
void UseAvxVnniForQ4(bool on);

// q4_repack.cpp: Q4_0 / Q4_1 weights re-laid for the int8 GEMV kernels (kQ4_0x4 / kQ4_1x4): 4 rows interleaved
// per pair of blocks, so a row group is one sequential stream and one load brings its 8 scales.
// Matmul on the copy gives the source's bits (the kernels read the same values into the same
// registers). Only cpu_vnni_q8 and cpu_avx2_q8 read these types (IsRows4, core/dtype.h):
// CanRepackRows4 says whether this CPU has AVX2 and w is a contiguous host Q4_0 / Q4_1 matrix
// of a multiple of 4 rows.
bool CanRepackRows4(const TensorView& w);
Tensor RepackRows4(const TensorView& w);
}  // namespace pg::ops::cpu
