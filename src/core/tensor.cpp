#include "core/tensor.h"

#include <cstdlib>
#include <cstring>

#include "core/status.h"

namespace pg {

TensorView TensorView::Contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                                  Device device) {
  return Contiguous(data, dtype, shape.begin(), int(shape.size()), device);
}

TensorView TensorView::Contiguous(void* data, DType dtype, const int64_t* shape, int ndim,
                                  Device device) {
  PG_CHECK(ndim >= 0 && ndim <= kMaxDims, "ndim {}", ndim);
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.device = device;
  v.ndim = ndim;
  int64_t stride = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    PG_CHECK(shape[i] >= 0, "negative dim");
    v.shape[i] = shape[i];
    v.strides[i] = stride;
    stride *= shape[i];
  }
  return v;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

int64_t TensorView::nbytes() const {
  const DTypeInfo& info = Info(dtype);
  return numel() / info.block_size * info.block_bytes;
}

bool TensorView::is_contiguous() const {
  int64_t stride = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != stride) return false;
    stride *= shape[i];
  }
  return true;
}

std::string TensorView::ShapeString() const {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "] " + std::string(Name(dtype));
}

int64_t TensorView::row_bytes() const {
  const DTypeInfo& info = Info(dtype);
  return dim(-1) / info.block_size * info.block_bytes;
}

uint8_t* TensorView::row_ptr(int64_t r) const {
  const DTypeInfo& info = Info(dtype);
  return static_cast<uint8_t*>(data) + r * strides[0] / info.block_size * info.block_bytes;
}

TensorView TensorView::Slice0(int64_t begin, int64_t len) const {
  PG_CHECK(ndim >= 1 && begin >= 0 && len >= 0 && begin + len <= shape[0], "slice {}+{} of {}",
           begin, len, ShapeString());
  TensorView v = *this;
  v.data = row_ptr(begin);
  v.shape[0] = len;
  return v;
}

TensorView TensorView::Reshape(std::initializer_list<int64_t> new_shape) const {
  PG_CHECK(is_contiguous(), "reshape of a non-contiguous view");
  TensorView v = Contiguous(data, dtype, new_shape, device);
  PG_CHECK(v.numel() == numel(), "reshape {} -> numel {}", ShapeString(), v.numel());
  return v;
}

void Tensor::Free::operator()(void* p) const { std::free(p); }

Tensor::Tensor(DType dtype, std::initializer_list<int64_t> shape)
    : Tensor(dtype, shape.begin(), int(shape.size())) {}

Tensor::Tensor(DType dtype, const int64_t* shape, int ndim) {
  view_ = TensorView::Contiguous(nullptr, dtype, shape, ndim);
  const DTypeInfo& info = Info(dtype);
  PG_CHECK(view_.numel() % info.block_size == 0, "numel not a multiple of the block size");
  size_t bytes = size_t(view_.nbytes());
  size_t alloc = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, alloc ? alloc : 64);
  if (!p) Throw(ErrorCode::kResourceExhausted, "out of host memory allocating {} bytes", bytes);
  storage_.reset(p);
  view_.data = p;
}

void Tensor::Zero() {
  if (storage_) std::memset(view_.data, 0, size_t(view_.nbytes()));
}

}  // namespace pg
