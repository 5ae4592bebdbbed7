#include "runtime/cuda/device_memory.h"

#include <utility>

#include "kernels/cuda/common/cuda_check.h"

namespace pg::runtime::cuda {

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes) PG_CUDA_CHECK(cudaMalloc(&data_, bytes));
}
DeviceBuffer::~DeviceBuffer() {
  if (data_) cudaFree(data_);
}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (data_) cudaFree(data_);
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes) PG_CUDA_CHECK(cudaMallocHost(&data_, bytes));
}
PinnedBuffer::~PinnedBuffer() {
  if (data_) cudaFreeHost(data_);
}
PinnedBuffer::PinnedBuffer(PinnedBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    if (data_) cudaFreeHost(data_);
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

DeviceArena::DeviceArena(size_t capacity_bytes) : buffer_(capacity_bytes) {}

void* DeviceArena::Allocate(size_t bytes, size_t align) {
  PG_CHECK(align && (align & (align - 1)) == 0, "alignment {} is not a power of two", align);
  const size_t start = (used_ + align - 1) & ~(align - 1);
  PG_ENSURE(start <= capacity() && bytes <= capacity() - start, kResourceExhausted,
            "device arena: {} bytes requested, {} of {} left", bytes, capacity() - used_,
            capacity());
  used_ = start + bytes;
  return static_cast<char*>(buffer_.data()) + start;
}

DeviceMemoryBudget PlanDeviceMemory(double utilization) {
  PG_ENSURE(utilization > 0.0 && utilization <= 1.0, kInvalidArgument,
            "--gpu-memory-utilization {} must be in (0, 1]", utilization);
  DeviceMemoryBudget b;
  PG_CUDA_CHECK(cudaMemGetInfo(&b.free_bytes, &b.total_bytes));
  const double allowed = utilization * double(b.total_bytes);
  const double in_use = double(b.total_bytes - b.free_bytes);
  b.arena_bytes = allowed > in_use ? size_t(allowed - in_use) : 0;
  if (b.arena_bytes > b.free_bytes) b.arena_bytes = b.free_bytes;
  return b;
}

}  // namespace pg::runtime::cuda
