// Host-memory page slots (pinned CPU memory owned by the runtime; here: ids only). A slot is
// free, owned by exactly one HostSlotList (a swapped-out request), or holds a cached prefix
// page (then the KvCacheManager tracks it on its host LRU list).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "cache/handles.h"

namespace pg::cache {

class HostPool final : public IdReleaser<HostSlotTag> {
 public:
  explicit HostPool(int32_t num_slots);

  std::optional<HostSlotId> Allocate();  // from the free list; nullopt if empty
  void Free(HostSlotId slot);            // fatal if already free
  // IdReleaser: slots of a HostSlotList go straight back to the free list.
  void ReleaseIds(std::span<const int32_t> ids) override;

  bool is_free(HostSlotId slot) const { return is_free_[Checked(slot)] != 0; }
  int32_t num_slots() const { return static_cast<int32_t>(is_free_.size()); }
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }

 private:
  size_t Checked(HostSlotId slot) const {
    PG_CHECK(slot >= 0 && slot < num_slots(), "host slot {} out of range", slot);
    return static_cast<size_t>(slot);
  }
  std::vector<uint8_t> is_free_;
  std::vector<HostSlotId> free_;
};

}  // namespace pg::cache
