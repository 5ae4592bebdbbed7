// Device memory for the runtime: RAII device and pinned buffers, and the one device arena
// that holds KV pages and the activation workspace (no cudaMalloc on the hot path: every
// step's buffers are carved out of the arena at start-up).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace pg::runtime::cuda {

// One cudaMalloc'd block; freed on destruction. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);  // throws kResourceExhausted when the device is full
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Page-locked host memory (fast, asynchronous host<->device copies). Move-only.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& o) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  template <typename T>
  T* as() const { return static_cast<T*>(data_); }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// A bump allocator over one DeviceBuffer. Allocations live as long as the arena (or until
// Reset, which the caller issues only when no kernel uses them any more). Not thread-safe:
// the runtime sizes and carves it at start-up.
class DeviceArena {
 public:
  explicit DeviceArena(size_t capacity_bytes);
  // `bytes` aligned to `align` (a power of two); throws kResourceExhausted when it does not
  // fit, naming the request and what is left.
  void* Allocate(size_t bytes, size_t align = 256);
  void Reset() { used_ = 0; }
  // Frees everything allocated after `mark` (a value of used() taken earlier); the caller
  // guarantees no kernel still uses those allocations (e.g. a KV layout being replaced).
  void ResetTo(size_t mark) { used_ = mark < used_ ? mark : used_; }
  size_t capacity() const { return buffer_.bytes(); }
  size_t used() const { return used_; }
  size_t available() const { return capacity() - used_; }

 private:
  DeviceBuffer buffer_;
  size_t used_ = 0;
};

// How much device memory the arena may take under --gpu-memory-utilization:
//   arena = utilization * total - (memory already in use by others and by this process).
struct DeviceMemoryBudget {
  size_t total_bytes = 0;      // the device's memory
  size_t free_bytes = 0;       // free now
  size_t arena_bytes = 0;      // what the arena may take (0 when the budget is already spent)
};
// Throws kInvalidArgument unless 0 < utilization <= 1.
DeviceMemoryBudget PlanDeviceMemory(double gpu_memory_utilization);

}  // namespace pg::runtime::cuda
