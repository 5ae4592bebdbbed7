// Small helpers shared by the CPU-side kernels (ref/ and cpu/). Internal to src/kernels.
// All take views already checked by Validate (registry.h): f32 activations with packed rows
// (dim 0 may be strided), contiguous caches.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kernels/ops.h"

namespace pg::ops::detail {

// Row r (dim 0) of an f32 tensor with packed rows.
inline float* RowF32(const TensorView& t, int64_t r) { return t.as<float>() + r * t.strides[0]; }

// Element i of a 1-D f32/f16/bf16/f8_e4m3 vector, as float (stores round to nearest-even;
// e4m3 saturates to +-448).
inline float LoadScalar(DType dt, const void* base, int64_t i) {
  switch (dt) {
    case DType::kF16: return F16ToF32(static_cast<const uint16_t*>(base)[i]);
    case DType::kBF16: return Bf16ToF32(static_cast<const uint16_t*>(base)[i]);
    case DType::kF8E4M3: return F8E4M3ToF32(static_cast<const uint8_t*>(base)[i]);
    default: return static_cast<const float*>(base)[i];
  }
}
inline void StoreScalar(DType dt, void* base, int64_t i, float v) {
  switch (dt) {
    case DType::kF16: static_cast<uint16_t*>(base)[i] = F32ToF16(v); return;
    case DType::kBF16: static_cast<uint16_t*>(base)[i] = F32ToBf16(v); return;
    case DType::kF8E4M3: static_cast<uint8_t*>(base)[i] = F32ToF8E4M3(v); return;
    default: static_cast<float*>(base)[i] = v; return;
  }
}

// Element offset of (page, slot, kv_head, 0) in a contiguous [pages, page_size, kvh, d] cache.
inline int64_t CacheOffset(const TensorView& cache, int64_t page, int64_t slot, int64_t head) {
  return ((page * cache.shape[1] + slot) * cache.shape[2] + head) * cache.shape[3];
}

// Page index holding position t of sequence s.
inline int64_t PageOf(const AttentionBatch& b, int s, int64_t t) {
  return b.page_table[size_t(b.page_start[size_t(s)] + t / b.page_size)];
}

// Applies MatmulParams::w_scale (fp8 weights; host f32, shape per ops.h) to row j of the
// dequantized weight: row[i] *= scale(j, i) for i in [0, k).
inline void ScaleWeightRow(const TensorView& w_scale, int64_t j, float* row, int64_t k) {
  const float* s = w_scale.as<float>();
  if (w_scale.ndim == 1) {
    const float v = w_scale.dim(0) == 1 ? s[0] : s[j];
    for (int64_t i = 0; i < k; ++i) row[i] *= v;
  } else {  // 128x128 blocks: [ceil(m/128), ceil(k/128)]
    const float* srow = s + (j / 128) * w_scale.dim(1);
    for (int64_t i = 0; i < k; ++i) row[i] *= srow[i / 128];
  }
}

// Byte pointer to row r of head h of a contiguous [heads, rows, n] stack of matrices, any dtype.
inline const uint8_t* HeadRow(const TensorView& t, int64_t h, int64_t r) {
  return static_cast<const uint8_t*>(t.data) + (h * t.dim(1) + r) * t.row_bytes();
}

// Throws kOutOfRange when an id is outside [0, vocab). ids: [num_tokens] i32.
inline void CheckIds(const TensorView& ids, int64_t vocab) {
  const int32_t* p = ids.as<int32_t>();
  for (int64_t i = 0; i < ids.dim(0); ++i)
    if (p[i] < 0 || p[i] >= vocab)
      Throw(ErrorCode::kOutOfRange, "Embedding: token id {} at {} outside vocab [0, {})", p[i], i,
            vocab);
}

}  // namespace pg::ops::detail
