// Intrusive doubly linked list over dense ids [0, capacity): O(1) push, remove, pop, with no
// allocation after construction. Front = least recently used. An id is in at most one list
// of a given LruLinks set at a time (the caller tracks which).
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace pg::cache {

// Storage of prev/next links shared by several lists over the same id space.
class LruLinks {
 public:
  explicit LruLinks(int32_t capacity)
      : prev_(capacity, kNone), next_(capacity, kNone), in_list_(capacity, 0) {}
  static constexpr int32_t kNone = -1;

 private:
  friend class LruList;
  std::vector<int32_t> prev_, next_;
  std::vector<uint8_t> in_list_;  // 0 = none, else list tag
};

class LruList {
 public:
  // `tag` (1..255) identifies this list among those sharing `links`.
  LruList(LruLinks* links, uint8_t tag) : links_(links), tag_(tag) {}

  void PushBack(int32_t id) {
    PG_CHECK(links_->in_list_[id] == 0, "id {} already in list {}", id, links_->in_list_[id]);
    links_->in_list_[id] = tag_;
    links_->prev_[id] = tail_;
    links_->next_[id] = LruLinks::kNone;
    if (tail_ != LruLinks::kNone) links_->next_[tail_] = id; else head_ = id;
    tail_ = id;
    ++size_;
  }
  void PushFront(int32_t id) {
    PG_CHECK(links_->in_list_[id] == 0, "id {} already in list {}", id, links_->in_list_[id]);
    links_->in_list_[id] = tag_;
    links_->next_[id] = head_;
    links_->prev_[id] = LruLinks::kNone;
    if (head_ != LruLinks::kNone) links_->prev_[head_] = id; else tail_ = id;
    head_ = id;
    ++size_;
  }
  void Remove(int32_t id) {
    PG_CHECK(links_->in_list_[id] == tag_, "id {} not in list {}", id, tag_);
    const int32_t p = links_->prev_[id], n = links_->next_[id];
    if (p != LruLinks::kNone) links_->next_[p] = n; else head_ = n;
    if (n != LruLinks::kNone) links_->prev_[n] = p; else tail_ = p;
    links_->in_list_[id] = 0;
    --size_;
  }
  int32_t PopFront() {
    const int32_t id = head_;
    PG_CHECK(id != LruLinks::kNone, "PopFront on empty list {}", tag_);
    Remove(id);
    return id;
  }
  bool Contains(int32_t id) const { return links_->in_list_[id] == tag_; }
  int32_t front() const { return head_; }
  int32_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  LruLinks* links_;
  uint8_t tag_;
  int32_t head_ = LruLinks::kNone, tail_ = LruLinks::kNone;
  int32_t size_ = 0;
};

}  // namespace pg::cache
