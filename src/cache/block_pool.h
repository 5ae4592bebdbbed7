// Paged KV block pool: `num_pages` device pages of `page_size_tokens` tokens each (the
// runtime sizes it from GPU memory or CPU RAM). Pages are reference counted; a page with
// count 0 is either on the free list or owned by a cache layered above (the prefix cache
// keeps unreferenced cached pages on its LRU lists). No CUDA, no memory: ids only.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "cache/handles.h"

namespace pg::cache {

struct BlockPoolConfig {
  int32_t num_pages = 0;         // capacity from the runtime, > 0
  int32_t page_size_tokens = 16; // tokens per page, > 0
};

class BlockPool final : public IdReleaser<PageTag> {
 public:
  // Throws pg::Error(kInvalidArgument) for a non-positive size.
  explicit BlockPool(const BlockPoolConfig& config);

  // A page with refcount 1 from the free list, or nullopt when the free list is empty.
  std::optional<PageId> Allocate();
  // Allocates into a handle whose references come back to this pool on release.
  bool AllocateInto(int32_t num_pages, PageList* into);
  // Adds a reference. The page must not be on the free list (fatal otherwise).
  void IncRef(PageId page);
  // Drops a reference; returns the new count. Fatal on a page with count 0 (double free).
  int32_t DecRef(PageId page);
  // Puts a page with count 0 on the free list. Fatal if referenced or already free.
  void Free(PageId page);

  // IdReleaser: DecRef, and Free at zero (handles made by AllocateInto).
  void ReleaseIds(std::span<const int32_t> ids) override;

  int32_t ref_count(PageId page) const { return refs_[Checked(page)]; }
  bool is_free(PageId page) const { return is_free_[Checked(page)] != 0; }
  int32_t num_pages() const { return config_.num_pages; }
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t page_size_tokens() const { return config_.page_size_tokens; }

 private:
  size_t Checked(PageId page) const {
    PG_CHECK(page >= 0 && page < config_.num_pages, "page id {} out of range [0, {})", page,
             config_.num_pages);
    return static_cast<size_t>(page);
  }

  BlockPoolConfig config_;
  std::vector<int32_t> refs_;     // [num_pages]
  std::vector<uint8_t> is_free_;  // [num_pages]
  std::vector<PageId> free_;      // stack; top is reused first
};

}  // namespace pg::cache
