#include "models/device_weights.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/quant.h"
#include "core/status.h"

namespace pg::models {

void* DeviceWeightMaker::Alloc(int64_t bytes) {
  return mem_.Allocate(size_t(std::max<int64_t>(bytes, 1)));
}

TensorView DeviceWeightMaker::Matrix(std::span<const TensorView> parts, int64_t rows,
                                     int64_t cols, std::span<const float> row_scale) {
  TensorView out = TensorView::Contiguous(Alloc(rows * cols * 2), DType::kBF16, {rows, cols},
                                          mem_.device());
  if (random_) {
    mem_.FillRandom(out.data, DType::kBF16, rows * cols, 0.0f, 0.02f, seed_++);
  } else {
    PG_CHECK(row_scale.empty() || int64_t(row_scale.size()) == rows, "row_scale {} for {} rows",
             row_scale.size(), rows);
    std::vector<uint16_t> staging(static_cast<size_t>(rows * cols));
    std::vector<float> row(static_cast<size_t>(cols));
    int64_t r = 0;
    for (const TensorView& part : parts) {
      PG_CHECK(part.ndim == 2 && part.dim(1) == cols, "part {} for [{}, {}]", part.ShapeString(),
               rows, cols);
      for (int64_t i = 0; i < part.dim(0); ++i, ++r) {
        PG_CHECK(r < rows, "parts have more than {} rows", rows);
        quant::DequantizeRow(part.dtype, part.row_ptr(i), row.data(), cols);
        const float s = row_scale.empty() ? 1.0f : row_scale[size_t(r)];
        uint16_t* dst = staging.data() + r * cols;
        for (int64_t j = 0; j < cols; ++j) dst[j] = F32ToBf16(row[size_t(j)] * s);
      }
    }
    PG_CHECK(r == rows, "parts have {} rows, expected {}", r, rows);
    mem_.CopyToDevice(out.data, staging.data(), staging.size() * 2);
  }
  bytes_ += rows * cols * 2;
  return out;
}

DeviceMatrix DeviceWeightMaker::Fp8Matrix(const TensorView& w, const TensorView& scale_inv,
                                          int64_t rows, int64_t cols) {
  const int64_t sr = (rows + kFp8BlockSize - 1) / kFp8BlockSize,
                sc = (cols + kFp8BlockSize - 1) / kFp8BlockSize;
  DeviceMatrix m;
  m.w = TensorView::Contiguous(Alloc(rows * cols), DType::kF8E4M3, {rows, cols}, mem_.device());
  m.scale = TensorView::Contiguous(Alloc(sr * sc * 4), DType::kF32, {sr, sc}, mem_.device());
  if (random_) {
    mem_.FillRandom(m.w.data, DType::kF8E4M3, rows * cols, 0.0f, 0.5f, seed_++);
    mem_.FillRandom(m.scale.data, DType::kF32, sr * sc, 0.04f, 0.004f, seed_++);
  } else {
    PG_CHECK(w.dtype == DType::kF8E4M3 && w.ndim == 2 && w.dim(0) == rows && w.dim(1) == cols &&
                 w.is_contiguous(),
             "fp8 weight {} for [{}, {}]", w.ShapeString(), rows, cols);
    PG_CHECK(scale_inv.ndim == 2 && scale_inv.dim(0) == sr && scale_inv.dim(1) == sc,
             "fp8 scales {} for [{}, {}] blocks", scale_inv.ShapeString(), sr, sc);
    mem_.CopyToDevice(m.w.data, w.data, size_t(rows * cols));
    std::vector<float> s(static_cast<size_t>(sr * sc));
    quant::DequantizeRow(scale_inv.dtype, scale_inv.data, s.data(), sr * sc);
    mem_.CopyToDevice(m.scale.data, s.data(), s.size() * 4);
  }
  bytes_ += m.bytes();
  return m;
}

DeviceMatrix DeviceWeightMaker::Fp8TensorMatrix(std::span<const TensorView> parts, int64_t rows,
                                                int64_t cols) {
  DeviceMatrix m;
  m.w = TensorView::Contiguous(Alloc(rows * cols), DType::kF8E4M3, {rows, cols}, mem_.device());
  m.scale = TensorView::Contiguous(Alloc(4), DType::kF32, {1}, mem_.device());
  if (random_) {
    mem_.FillRandom(m.w.data, DType::kF8E4M3, rows * cols, 0.0f, 16.0f, seed_++);
    mem_.FillRandom(m.scale.data, DType::kF32, 1, 0.02f / 16.0f, 0.0f, seed_++);
  } else {
    std::vector<float> all(static_cast<size_t>(rows * cols));
    int64_t r = 0;
    for (const TensorView& part : parts) {
      PG_CHECK(part.ndim == 2 && part.dim(1) == cols, "part {} for [{}, {}]", part.ShapeString(),
               rows, cols);
      for (int64_t i = 0; i < part.dim(0); ++i, ++r) {
        PG_CHECK(r < rows, "parts have more than {} rows", rows);
        quant::DequantizeRow(part.dtype, part.row_ptr(i), all.data() + r * cols, cols);
      }
    }
    PG_CHECK(r == rows, "parts have {} rows, expected {}", r, rows);
    float amax = 0.0f;
    for (float v : all) amax = std::max(amax, std::fabs(v));
    const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
    std::vector<uint8_t> q(all.size());
    for (size_t i = 0; i < all.size(); ++i) q[i] = F32ToF8E4M3(all[i] / scale);
    mem_.CopyToDevice(m.w.data, q.data(), q.size());
    mem_.CopyToDevice(m.scale.data, &scale, 4);
  }
  bytes_ += m.bytes();
  return m;
}

TensorView DeviceWeightMaker::Vector(std::initializer_list<TensorView> parts, int64_t n,
                                     float mean) {
  TensorView out = TensorView::Contiguous(Alloc(n * 4), DType::kF32, {n}, mem_.device());
  if (random_) {
    mem_.FillRandom(out.data, DType::kF32, n, mean, 0.02f, seed_++);
  } else {
    std::vector<float> staging;
    for (const TensorView& part : parts) {
      PG_CHECK(part.dtype == DType::kF32 && part.is_contiguous(), "vector {}", part.ShapeString());
      staging.insert(staging.end(), part.as<float>(), part.as<float>() + part.numel());
    }
    PG_CHECK(int64_t(staging.size()) == n, "vector parts {} != {}", staging.size(), n);
    mem_.CopyToDevice(out.data, staging.data(), staging.size() * 4);
  }
  bytes_ += n * 4;
  return out;
}

TensorView DeviceWeightMaker::Buffer(DType dtype, int64_t rows, int64_t cols) {
  const int64_t elem = Info(dtype).block_bytes;
  return TensorView::Contiguous(Alloc(rows * cols * elem), dtype, {rows, cols}, mem_.device());
}

}  // namespace pg::models
