// Device weights of the models' device paths (DESIGN.md example 5: a model never calls CUDA;
// it asks a DeviceMemory for bytes, copies and random fills).
//
// DeviceWeightMaker makes each weight either from host tensors (any dequantizable dtype ->
// bf16; fp8 e4m3 block-scaled kept fp8 with its f32 scales) or random of the same shape
// (`--load-format dummy` on the device: N(0, 0.02) bf16 matrices, mean + N(0, 0.02) f32
// vectors, uniform fp8 bytes in (-0.5, 0.5) with scales near 0.04 so values are about N(0, 0.02)).
// It counts every byte it allocates for weights (not activations), for weight_bytes().
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>

#include "core/tensor.h"
#include "models/model.h"

namespace pg::models {

// A device weight matrix [rows, cols]: bf16, or fp8 e4m3 with DeepSeek's 128x128 block scales
// (scale [ceil(rows / 128), ceil(cols / 128)] f32; real = float(w) * scale of its block) or a
// per-tensor scale ([1] f32; MatmulParams::w_scale takes either).
struct DeviceMatrix {
  TensorView w;
  TensorView scale;  // fp8 only (data == nullptr for bf16)
  bool fp8() const { return scale.data != nullptr; }
  int64_t bytes() const { return w.nbytes() + (fp8() ? scale.nbytes() : 0); }
};

inline constexpr int64_t kFp8BlockSize = 128;

// Columns [col, col + cols) of a 2-D view of a scalar dtype (same rows and row stride).
inline TensorView Columns(const TensorView& t, int64_t col, int64_t cols) {
  TensorView v = t;
  v.data = static_cast<char*>(t.data) + col * Info(t.dtype).block_bytes;
  v.shape[1] = cols;
  return v;
}  // DeepSeek weight_block_size (both dims)

class DeviceWeightMaker {
 public:
  DeviceWeightMaker(DeviceMemory& mem, bool random, uint64_t seed)
      : mem_(mem), random_(random), seed_(seed) {}
  bool random() const { return random_; }

  // The row-wise concatenation of host matrices `parts` (each [r_i, cols]) as one bf16 device
  // matrix [rows, cols] (sum r_i == rows); in random mode a random matrix [rows, cols].
  // `row_scale` (optional, [rows]) multiplies each row while converting (a folded constant).
  TensorView Matrix(std::span<const TensorView> parts, int64_t rows, int64_t cols,
                    std::span<const float> row_scale = {});
  TensorView Matrix(std::initializer_list<TensorView> parts, int64_t rows, int64_t cols) {
    return Matrix(std::span<const TensorView>(parts.begin(), parts.size()), rows, cols);
  }
  // An fp8 e4m3 matrix [rows, cols] with its 128x128 block scales, copied as stored (w fp8,
  // scale_inv [ceil(rows/128), ceil(cols/128)] f32) or random.
  DeviceMatrix Fp8Matrix(const TensorView& w, const TensorView& scale_inv, int64_t rows,
                         int64_t cols);
  // The row-wise concatenation of host matrices `parts` (as Matrix) as one fp8 e4m3 device
  // matrix with one per-tensor scale ([1] f32: scale = amax / 448, w = e4m3(value / scale));
  // random: e4m3 values of N(0, 16) with scale 0.02 / 16, so values are about N(0, 0.02) as
  // Matrix's. Counted at 1 byte per weight (+ 4 for the scale).
  DeviceMatrix Fp8TensorMatrix(std::span<const TensorView> parts, int64_t rows, int64_t cols);
  DeviceMatrix Fp8TensorMatrix(std::initializer_list<TensorView> parts, int64_t rows, int64_t cols) {
    return Fp8TensorMatrix(std::span<const TensorView>(parts.begin(), parts.size()), rows, cols);
  }
  // The concatenation of host f32 vectors as one f32 device vector [n]; random: mean + noise.
  TensorView Vector(std::initializer_list<TensorView> parts, int64_t n, float mean);

  // Activation scratch [rows, cols] bf16 (not counted as weights).
  TensorView Activations(int64_t rows, int64_t cols) { return Buffer(DType::kBF16, rows, cols); }
  // Other scratch [rows, cols] of `dtype` (i32 routing ids, f32 routing weights).
  TensorView Buffer(DType dtype, int64_t rows, int64_t cols);
  int64_t bytes() const { return bytes_; }

 private:
  void* Alloc(int64_t bytes);
  DeviceMemory& mem_;
  bool random_;
  uint64_t seed_;
  int64_t bytes_ = 0;
};

}  // namespace pg::models
