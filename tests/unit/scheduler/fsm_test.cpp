#include <gtest/gtest.h>

#include "cache/block_pool.h"
#include "cache/state_slots.h"
#include "scheduler/request_fsm.h"

namespace pg::scheduler {
namespace {

cache::PageList Pages(cache::BlockPool& pool, int n) {
  cache::PageList l;
  EXPECT_TRUE(pool.AllocateInto(n, &l));
  return l;
}

TEST(RequestFsm, FullLifecycleHandsPagesOnAndReturnsEveryPage) {
  cache::BlockPool pool(cache::BlockPoolConfig{23, 4});
  RequestState s = state::Queued{};
  ApplyEvent(s, event::Admit{Pages(pool, 5), {}, 9});
  EXPECT_STREQ(StateName(s), "Prefilling");
  EXPECT_EQ(pool.num_free(), 18);
  ApplyEvent(s, event::Computed{4});
  EXPECT_STREQ(StateName(s), "Prefilling");
  ApplyEvent(s, event::Computed{1});
  EXPECT_STREQ(StateName(s), "Decoding");
  ApplyEvent(s, event::Computed{1});
  EXPECT_STREQ(StateName(s), "Decoding");
  EXPECT_EQ(PagesOf(s)->size(), 5u);
  Released r = ApplyEvent(s, event::Finish{FinishReason::kLength});
  EXPECT_STREQ(StateName(s), "Finished");
  EXPECT_EQ(std::get<state::Finished>(s).reason, FinishReason::kLength);
  EXPECT_EQ(r.pages.size(), 5u);
  EXPECT_EQ(pool.num_free(), 18);  // handed to the caller, not yet returned
  r.pages.Reset();
  EXPECT_EQ(pool.num_free(), 23);  // every page back
}

TEST(RequestFsm, PreemptAndReadmit) {
  cache::BlockPool pool(cache::BlockPoolConfig{10, 4});
  cache::StateSlotPool slots(2);
  RequestState s = state::Queued{};
  ApplyEvent(s, event::Admit{Pages(pool, 3), slots.Allocate(), 1});
  EXPECT_STREQ(StateName(s), "Decoding");
  EXPECT_EQ(slots.num_free(), 1);
  {
    Released r = ApplyEvent(s, event::Preempt{});
    EXPECT_STREQ(StateName(s), "Preempted");
    EXPECT_EQ(r.pages.size(), 3u);
    EXPECT_EQ(r.state_slot.size(), 1u);
  }  // dropped: returned by destruction
  EXPECT_EQ(pool.num_free(), 10);
  EXPECT_EQ(slots.num_free(), 2);
  ApplyEvent(s, event::Admit{Pages(pool, 2), {}, 7});
  EXPECT_STREQ(StateName(s), "Prefilling");
  ApplyEvent(s, event::Finish{FinishReason::kAbort});  // Released dropped at once
  EXPECT_EQ(pool.num_free(), 10);
}

TEST(RequestFsm, IllegalPairsAreRejectedWithAClearErrorAndNoChange) {
  cache::BlockPool pool(cache::BlockPoolConfig{10, 4});
  RequestState queued = state::Queued{};
  try {
    ApplyEvent(queued, event::Computed{3});
    FAIL() << "Computed on Queued must throw";
  } catch (const pg::Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("illegal event Computed in request state Queued"),
              std::string::npos) << e.what();
  }
  EXPECT_THROW(ApplyEvent(queued, event::Preempt{}), pg::Error);
  EXPECT_STREQ(StateName(queued), "Queued");

  RequestState running = state::Queued{};
  ApplyEvent(running, event::Admit{Pages(pool, 2), {}, 1});
  EXPECT_THROW(ApplyEvent(running, event::Admit{Pages(pool, 1), {}, 1}), pg::Error);
  EXPECT_THROW(ApplyEvent(running, event::Computed{2}), pg::Error);  // decode leaves 1
  EXPECT_THROW(ApplyEvent(running, event::Computed{0}), pg::Error);
  EXPECT_EQ(PagesOf(running)->size(), 2u);  // unchanged; the rejected Admit's page came back
  EXPECT_EQ(pool.num_free(), 8);

  RequestState done = state::Finished{FinishReason::kStop};
  EXPECT_THROW(ApplyEvent(done, event::Finish{FinishReason::kAbort}), pg::Error);
  EXPECT_THROW(ApplyEvent(done, event::Admit{Pages(pool, 1), {}, 1}), pg::Error);
  EXPECT_THROW(ApplyEvent(done, event::Computed{1}), pg::Error);
  EXPECT_THROW(ApplyEvent(done, event::Preempt{}), pg::Error);
  RequestState fresh = state::Queued{};
  EXPECT_THROW(ApplyEvent(fresh, event::Admit{Pages(pool, 1), {}, 0}), pg::Error);
  EXPECT_EQ(pool.num_free(), 8);
}

TEST(RequestFsm, QueuedRequestCanBeFinished) {
  RequestState s = state::Queued{};
  Released r = ApplyEvent(s, event::Finish{FinishReason::kAbort});
  EXPECT_TRUE(r.pages.empty());
  EXPECT_STREQ(StateName(s), "Finished");
}

// States that hold KV are move-only.
static_assert(!std::is_copy_constructible_v<state::Prefilling>);
static_assert(!std::is_copy_constructible_v<state::Decoding>);
static_assert(!std::is_copy_constructible_v<state::Preempted>);
static_assert(!std::is_copy_constructible_v<RequestState>);
static_assert(std::is_nothrow_move_constructible_v<cache::PageList>);

}  // namespace
}  // namespace pg::scheduler
