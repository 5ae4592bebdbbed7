// KV cache manager: the device block pool + a prefix cache over full token pages + a host
// tier. Pure bookkeeping over page ids; the executor moves the bytes, following the CopyOps
// this class appends to the caller's list.
//
// Prefix cache (docs/design/prefix-cache.md): a hash chain. Page i of a token sequence has
// key h_i = HashPage(h_{i-1}, tokens[i*P, (i+1)*P)), h_{-1} = 0, so equal keys mean equal
// whole prefixes. Every cached entry also stores its parent key and its tokens, and a lookup
// compares them, so a hash collision is a miss, never wrong KV (exact reuse).
//
// Page life cycle (P = page_size_tokens):
//   free --Allocate--> referenced (ref >= 1) --Insert--> referenced + cached
//   referenced + cached --last release--> evictable (ref 0) on the plain LRU list, or on the
//     retained list until its session TTL expires (ReleaseRetained)
//   evictable --Match hit--> referenced again
//   evictable --eviction (Allocate when the free list is empty)--> written back to a host
//     slot (D2H copy op) if the host tier is on, then reused.
// Eviction order: free list, then plain LRU (least recent first), then retained pages
// (earliest expiry first). A request releases its pages tail first, so the end of a chain is
// evicted before its beginning.
//
// Copy ops are appended in the order the bookkeeping assumed them; the executor performs
// them in exactly that order, all before the forward pass of the step whose plan carries
// them. Sequential execution is then always correct (a page written back is read before it
// is reused; a host slot loaded from is read before it is overwritten).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "cache/block_pool.h"
#include "cache/host_pool.h"
#include "cache/lru_list.h"

namespace pg::cache {

struct KvCacheConfig {
  int32_t page_size_tokens = 16;
  int32_t num_device_pages = 0;  // from the runtime (GPU memory / CPU RAM), > 0
  int32_t num_host_pages = 0;    // host tier size in pages (a flag); 0 = no host tier
  bool enable_prefix_cache = true;
};

enum class CopyKind : uint8_t { kDeviceToHost, kHostToDevice };

// Copy one whole KV page (all layers) between a device page and a host slot.
struct CopyOp {
  CopyKind kind = CopyKind::kDeviceToHost;
  PageId device_page = -1;
  HostSlotId host_slot = -1;
  bool operator==(const CopyOp&) const = default;
};

// Key of page i given the key of page i-1 (0 for page 0) and the page's P tokens.
uint64_t HashPage(uint64_t parent_key, std::span<const int32_t> page_tokens);
// Appends to `keys` the chain keys of the full pages of `tokens` not yet covered by `keys`
// (keys->size() pages are assumed to be keys of the first pages of `tokens`).
void ExtendPageKeys(std::span<const int32_t> tokens, int32_t page_size_tokens,
                    std::vector<uint64_t>* keys);

struct PrefixMatch {
  PageList pages;               // one reference per hit page, in sequence order
  int32_t num_device_hits = 0;  // pages that were resident on the device
  int32_t num_host_hits = 0;    // pages loaded back from the host tier (H2D ops appended)
  int32_t num_tokens() const { return static_cast<int32_t>(pages.size()); }  // * P
};

struct KvCacheStats {
  int64_t device_hit_pages = 0;
  int64_t host_hit_pages = 0;
  int64_t evicted_pages = 0;       // cached device pages reclaimed
  int64_t written_back_pages = 0;  // of which copied to the host tier
  int64_t host_dropped_pages = 0;  // cached host slots reclaimed
  int64_t retained_evicted_pages = 0;  // evicted while still inside their session TTL
};

class KvCacheManager final : public IdReleaser<PageTag> {
 public:
  // Throws pg::Error(kInvalidArgument) for a bad config.
  explicit KvCacheManager(const KvCacheConfig& config);
  KvCacheManager(const KvCacheManager&) = delete;
  KvCacheManager& operator=(const KvCacheManager&) = delete;

  // Current time (caller's clock, microseconds, non-decreasing). Retained pages whose expiry
  // has passed move to the plain LRU list.
  void SetTime(int64_t now_us);

  // Longest cached prefix among the first `max_pages` keys of `tokens` (keys from
  // ExtendPageKeys). Device hits gain a reference; host hits get a fresh device page and an
  // H2D op (the hit stops early if no device page can be found for a host hit).
  PrefixMatch Match(std::span<const int32_t> tokens, std::span<const uint64_t> keys,
                    int32_t max_pages, std::vector<CopyOp>* copies);

  // Registers pages [begin_page, end_page) of `pages` as holding the KV of the matching
  // full token pages (their KV must already be computed). Pages already cached and keys
  // already resident on another device page are skipped.
  void Insert(std::span<const int32_t> tokens, std::span<const uint64_t> keys,
              const PageList& pages, int32_t begin_page, int32_t end_page);

  // Appends `num_pages` fresh pages (ref 1) to `into`, evicting cached pages as needed.
  // All or nothing: false (and nothing changed) when fewer pages are available.
  bool Allocate(int32_t num_pages, PageList* into, std::vector<CopyOp>* copies);

  // Releases `pages` like destroying the handle, except that cached pages reaching ref 0
  // are retained (evicted only after every plain LRU page) until `expiry_us`.
  void ReleaseRetained(PageList pages, int64_t expiry_us);

  // Swap: copies every page of `pages` to owned host slots (D2H ops) and releases the
  // pages. All or nothing: false when the host tier cannot provide enough slots.
  bool SwapOut(PageList* pages, HostSlotList* out, std::vector<CopyOp>* copies);
  // Loads owned slots back into fresh device pages (H2D ops) and frees the slots.
  bool SwapIn(HostSlotList* slots, PageList* into, std::vector<CopyOp>* copies);
  // Host slots that SwapOut could obtain now.
  int32_t num_swappable_host_slots() const;

  // IdReleaser: drop one reference; cached pages at 0 go to the plain LRU list.
  void ReleaseIds(std::span<const int32_t> ids) override;

  // Pages an Allocate can obtain now: free + evictable.
  int32_t num_available_pages() const {
    return pool_.num_free() + plain_.size() + retained_.size();
  }
  int32_t num_pages() const { return pool_.num_pages(); }
  int32_t num_free_pages() const { return pool_.num_free(); }
  int32_t num_evictable_pages() const { return plain_.size() + retained_.size(); }
  int32_t num_cached_device_pages() const { return num_cached_device_; }
  int32_t num_cached_host_slots() const { return host_lru_.size(); }
  int32_t page_size_tokens() const { return config_.page_size_tokens; }
  int32_t ref_count(PageId page) const { return pool_.ref_count(page); }
  bool is_cached(PageId page) const { return device_meta_[page].cached; }
  bool has_host_tier() const { return host_.num_slots() > 0; }
  const KvCacheStats& stats() const { return stats_; }

  // Verifies every internal invariant (O(pages + slots)); fatal on a violation. For tests.
  void CheckInvariants() const;

 private:
  struct Node {                // one prefix key
    PageId device_page = -1;   // resident copy, or -1
    HostSlotId host_slot = -1; // host copy, or -1
  };
  struct PageMeta {            // content description of a cached device page / host slot
    uint64_t key = 0;
    uint64_t parent_key = 0;
    bool cached = false;
    int64_t retain_until_us = 0;
  };

  bool Verify(const PageMeta& meta, const int32_t* stored, uint64_t parent,
              std::span<const int32_t> page_tokens) const;
  PageId AllocateOne(std::vector<CopyOp>* copies);  // fatal if nothing available
  void EvictDevicePage(PageId page, std::vector<CopyOp>* copies);
  std::optional<HostSlotId> ObtainHostSlot();  // free, or reclaims the LRU cached slot
  void Acquire(PageId page);                   // +1 ref, off the LRU lists
  void ReleaseOne(PageId page, bool retain, int64_t expiry_us);
  int32_t* device_tokens(PageId p) { return &device_tokens_[size_t(p) * config_.page_size_tokens]; }
  int32_t* host_tokens(HostSlotId s) { return &host_tokens_[size_t(s) * config_.page_size_tokens]; }
  const int32_t* device_tokens(PageId p) const { return &device_tokens_[size_t(p) * config_.page_size_tokens]; }
  const int32_t* host_tokens(HostSlotId s) const { return &host_tokens_[size_t(s) * config_.page_size_tokens]; }

  KvCacheConfig config_;
  BlockPool pool_;
  HostPool host_;
  int64_t now_us_ = 0;
  std::unordered_map<uint64_t, Node> index_;
  std::vector<PageMeta> device_meta_;  // [num_device_pages]
  std::vector<int32_t> device_tokens_; // [num_device_pages * P]
  std::vector<PageMeta> host_meta_;    // [num_host_pages]
  std::vector<int32_t> host_tokens_;   // [num_host_pages * P]
  LruLinks device_links_;
  LruList plain_;     // cached, ref 0, plain LRU
  LruList retained_;  // cached, ref 0, session-retained; ordered by release time
  LruLinks host_links_;
  LruList host_lru_;  // cached host slots
  int32_t num_cached_device_ = 0;
  KvCacheStats stats_;
};

}  // namespace pg::cache
