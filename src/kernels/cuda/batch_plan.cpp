#include "kernels/cuda/batch_plan.h"

#include <algorithm>
#include <cstring>

#include "kernels/cuda/common/cuda_check.h"

namespace pg::cuda {

DeviceBatchPlan::~DeviceBatchPlan() {
  if (copied_) cudaEventSynchronize(copied_), cudaEventDestroy(copied_);
  if (device_) cudaFree(device_);
  if (staging_) cudaFreeHost(staging_);
}

void DeviceBatchPlan::Grow(size_t words) {
  if (words <= capacity_) return;
  if (copied_) PG_CUDA_CHECK(cudaEventSynchronize(copied_));
  // The old device buffer may still be read by queued kernels: wait for the device.
  if (device_) PG_CUDA_CHECK(cudaDeviceSynchronize());
  if (device_) PG_CUDA_CHECK(cudaFree(device_));
  if (staging_) PG_CUDA_CHECK(cudaFreeHost(staging_));
  device_ = nullptr, staging_ = nullptr, capacity_ = 0;
  const size_t cap = std::max<size_t>(words + words / 2, 1024);
  PG_CUDA_CHECK(cudaMalloc(&device_, cap * sizeof(int32_t)));
  PG_CUDA_CHECK(cudaMallocHost(&staging_, cap * sizeof(int32_t)));
  capacity_ = cap;
}

void DeviceBatchPlan::Reserve(int max_seqs, int max_tokens, int64_t max_page_table) {
  Grow(size_t(4) * size_t(max_seqs) + size_t(max_tokens) + size_t(max_page_table));
}

void DeviceBatchPlan::Upload(const ops::AttentionBatch& b, cudaStream_t stream) {
  const size_t ns = size_t(b.num_seqs);
  const int num_tokens = b.num_tokens();
  const size_t words = 4 * ns + size_t(num_tokens) + b.page_table.size();
  Grow(words);
  if (!copied_) PG_CUDA_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
  PG_CUDA_CHECK(cudaEventSynchronize(copied_));
  int32_t* h = staging_;
  std::memcpy(h, b.q_start.data(), ns * 4);
  std::memcpy(h + ns, b.q_len.data(), ns * 4);
  std::memcpy(h + 2 * ns, b.kv_len.data(), ns * 4);
  std::memcpy(h + 3 * ns, b.page_start.data(), ns * 4);
  int32_t* token_seq = h + 4 * ns;
  std::fill(token_seq, token_seq + num_tokens, -1);
  for (size_t s = 0; s < ns; ++s)
    for (int32_t i = 0; i < b.q_len[s]; ++i) {
      const int64_t row = int64_t(b.q_start[s]) + i;
      PG_ENSURE(row >= 0 && row < num_tokens, kInvalidArgument,
                "attention batch: seq {} row {} outside [0, {})", s, row, num_tokens);
      token_seq[row] = int32_t(s);
    }
  for (int t = 0; t < num_tokens; ++t)
    PG_ENSURE(token_seq[t] >= 0, kInvalidArgument, "attention batch: row {} has no sequence", t);
  std::memcpy(token_seq + num_tokens, b.page_table.data(), b.page_table.size() * 4);
  PG_CUDA_CHECK(cudaMemcpyAsync(device_, h, words * 4, cudaMemcpyHostToDevice, stream));
  PG_CUDA_CHECK(cudaEventRecord(copied_, stream));
  const int32_t* d = device_;
  view_.q_start = d;
  view_.q_len = d + ns;
  view_.kv_len = d + 2 * ns;
  view_.page_start = d + 3 * ns;
  view_.token_seq = d + 4 * ns;
  view_.page_table = d + 4 * ns + num_tokens;
  view_.num_seqs = b.num_seqs;
  view_.num_tokens = num_tokens;
  view_.page_size = b.page_size;
}

}  // namespace pg::cuda
