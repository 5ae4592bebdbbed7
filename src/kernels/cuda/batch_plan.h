// DeviceBatchPlan: an ops::AttentionBatch copied to the device once per batch ("plan once per
// batch, run per layer", DESIGN.md example 4). Every layer's KvWrite and Attention read it
// through AttentionBatch::device; CUDA graphs read it at a fixed address, so the runtime
// Reserve()s the largest batch first and Upload()s each step's batch before replaying.
//
// Layout of the one device buffer (int32): q_start, q_len, kv_len, page_start [num_seqs each],
// token_seq [num_tokens], page_table [page_table.size()].
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/common/device_params.h"
#include "kernels/ops.h"

namespace pg::cuda {

class DeviceBatchPlan {
 public:
  DeviceBatchPlan() = default;
  ~DeviceBatchPlan();
  DeviceBatchPlan(const DeviceBatchPlan&) = delete;
  DeviceBatchPlan& operator=(const DeviceBatchPlan&) = delete;

  // Capacity for batches up to these sizes; never reallocates below them.
  void Reserve(int max_seqs, int max_tokens, int64_t max_page_table);
  // Packs `batch` into pinned staging and copies it to the device on `stream`. Waits for the
  // previous Upload's copy first (the staging is reused). Throws kInvalidArgument for an
  // inconsistent batch (a token outside every sequence).
  void Upload(const ops::AttentionBatch& batch, cudaStream_t stream);
  const DeviceBatchView& view() const { return view_; }

 private:
  void Grow(size_t words);

  int32_t* device_ = nullptr;   // capacity_ words
  int32_t* staging_ = nullptr;  // pinned host, capacity_ words
  size_t capacity_ = 0;
  cudaEvent_t copied_ = nullptr;  // the last upload's copy
  DeviceBatchView view_;
};

}  // namespace pg::cuda
