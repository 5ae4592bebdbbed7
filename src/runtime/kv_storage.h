// CPU storage for a paged KV cache: for each layer, K and V arrays of
// [num_pages, page_size, num_kv_heads, head_dim] f32. Which pages belong to which request
// is the cache/scheduler's business; this only owns the bytes.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "models/model.h"

namespace pg::runtime {

class KvStorage {
 public:
  KvStorage(const models::KvSpec& spec, int num_pages, int page_size);
  const models::KvCacheLayers& layers() const { return layers_; }
  int num_pages() const { return num_pages_; }
  int page_size() const { return page_size_; }
  int64_t bytes() const;
  // Copies one page (all layers) to/from a host buffer of PageBytes() bytes (host tier).
  int64_t PageBytes() const;
  void SavePage(int page, void* dst) const;
  void LoadPage(int page, const void* src);

 private:
  models::KvSpec spec_;
  int num_pages_, page_size_;
  std::vector<Tensor> k_, v_;
  models::KvCacheLayers layers_;
};

}  // namespace pg::runtime
