#include <gtest/gtest.h>

#include <set>

#include "cache/state_slots.h"

namespace pg::cache {
namespace {

TEST(StateSlots, EachRunningRequestGetsADistinctSlotAndReturnsIt) {
  StateSlotPool pool(5);
  std::vector<StateSlotHandle> held;
  std::set<StateSlotId> ids;
  for (int i = 0; i < 5; ++i) {
    held.push_back(pool.Allocate());
    ASSERT_EQ(held.back().size(), 1u);
    ids.insert(held.back()[0]);
  }
  EXPECT_EQ(ids.size(), 5u);
  EXPECT_TRUE(pool.Allocate().empty());  // exhausted: empty handle, not an error
  StateSlotHandle moved = std::move(held[2]);
  EXPECT_EQ(pool.num_free(), 0);
  held.clear();
  EXPECT_EQ(pool.num_free(), 4);  // the moved-from handle held nothing
  moved.Reset();
  EXPECT_EQ(pool.num_free(), 5);
}

TEST(StateSlotsDeathTest, DoubleReleaseIsFatal) {
  StateSlotPool pool(2);
  const int32_t id = 1;
  EXPECT_DEATH(pool.ReleaseIds(std::span<const int32_t>(&id, 1)), "released twice");
}

TEST(Checkpoints, FindReserveAndLruReplacement) {
  CheckpointStore store(3);
  EXPECT_FALSE(store.Find(11).has_value());
  const auto a = store.Reserve(11), b = store.Reserve(22), c = store.Reserve(33);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(std::set<CheckpointId>({*a, *b, *c}).size(), 3u);
  EXPECT_EQ(store.Reserve(22), b);  // existing key: same checkpoint
  EXPECT_EQ(store.Find(11), a);     // 11 becomes most recent; LRU is now 33
  const auto d = store.Reserve(44);
  EXPECT_EQ(d, c);                  // 33's checkpoint reused
  EXPECT_FALSE(store.Contains(33));
  EXPECT_TRUE(store.Contains(11) && store.Contains(22) && store.Contains(44));
  CheckpointStore none(0);
  EXPECT_FALSE(none.Reserve(1).has_value());
}

}  // namespace
}  // namespace pg::cache
