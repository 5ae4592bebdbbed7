#include <gtest/gtest.h>

#include <map>
#include <random>

#include "cache/block_pool.h"

namespace pg::cache {
namespace {

TEST(BlockPool, RejectsBadConfig) {
  EXPECT_THROW(BlockPool(BlockPoolConfig{0, 16}), pg::Error);
  EXPECT_THROW(BlockPool(BlockPoolConfig{10, 0}), pg::Error);
}

TEST(BlockPool, AllocatesEveryPageOnceThenRunsOut) {
  BlockPool pool(BlockPoolConfig{37, 7});
  std::vector<bool> seen(37, false);
  for (int i = 0; i < 37; ++i) {
    auto p = pool.Allocate();
    ASSERT_TRUE(p.has_value());
    ASSERT_FALSE(seen[*p]);
    seen[*p] = true;
    EXPECT_EQ(pool.ref_count(*p), 1);
  }
  EXPECT_FALSE(pool.Allocate().has_value());
  EXPECT_EQ(pool.num_free(), 0);
}

TEST(BlockPool, HandleReturnsPagesOnDestructionAndMove) {
  BlockPool pool(BlockPoolConfig{19, 16});
  {
    PageList a;
    ASSERT_TRUE(pool.AllocateInto(11, &a));
    EXPECT_EQ(pool.num_free(), 8);
    EXPECT_FALSE(pool.AllocateInto(9, &a));  // all or nothing
    EXPECT_EQ(a.size(), 11u);
    PageList b = std::move(a);
    EXPECT_TRUE(a.empty());
    EXPECT_EQ(pool.num_free(), 8);  // moving hands pages on, releases nothing
    b.ReleaseTail(3);
    EXPECT_EQ(pool.num_free(), 11);
    pool.IncRef(b[0]);  // a second holder of page b[0]
    PageList c(&pool);
    c.Adopt(b[0]);
    b.Reset();
    EXPECT_EQ(pool.num_free(), 18);
    EXPECT_EQ(pool.ref_count(c[0]), 1);
  }
  EXPECT_EQ(pool.num_free(), 19);
}

TEST(BlockPool, RandomRefcountsMatchModel) {
  BlockPool pool(BlockPoolConfig{53, 3});
  std::mt19937 rng(7);
  std::map<PageId, int> model;  // page -> holders
  for (int step = 0; step < 20000; ++step) {
    const int op = rng() % 3;
    if (op == 0) {
      auto p = pool.Allocate();
      ASSERT_EQ(p.has_value(), model.size() < 53u);
      if (p) { ASSERT_EQ(model.count(*p), 0u); model[*p] = 1; }
    } else if (!model.empty()) {
      auto it = std::next(model.begin(), rng() % model.size());
      if (op == 1) { pool.IncRef(it->first); ++it->second; }
      else {
        const int left = pool.DecRef(it->first);
        ASSERT_EQ(left, --it->second);
        if (left == 0) { pool.Free(it->first); model.erase(it); }
      }
    }
    ASSERT_EQ(pool.num_free(), 53 - static_cast<int>(model.size()));
  }
  for (auto& [p, n] : model) EXPECT_EQ(pool.ref_count(p), n);
}

TEST(BlockPoolDeathTest, DoubleFreeIsFatal) {
  BlockPool pool(BlockPoolConfig{4, 16});
  const PageId p = *pool.Allocate();
  ASSERT_EQ(pool.DecRef(p), 0);
  pool.Free(p);
  EXPECT_DEATH(pool.DecRef(p), "double free");
  EXPECT_DEATH(pool.Free(p), "freed twice");
  EXPECT_DEATH(pool.IncRef(p), "free page");
}

TEST(BlockPoolDeathTest, OutOfRangeIdIsFatal) {
  BlockPool pool(BlockPoolConfig{4, 16});
  EXPECT_DEATH(pool.ref_count(4), "out of range");
}

}  // namespace
}  // namespace pg::cache
