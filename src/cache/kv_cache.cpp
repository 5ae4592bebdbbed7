#include "cache/kv_cache.h"

#include <algorithm>
#include <cstring>

namespace pg::cache {
namespace {

uint64_t Mix64(uint64_t x) {  // splitmix64 finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace

uint64_t HashPage(uint64_t parent_key, std::span<const int32_t> page_tokens) {
  uint64_t h = Mix64(parent_key ^ 0x9e3779b97f4a7c15ULL);
  for (int32_t t : page_tokens) h = Mix64(h ^ (static_cast<uint32_t>(t) + 0x632be59bd9b4e019ULL));
  return h == 0 ? 1 : h;  // 0 is reserved as "no parent"
}

void ExtendPageKeys(std::span<const int32_t> tokens, int32_t page_size_tokens,
                    std::vector<uint64_t>* keys) {
  const size_t num_full = tokens.size() / page_size_tokens;
  PG_CHECK(keys->size() <= num_full, "{} keys for {} full pages", keys->size(), num_full);
  for (size_t i = keys->size(); i < num_full; ++i) {
    const uint64_t parent = i == 0 ? 0 : (*keys)[i - 1];
    keys->push_back(HashPage(parent, tokens.subspan(i * page_size_tokens, page_size_tokens)));
  }
}

KvCacheManager::KvCacheManager(const KvCacheConfig& config)
    : config_(config),
      pool_(BlockPoolConfig{config.num_device_pages, config.page_size_tokens}),
      host_(config.num_host_pages),
      device_links_(config.num_device_pages),
      plain_(&device_links_, 1),
      retained_(&device_links_, 2),
      host_links_(config.num_host_pages),
      host_lru_(&host_links_, 1) {
  // Reserved up front: rehashing a million-entry index would stall one step for ~10 ms.
  index_.reserve(size_t(config.num_device_pages) + size_t(config.num_host_pages));
  device_meta_.resize(config.num_device_pages);
  device_tokens_.resize(size_t(config.num_device_pages) * config.page_size_tokens);
  host_meta_.resize(config.num_host_pages);
  host_tokens_.resize(size_t(config.num_host_pages) * config.page_size_tokens);
}

void KvCacheManager::SetTime(int64_t now_us) {
  now_us_ = std::max(now_us_, now_us);
  // Retained pages were pushed in release order; expire the run at the front and put it at
  // the front of the plain list keeping its order (tails of chains stay ahead of heads).
  std::vector<PageId> expired;
  while (!retained_.empty() && device_meta_[retained_.front()].retain_until_us <= now_us_) {
    expired.push_back(retained_.PopFront());
  }
  for (auto it = expired.rbegin(); it != expired.rend(); ++it) plain_.PushFront(*it);
}

bool KvCacheManager::Verify(const PageMeta& meta, const int32_t* stored, uint64_t parent,
                            std::span<const int32_t> page_tokens) const {
  return meta.parent_key == parent &&
         std::equal(page_tokens.begin(), page_tokens.end(), stored);
}

void KvCacheManager::Acquire(PageId page) {
  if (pool_.ref_count(page) == 0) {
    if (plain_.Contains(page)) plain_.Remove(page);
    else retained_.Remove(page);
  }
  pool_.IncRef(page);
}

PrefixMatch KvCacheManager::Match(std::span<const int32_t> tokens,
                                  std::span<const uint64_t> keys, int32_t max_pages,
                                  std::vector<CopyOp>* copies) {
  PrefixMatch match;
  match.pages = PageList(this);
  if (!config_.enable_prefix_cache) return match;
  const int32_t P = config_.page_size_tokens;
  const int32_t n = std::min<int32_t>(max_pages, static_cast<int32_t>(keys.size()));
  PG_CHECK(static_cast<size_t>(n) * P <= tokens.size(), "keys beyond tokens");

  // Pass 1: extent of the chain. hit[i] = device page (>= 0) or -(host slot) - 2.
  std::vector<int32_t> hit;
  for (int32_t i = 0; i < n; ++i) {
    auto it = index_.find(keys[i]);
    if (it == index_.end()) break;
    const uint64_t parent = i == 0 ? 0 : keys[i - 1];
    const auto page_tokens = tokens.subspan(size_t(i) * P, P);
    const Node& node = it->second;
    if (node.device_page >= 0) {
      if (!Verify(device_meta_[node.device_page], device_tokens(node.device_page), parent,
                  page_tokens)) {
        break;  // 64-bit key collision: a miss, never wrong KV
      }
      hit.push_back(node.device_page);
    } else if (node.host_slot >= 0 &&
               Verify(host_meta_[node.host_slot], host_tokens(node.host_slot), parent, page_tokens)) {
      hit.push_back(-node.host_slot - 2);
    } else {
      break;
    }
  }
  // Pass 2: pin everything found, so evictions made while loading host hits cannot take it.
  for (int32_t h : hit) {
    if (h >= 0) Acquire(h);
    else host_lru_.Remove(-h - 2);
  }
  // Pass 3: load host hits in order; on failure truncate the chain there.
  size_t end = hit.size();
  for (size_t i = 0; i < hit.size(); ++i) {
    if (hit[i] >= 0) continue;
    const HostSlotId slot = -hit[i] - 2;
    if (num_available_pages() == 0) {
      end = i;
      break;
    }
    const PageId page = AllocateOne(copies);
    copies->push_back(CopyOp{CopyKind::kHostToDevice, page, slot});
    PageMeta& meta = device_meta_[page];
    meta = host_meta_[slot];
    meta.cached = true;
    std::memcpy(device_tokens(page), host_tokens(slot), sizeof(int32_t) * P);
    index_[meta.key].device_page = page;
    ++num_cached_device_;
    hit[i] = page;
    host_lru_.PushBack(slot);
    ++match.num_host_hits;
  }
  for (size_t i = end; i < hit.size(); ++i) {  // undo pins past the truncation point
    if (hit[i] >= 0) ReleaseOne(hit[i], false, 0);
    else host_lru_.PushBack(-hit[i] - 2);
  }
  for (size_t i = 0; i < end; ++i) match.pages.Adopt(hit[i]);
  match.num_device_hits = static_cast<int32_t>(end) - match.num_host_hits;
  stats_.device_hit_pages += match.num_device_hits;
  stats_.host_hit_pages += match.num_host_hits;
  return match;
}

void KvCacheManager::Insert(std::span<const int32_t> tokens, std::span<const uint64_t> keys,
                            const PageList& pages, int32_t begin_page, int32_t end_page) {
  if (!config_.enable_prefix_cache) return;
  const int32_t P = config_.page_size_tokens;
  PG_CHECK(end_page <= static_cast<int32_t>(keys.size()) &&
               end_page <= static_cast<int32_t>(pages.size()) &&
               size_t(end_page) * P <= tokens.size(),
           "Insert range [{}, {}) beyond keys/pages/tokens", begin_page, end_page);
  for (int32_t i = begin_page; i < end_page; ++i) {
    const PageId page = pages[i];
    PG_CHECK(pool_.ref_count(page) > 0, "Insert of unreferenced page {}", page);
    if (device_meta_[page].cached) continue;
    const uint64_t parent = i == 0 ? 0 : keys[i - 1];
    const auto page_tokens = tokens.subspan(size_t(i) * P, P);
    Node& node = index_[keys[i]];
    if (node.device_page >= 0) continue;  // same prefix already resident elsewhere
    if (node.host_slot >= 0 &&
        !Verify(host_meta_[node.host_slot], host_tokens(node.host_slot), parent, page_tokens)) {
      continue;  // 64-bit key collision with different content: do not cache
    }
    node.device_page = page;
    PageMeta& meta = device_meta_[page];
    meta = PageMeta{keys[i], parent, true, 0};
    std::copy(page_tokens.begin(), page_tokens.end(), device_tokens(page));
    ++num_cached_device_;
  }
}

std::optional<HostSlotId> KvCacheManager::ObtainHostSlot() {
  if (auto slot = host_.Allocate()) return slot;
  if (host_lru_.empty()) return std::nullopt;
  const HostSlotId slot = host_lru_.PopFront();
  auto it = index_.find(host_meta_[slot].key);
  PG_CHECK(it != index_.end() && it->second.host_slot == slot, "host slot {} not indexed", slot);
  it->second.host_slot = -1;
  if (it->second.device_page < 0) index_.erase(it);
  host_meta_[slot].cached = false;
  ++stats_.host_dropped_pages;
  return slot;
}

void KvCacheManager::EvictDevicePage(PageId page, std::vector<CopyOp>* copies) {
  PageMeta& meta = device_meta_[page];
  PG_CHECK(meta.cached && pool_.ref_count(page) == 0, "evicting page {} not evictable", page);
  if (meta.retain_until_us > now_us_) ++stats_.retained_evicted_pages;
  auto it = index_.find(meta.key);
  PG_CHECK(it != index_.end() && it->second.device_page == page, "page {} not indexed", page);
  it->second.device_page = -1;
  if (has_host_tier() && it->second.host_slot < 0) {
    if (auto slot = ObtainHostSlot()) {
      // ObtainHostSlot may erase other keys but never this one (its device copy was set).
      it = index_.find(meta.key);
      copies->push_back(CopyOp{CopyKind::kDeviceToHost, page, *slot});
      host_meta_[*slot] = PageMeta{meta.key, meta.parent_key, true, 0};
      std::memcpy(host_tokens(*slot), device_tokens(page), sizeof(int32_t) * config_.page_size_tokens);
      it->second.host_slot = *slot;
      host_lru_.PushBack(*slot);
      ++stats_.written_back_pages;
    }
  }
  if (it->second.device_page < 0 && it->second.host_slot < 0) index_.erase(it);
  meta = PageMeta{};
  --num_cached_device_;
  ++stats_.evicted_pages;
}

PageId KvCacheManager::AllocateOne(std::vector<CopyOp>* copies) {
  if (auto page = pool_.Allocate()) return *page;
  PG_CHECK(!plain_.empty() || !retained_.empty(), "AllocateOne with nothing available");
  const PageId page = !plain_.empty() ? plain_.PopFront() : retained_.PopFront();
  EvictDevicePage(page, copies);
  pool_.IncRef(page);
  return page;
}

bool KvCacheManager::Allocate(int32_t num_pages, PageList* into, std::vector<CopyOp>* copies) {
  PG_CHECK(into->releaser() == nullptr || into->releaser() == this, "foreign page handle");
  if (num_pages > num_available_pages()) return false;
  if (into->releaser() == nullptr) *into = PageList(this);
  for (int32_t i = 0; i < num_pages; ++i) into->Adopt(AllocateOne(copies));
  return true;
}

void KvCacheManager::ReleaseOne(PageId page, bool retain, int64_t expiry_us) {
  if (pool_.DecRef(page) > 0) return;
  PageMeta& meta = device_meta_[page];
  if (!meta.cached) {
    pool_.Free(page);
  } else if (retain && expiry_us > now_us_) {
    meta.retain_until_us = expiry_us;
    retained_.PushBack(page);
  } else {
    meta.retain_until_us = 0;
    plain_.PushBack(page);
  }
}

void KvCacheManager::ReleaseIds(std::span<const int32_t> ids) {
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) ReleaseOne(*it, false, 0);
}

void KvCacheManager::ReleaseRetained(PageList pages, int64_t expiry_us) {
  if (pages.empty()) return;
  PG_CHECK(pages.releaser() == this, "foreign page handle");
  const std::vector<PageId> ids = pages.Detach();
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) ReleaseOne(*it, true, expiry_us);
}

int32_t KvCacheManager::num_swappable_host_slots() const {
  return host_.num_free() + host_lru_.size();
}

bool KvCacheManager::SwapOut(PageList* pages, HostSlotList* out, std::vector<CopyOp>* copies) {
  PG_CHECK(out->empty(), "SwapOut into a non-empty slot list");
  if (static_cast<int32_t>(pages->size()) > num_swappable_host_slots()) return false;
  *out = HostSlotList(&host_);
  for (PageId page : pages->ids()) {
    const HostSlotId slot = *ObtainHostSlot();
    copies->push_back(CopyOp{CopyKind::kDeviceToHost, page, slot});
    out->Adopt(slot);
  }
  pages->Reset();
  return true;
}

bool KvCacheManager::SwapIn(HostSlotList* slots, PageList* into, std::vector<CopyOp>* copies) {
  PG_CHECK(into->empty(), "SwapIn into a non-empty page list");
  if (static_cast<int32_t>(slots->size()) > num_available_pages()) return false;
  *into = PageList(this);
  for (HostSlotId slot : slots->ids()) {
    const PageId page = AllocateOne(copies);
    copies->push_back(CopyOp{CopyKind::kHostToDevice, page, slot});
    into->Adopt(page);
  }
  slots->Reset();
  return true;
}

void KvCacheManager::CheckInvariants() const {
  int32_t cached = 0;
  for (PageId p = 0; p < pool_.num_pages(); ++p) {
    const PageMeta& meta = device_meta_[p];
    const bool on_lru = plain_.Contains(p) || retained_.Contains(p);
    const int32_t refs = pool_.ref_count(p);
    if (pool_.is_free(p)) {
      PG_CHECK(refs == 0 && !meta.cached && !on_lru, "free page {} in use", p);
      continue;
    }
    PG_CHECK(on_lru == (refs == 0), "page {}: refs {} but on_lru {}", p, refs, on_lru);
    PG_CHECK(refs > 0 || meta.cached, "unreferenced uncached page {} not free", p);
    if (meta.cached) {
      ++cached;
      auto it = index_.find(meta.key);
      PG_CHECK(it != index_.end() && it->second.device_page == p, "cached page {} unindexed", p);
    }
  }
  PG_CHECK(cached == num_cached_device_, "cached count {} != {}", cached, num_cached_device_);
  int32_t host_cached = 0;
  for (HostSlotId s = 0; s < host_.num_slots(); ++s) {
    if (!host_lru_.Contains(s)) continue;
    ++host_cached;
    auto it = index_.find(host_meta_[s].key);
    PG_CHECK(!host_.is_free(s) && it != index_.end() && it->second.host_slot == s,
             "cached host slot {} unindexed", s);
  }
  for (const auto& [key, node] : index_) {
    PG_CHECK(node.device_page >= 0 || node.host_slot >= 0, "empty index node");
    if (node.device_page >= 0) PG_CHECK(device_meta_[node.device_page].key == key, "bad node");
    if (node.host_slot >= 0) PG_CHECK(host_lru_.Contains(node.host_slot), "bad host node");
  }
  PG_CHECK(host_cached == host_lru_.size(), "host lru count");
}

}  // namespace pg::cache
