#include "cache/block_pool.h"

namespace pg::cache {

BlockPool::BlockPool(const BlockPoolConfig& config) : config_(config) {
  PG_ENSURE(config.num_pages > 0, kInvalidArgument, "KV pool needs num_pages > 0, got {}",
            config.num_pages);
  PG_ENSURE(config.page_size_tokens > 0, kInvalidArgument,
            "KV page size must be > 0 tokens, got {}", config.page_size_tokens);
  refs_.assign(config.num_pages, 0);
  is_free_.assign(config.num_pages, 1);
  free_.reserve(config.num_pages);
  // Lowest ids on top, so allocation order is 0, 1, 2, ... on a fresh pool.
  for (int32_t p = config.num_pages - 1; p >= 0; --p) free_.push_back(p);
}

std::optional<PageId> BlockPool::Allocate() {
  if (free_.empty()) return std::nullopt;
  const PageId page = free_.back();
  free_.pop_back();
  is_free_[page] = 0;
  refs_[page] = 1;
  return page;
}

bool BlockPool::AllocateInto(int32_t num_pages, PageList* into) {
  PG_CHECK(into->releaser() == nullptr || into->releaser() == this, "foreign handle");
  if (num_pages > num_free()) return false;
  if (into->releaser() == nullptr) *into = PageList(this);
  for (int32_t i = 0; i < num_pages; ++i) into->Adopt(*Allocate());
  return true;
}

void BlockPool::IncRef(PageId page) {
  PG_CHECK(!is_free(page), "IncRef on free page {}", page);
  ++refs_[page];
}

int32_t BlockPool::DecRef(PageId page) {
  PG_CHECK(refs_[Checked(page)] > 0, "double free of page {} (refcount already 0)", page);
  return --refs_[page];
}

void BlockPool::Free(PageId page) {
  PG_CHECK(refs_[Checked(page)] == 0, "Free of page {} with refcount {}", page, refs_[page]);
  PG_CHECK(!is_free_[page], "page {} freed twice", page);
  is_free_[page] = 1;
  free_.push_back(page);
}

void BlockPool::ReleaseIds(std::span<const int32_t> ids) {
  for (PageId page : ids) {
    if (DecRef(page) == 0) Free(page);
  }
}

}  // namespace pg::cache
