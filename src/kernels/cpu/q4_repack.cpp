// RepackRows4: Q4_0 / Q4_1 weights with 4 rows interleaved per pair of blocks (DTypes
// kQ4_0x4 / kQ4_1x4), the layout q4_groups.h reads for both int8 GEMV families; and
// ops::PackMatmulWeightForCpu, which makes it for the models (models/cpu_pack.h).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string_view>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/gemv_jobs.h"
#include "kernels/cpu/q4_groups.h"
#include "kernels/registry.h"

namespace pg::ops::cpu {

bool CanRepackRows4(const TensorView& w) {
  return Features().avx2 && (w.dtype == DType::kQ4_0 || w.dtype == DType::kQ4_1) && w.ndim == 2 &&
         w.dim(0) % kGemvGroupRows == 0 && w.dim(0) > 0 && w.is_contiguous() &&
         w.device == Device::kCpu;
}

// Per group of 4 rows, per pair of blocks (b, b + 1): the 8 blocks' scale fields (row-major:
// r0 b, r0 b+1, r1 b, ...; 2 bytes each for Q4_0, d and m 4 bytes for Q4_1), then each row's
// 32 quant bytes (block b's 16, block b+1's 16). An odd last block: 4 scale fields, then 4 x 16
// quant bytes. A group takes exactly its 4 rows' bytes.
Tensor RepackRows4(const TensorView& w) {
  PG_CHECK(CanRepackRows4(w), "RepackRows4: {} {}", Name(w.dtype), w.ShapeString());
  const bool q4_1 = w.dtype == DType::kQ4_1;
  const int64_t bytes = q4_1 ? q4::Q4<true>::kBytes : q4::Q4<false>::kBytes;
  const int64_t qs_off = q4_1 ? q4::Q4<true>::kQsOff : q4::Q4<false>::kQsOff;
  const int64_t m = w.dim(0), nb = w.dim(1) / quant::kQK, row_bytes = nb * bytes;
  Tensor out(q4_1 ? DType::kQ4_1x4 : DType::kQ4_0x4, {m, w.dim(1)});
  const uint8_t* src = static_cast<const uint8_t*>(w.data);
  uint8_t* dst = static_cast<uint8_t*>(out.view().data);
  for (int64_t g = 0; g < m / kGemvGroupRows; ++g) {
    const uint8_t* rows = src + g * kGemvGroupRows * row_bytes;
    uint8_t* o = dst + g * kGemvGroupRows * row_bytes;
    for (int64_t b = 0; b < nb; b += 2) {
      const int64_t blocks = std::min<int64_t>(2, nb - b);  // 1 for an odd last block
      for (int64_t r = 0; r < kGemvGroupRows; ++r)
        for (int64_t j = 0; j < blocks; ++j, o += qs_off)
          std::memcpy(o, rows + r * row_bytes + (b + j) * bytes, size_t(qs_off));
      for (int64_t r = 0; r < kGemvGroupRows; ++r)
        for (int64_t j = 0; j < blocks; ++j, o += 16)
          std::memcpy(o, rows + r * row_bytes + (b + j) * bytes + qs_off, 16);
    }
  }
  return out;
}

}  // namespace pg::ops::cpu

namespace pg::ops {

std::optional<Tensor> PackMatmulWeightForCpu(const TensorView& w) {
  static const bool enabled = [] {
    const char* e = std::getenv("PEREGRINE_CPU_REPACK");
    return e == nullptr || std::string_view(e) != "0";
  }();
  // Only where a kernel that reads the layout may run (cpu_vnni_q8 or cpu_avx2_q8; tests cap
  // the priority to the reference kernels, which read the source layout only).
  if (!enabled || MaxKernelPriority() < kPriorityCpuAvx2 || !cpu::CanRepackRows4(w))
    return std::nullopt;
  return cpu::RepackRows4(w);
}

}  // namespace pg::ops
