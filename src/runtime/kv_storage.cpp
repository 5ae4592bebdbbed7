#include "runtime/kv_storage.h"

#include <cstring>

#include "core/status.h"

namespace pg::runtime {

KvStorage::KvStorage(const models::KvSpec& spec, int num_pages, int page_size)
    : spec_(spec), num_pages_(num_pages), page_size_(page_size) {
  PG_ENSURE(num_pages > 0 && page_size > 0, kInvalidArgument,
            "KV cache needs pages > 0 and page size > 0 (got {} x {})", num_pages, page_size);
  for (int l = 0; l < spec.num_layers; ++l) {
    k_.emplace_back(DType::kF32, std::initializer_list<int64_t>{num_pages, page_size, spec.num_kv_heads, spec.head_dim});
    v_.emplace_back(DType::kF32, std::initializer_list<int64_t>{num_pages, page_size, spec.num_kv_heads, spec.head_dim});
    // Touch every page now: memory use is flat from start-up, and a cache that does not
    // fit fails here rather than in the middle of serving.
    k_.back().Zero();
    v_.back().Zero();
    layers_.layers.push_back({.k_cache = k_.back().view(), .v_cache = v_.back().view()});
  }
}

int64_t KvStorage::bytes() const { return int64_t(num_pages_) * PageBytes(); }

int64_t KvStorage::PageBytes() const {
  return int64_t(spec_.num_layers) * 2 * page_size_ * spec_.num_kv_heads * spec_.head_dim * 4;
}

void KvStorage::SavePage(int page, void* dst) const {
  PG_CHECK(page >= 0 && page < num_pages_);
  const int64_t per = int64_t(page_size_) * spec_.num_kv_heads * spec_.head_dim * 4;
  uint8_t* out = static_cast<uint8_t*>(dst);
  for (size_t l = 0; l < k_.size(); ++l) {
    std::memcpy(out, k_[l].data<uint8_t>() + page * per, size_t(per));
    out += per;
    std::memcpy(out, v_[l].data<uint8_t>() + page * per, size_t(per));
    out += per;
  }
}

void KvStorage::LoadPage(int page, const void* src) {
  PG_CHECK(page >= 0 && page < num_pages_);
  const int64_t per = int64_t(page_size_) * spec_.num_kv_heads * spec_.head_dim * 4;
  const uint8_t* in = static_cast<const uint8_t*>(src);
  for (size_t l = 0; l < k_.size(); ++l) {
    std::memcpy(k_[l].data<uint8_t>() + page * per, in, size_t(per));
    in += per;
    std::memcpy(v_[l].data<uint8_t>() + page * per, in, size_t(per));
    in += per;
  }
}

}  // namespace pg::runtime
