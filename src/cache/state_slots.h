// Recurrent-state storage for linear-attention layers (KDA and friends), whose per-request
// state has a fixed size whatever the context length.
//
//  * StateSlotPool: one slot per running request (the live recurrent state of all linear
//    layers). A running request holds its slot in a move-only StateSlotHandle.
//  * CheckpointStore: copies of a request's state taken at page boundaries, keyed by the
//    prefix-cache key of the page that ends there (see kv_cache.h). A prefix hit on a hybrid
//    model is only usable up to a boundary that has a checkpoint: the attention layers reuse
//    the KV pages, the linear layers restart from the checkpoint. LRU over a fixed count.
//
// Ids only: the runtime owns the memory and performs the copies the scheduler plans
// (restore: checkpoint -> slot before the step; save: slot -> checkpoint when the forward
// pass crosses the boundary).
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "cache/handles.h"
#include "cache/lru_list.h"

namespace pg::cache {

using CheckpointId = int32_t;  // index in [0, num_checkpoints)

class StateSlotPool final : public IdReleaser<StateSlotTag> {
 public:
  explicit StateSlotPool(int32_t num_slots);
  // A handle holding one free slot, or an empty handle when none is free.
  StateSlotHandle Allocate();
  void ReleaseIds(std::span<const int32_t> ids) override;
  int32_t num_slots() const { return static_cast<int32_t>(in_use_.size()); }
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }
  bool in_use(StateSlotId slot) const { return in_use_.at(slot) != 0; }

 private:
  std::vector<uint8_t> in_use_;
  std::vector<StateSlotId> free_;
};

class CheckpointStore {
 public:
  explicit CheckpointStore(int32_t num_checkpoints);
  // The checkpoint taken after the page with `page_key`, marked most recently used.
  std::optional<CheckpointId> Find(uint64_t page_key);
  bool Contains(uint64_t page_key) const { return by_key_.count(page_key) != 0; }
  // A checkpoint to write the state after page `page_key` into: the existing one, else a
  // fresh or least recently used one (whose old key is forgotten). nullopt if capacity 0.
  std::optional<CheckpointId> Reserve(uint64_t page_key);
  int32_t num_checkpoints() const { return static_cast<int32_t>(keys_.size()); }
  int32_t num_used() const { return static_cast<int32_t>(by_key_.size()); }

 private:
  std::vector<uint64_t> keys_;  // [num_checkpoints], valid when used_[i]
  std::vector<uint8_t> used_;
  std::unordered_map<uint64_t, CheckpointId> by_key_;
  LruLinks links_;
  LruList lru_;
  int32_t next_unused_ = 0;
};

}  // namespace pg::cache
