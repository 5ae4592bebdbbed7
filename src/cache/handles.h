// Move-only handles over dense integer ids (KV pages, host slots, state slots).
//
// An OwnedIdList holds one reference to each id it contains and gives every one of them back
// to its releaser when it is reset or destroyed, so a state that holds KV either hands its
// pages on (by moving the list) or returns them: leaking or double-returning is not
// expressible. Invariant: the releaser outlives every list that names it.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "core/status.h"

namespace pg::cache {

using PageId = int32_t;      // index of a device KV page in [0, num_device_pages)
using HostSlotId = int32_t;  // index of a host-memory page slot in [0, num_host_pages)
using StateSlotId = int32_t; // index of a recurrent-state slot in [0, num_state_slots)

struct PageTag {};
struct HostSlotTag {};
struct StateSlotTag {};

// Receives ids whose reference a handle gives back. Implemented by the pools.
template <typename Tag>
class IdReleaser {
 public:
  virtual void ReleaseIds(std::span<const int32_t> ids) = 0;

 protected:
  ~IdReleaser() = default;
};

template <typename Tag>
class OwnedIdList {
 public:
  OwnedIdList() = default;
  explicit OwnedIdList(IdReleaser<Tag>* releaser) : releaser_(releaser) {}
  OwnedIdList(const OwnedIdList&) = delete;
  OwnedIdList& operator=(const OwnedIdList&) = delete;
  OwnedIdList(OwnedIdList&& other) noexcept
      : releaser_(other.releaser_), ids_(std::move(other.ids_)) {
    other.ids_.clear();
  }
  OwnedIdList& operator=(OwnedIdList&& other) noexcept {
    if (this != &other) {
      Reset();
      releaser_ = other.releaser_;
      ids_ = std::move(other.ids_);
      other.ids_.clear();
    }
    return *this;
  }
  ~OwnedIdList() { Reset(); }

  // Takes ownership of one reference to `id` (the caller already holds it).
  void Adopt(int32_t id) {
    PG_CHECK(releaser_ != nullptr, "OwnedIdList without releaser cannot adopt id {}", id);
    ids_.push_back(id);
  }
  // Gives back the references of the last `n` ids.
  void ReleaseTail(size_t n) {
    PG_CHECK(n <= ids_.size(), "ReleaseTail({}) on {} ids", n, ids_.size());
    if (n == 0) return;
    releaser_->ReleaseIds(std::span<const int32_t>(ids_).subspan(ids_.size() - n));
    ids_.resize(ids_.size() - n);
  }
  // Gives back every reference; the list is empty afterwards.
  void Reset() {
    if (!ids_.empty()) {
      releaser_->ReleaseIds(ids_);
      ids_.clear();
    }
  }
  // Moves all ids of `other` (same releaser) to the end of this list.
  void Append(OwnedIdList&& other) {
    if (other.ids_.empty()) return;
    if (releaser_ == nullptr) releaser_ = other.releaser_;
    PG_CHECK(releaser_ == other.releaser_, "appending handles of different pools");
    ids_.insert(ids_.end(), other.ids_.begin(), other.ids_.end());
    other.ids_.clear();
  }

  // Gives up the references without releasing them: the caller now holds them.
  std::vector<int32_t> Detach() {
    std::vector<int32_t> out = std::move(ids_);
    ids_.clear();
    return out;
  }

  std::span<const int32_t> ids() const { return ids_; }
  size_t size() const { return ids_.size(); }
  bool empty() const { return ids_.empty(); }
  int32_t operator[](size_t i) const { return ids_[i]; }
  IdReleaser<Tag>* releaser() const { return releaser_; }

 private:
  IdReleaser<Tag>* releaser_ = nullptr;
  std::vector<int32_t> ids_;
};

using PageList = OwnedIdList<PageTag>;
using HostSlotList = OwnedIdList<HostSlotTag>;
using StateSlotHandle = OwnedIdList<StateSlotTag>;  // holds at most one slot

}  // namespace pg::cache
