#include "cache/host_pool.h"

namespace pg::cache {

HostPool::HostPool(int32_t num_slots) {
  PG_ENSURE(num_slots >= 0, kInvalidArgument, "host pool size must be >= 0, got {}", num_slots);
  is_free_.assign(num_slots, 1);
  free_.reserve(num_slots);
  for (int32_t s = num_slots - 1; s >= 0; --s) free_.push_back(s);
}

std::optional<HostSlotId> HostPool::Allocate() {
  if (free_.empty()) return std::nullopt;
  const HostSlotId slot = free_.back();
  free_.pop_back();
  is_free_[slot] = 0;
  return slot;
}

void HostPool::Free(HostSlotId slot) {
  PG_CHECK(!is_free_[Checked(slot)], "host slot {} freed twice", slot);
  is_free_[slot] = 1;
  free_.push_back(slot);
}

void HostPool::ReleaseIds(std::span<const int32_t> ids) {
  for (HostSlotId s : ids) Free(s);
}

}  // namespace pg::cache
