#include "cache/state_slots.h"

namespace pg::cache {

StateSlotPool::StateSlotPool(int32_t num_slots) {
  PG_ENSURE(num_slots >= 0, kInvalidArgument, "state slot count must be >= 0, got {}", num_slots);
  in_use_.assign(num_slots, 0);
  for (int32_t s = num_slots - 1; s >= 0; --s) free_.push_back(s);
}

StateSlotHandle StateSlotPool::Allocate() {
  StateSlotHandle handle(this);
  if (free_.empty()) return handle;
  const StateSlotId slot = free_.back();
  free_.pop_back();
  in_use_[slot] = 1;
  handle.Adopt(slot);
  return handle;
}

void StateSlotPool::ReleaseIds(std::span<const int32_t> ids) {
  for (StateSlotId slot : ids) {
    PG_CHECK(in_use_.at(slot), "state slot {} released twice", slot);
    in_use_[slot] = 0;
    free_.push_back(slot);
  }
}

CheckpointStore::CheckpointStore(int32_t num_checkpoints)
    : links_(num_checkpoints), lru_(&links_, 1) {
  PG_ENSURE(num_checkpoints >= 0, kInvalidArgument, "checkpoint count must be >= 0, got {}",
            num_checkpoints);
  keys_.assign(num_checkpoints, 0);
  used_.assign(num_checkpoints, 0);
}

std::optional<CheckpointId> CheckpointStore::Find(uint64_t page_key) {
  auto it = by_key_.find(page_key);
  if (it == by_key_.end()) return std::nullopt;
  lru_.Remove(it->second);
  lru_.PushBack(it->second);
  return it->second;
}

std::optional<CheckpointId> CheckpointStore::Reserve(uint64_t page_key) {
  if (auto existing = Find(page_key)) return existing;
  if (keys_.empty()) return std::nullopt;
  CheckpointId id;
  if (next_unused_ < num_checkpoints()) {
    id = next_unused_++;
  } else {
    id = lru_.PopFront();
    by_key_.erase(keys_[id]);
  }
  keys_[id] = page_key;
  used_[id] = 1;
  by_key_[page_key] = id;
  lru_.PushBack(id);
  return id;
}

}  // namespace pg::cache
