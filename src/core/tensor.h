// Tensor views (non-owning) and a CPU-owning Tensor.
//
// Invariants:
//  * shape[i] >= 0; strides are in ELEMENTS (not bytes); shape[ndim-1] is the innermost dim.
//  * For GGUF block types the innermost dim is contiguous (stride 1) and a multiple of the
//    block size; outer strides are multiples of the block size. Byte offsets are
//    elements * block_bytes / block_size.
//  * A view never owns memory: whatever it points into must outlive it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "core/dtype.h"

namespace pg {

enum class Device : uint8_t { kCpu, kCuda };

inline constexpr int kMaxDims = 6;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Device device = Device::kCpu;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> strides{};

  // A contiguous (row-major) view over `data`.
  static TensorView Contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               Device device = Device::kCpu);
  static TensorView Contiguous(void* data, DType dtype, const int64_t* shape, int ndim,
                               Device device = Device::kCpu);

  int64_t dim(int i) const { return shape[i < 0 ? ndim + i : i]; }
  int64_t numel() const;
  int64_t nbytes() const;  // bytes spanned by a contiguous tensor of this shape
  bool is_contiguous() const;
  std::string ShapeString() const;  // "[2, 3, 4] bf16"

  template <typename T>
  T* as() const { return static_cast<T*>(data); }
  // Byte pointer to row `r` of a 2-D tensor (dim 0 index), any dtype.
  uint8_t* row_ptr(int64_t r) const;
  int64_t row_bytes() const;  // bytes of one innermost row (dim -1), contiguous

  // Sub-range [begin, begin+len) along dim 0; same strides.
  TensorView Slice0(int64_t begin, int64_t len) const;
  // Reinterpret a contiguous tensor with a new shape of the same numel.
  TensorView Reshape(std::initializer_list<int64_t> new_shape) const;
};

// Owns a 64-byte-aligned CPU buffer. Move-only.
class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, std::initializer_list<int64_t> shape);
  Tensor(DType dtype, const int64_t* shape, int ndim);
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  const TensorView& view() const { return view_; }
  operator const TensorView&() const { return view_; }
  template <typename T>
  T* data() const { return view_.as<T>(); }
  int64_t dim(int i) const { return view_.dim(i); }
  int64_t numel() const { return view_.numel(); }
  int64_t nbytes() const { return view_.nbytes(); }
  DType dtype() const { return view_.dtype; }
  bool empty() const { return !storage_; }
  void Zero();

 private:
  struct Free { void operator()(void* p) const; };
  std::unique_ptr<void, Free> storage_;
  TensorView view_;
};

}  // namespace pg
