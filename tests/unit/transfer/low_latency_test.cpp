// The low-latency path of the TransferEngine (direct posts from the caller's thread, waiters
// polling the fabric themselves, the progress thread standing off): its contracts hold.
//  * Completion callbacks and ImmCounters expectations never run on a polling waiter's thread
//    (they are handed to the progress thread), and a counter still reports after its callback.
//  * Many threads submitting and waiting at once on both engines lose and duplicate nothing
//    (the echoes go out as injected writes: no completion requested, 8 bytes).
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "comm/transfer/engine.h"
#include "core/status.h"
#include "test_util.h"

namespace pg::comm {
namespace {

using namespace std::chrono_literals;
using test::Cluster;
using test::Config;

class LowLatencyTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LowLatencyTest, CallbacksAndExpectationsNeverRunOnThePollingWaiter) {
  auto config = Config(GetParam());
  config.waiter_spin_us = 2'000'000;  // waiters poll for the whole wait
  std::vector<uint8_t> src(64, 7), dst(64, 0);  // registered: must outlive the engines
  Cluster c(2, config);
  auto smr = c.engines[0]->Register(src.data(), src.size(), false);
  auto dmr = c.engines[1]->Register(dst.data(), dst.size(), true);
  auto remote = c.engines[0]->Import(c.engines[1]->Describe(dmr));
  auto req = c.engines[0]->BuildWrite({&smr, 0, 64, &c.groups[0][1], &remote, 0, {}});
  const auto me = std::this_thread::get_id();
  for (int round = 0; round < 50; ++round) {
    // Sender side: callback + counter; this thread polls engine 0 while it waits.
    std::atomic<int> calls{0};
    std::atomic<bool> callback_on_waiter{false};
    OpCounter counter;
    req.SetImm(54);
    c.engines[0]->Submit(req, {[&](const OpResult& r) {
                                 if (std::this_thread::get_id() == me) callback_on_waiter = true;
                                 calls += r.ok ? 1 : 100;
                               },
                               &counter});
    counter.Wait(1, 5s);
    EXPECT_EQ(calls.load(), 1) << "the counter reported before its callback ran";
    EXPECT_FALSE(callback_on_waiter.load()) << "round " << round;

    // Receiver side: an expectation on 55 fires while this thread polls engine 1 for 56.
    std::atomic<int> fired{0};
    std::atomic<bool> expect_on_waiter{false};
    c.engines[1]->imms().Expect(55, 1, [&] {
      if (std::this_thread::get_id() == me) expect_on_waiter = true;
      ++fired;
    });
    req.SetImm(55);
    c.engines[0]->Submit(req, {});
    req.SetImm(56);
    c.engines[0]->Submit(req, {});
    c.engines[1]->imms().Wait(56, 1, 5s);
    for (int i = 0; i < 5000 && fired == 0; ++i) std::this_thread::sleep_for(1ms);
    EXPECT_EQ(fired.load(), 1);
    EXPECT_FALSE(expect_on_waiter.load()) << "round " << round;
  }
  EXPECT_EQ(c.engines[1]->imms().Available(55), 0);
}

// kThreads ping-pong pairs at once: thread t of engine 0 writes its sequence number with imm
// 100+t and waits for the echo (imm 200+t); thread t of engine 1 waits, checks the number,
// echoes it. Direct posts, polling waiters and the progress threads all race; every number
// must arrive exactly once and in order per pair (each write waits for the previous echo).
TEST_P(LowLatencyTest, ConcurrentSubmittersAndWaitersLoseNothing) {
  constexpr int kThreads = 4, kRounds = 200;
  std::vector<uint64_t> buf0(2 * kThreads, 0), buf1(2 * kThreads, 0);  // outlive the engines
  Cluster c(2, Config(GetParam()));
  auto mr0 = c.engines[0]->Register(buf0.data(), buf0.size() * 8, true);
  auto mr1 = c.engines[1]->Register(buf1.data(), buf1.size() * 8, true);
  auto at1 = c.engines[0]->Import(c.engines[1]->Describe(mr1));
  auto at0 = c.engines[1]->Import(c.engines[0]->Describe(mr0));
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    // Slot t of each buffer is what this pair sends; slot kThreads + t what it received.
    threads.emplace_back([&, t] {
      try {
        auto req = c.engines[0]->BuildWrite({&mr0, uint64_t(t) * 8, 8, &c.groups[0][1], &at1,
                                             uint64_t(kThreads + t) * 8, uint32_t(100 + t)});
        OpCounter sent;
        for (int i = 1; i <= kRounds; ++i) {
          buf0[t] = uint64_t(t) << 32 | uint64_t(i);
          c.engines[0]->Submit(req, {nullptr, &sent});
          c.engines[0]->imms().Wait(uint32_t(200 + t), 1, 10s);
          if (buf0[kThreads + t] != buf0[t]) ++errors;
        }
        sent.Wait(kRounds, 10s);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "sender " << t << ": " << e.what();
        ++errors;
      }
    });
    threads.emplace_back([&, t] {
      try {
        auto req = c.engines[1]->BuildWrite({&mr1, uint64_t(kThreads + t) * 8, 8,
                                             &c.groups[1][0], &at0, uint64_t(kThreads + t) * 8,
                                             uint32_t(200 + t)});
        for (int i = 1; i <= kRounds; ++i) {
          c.engines[1]->imms().Wait(uint32_t(100 + t), 1, 10s);
          if (buf1[kThreads + t] != (uint64_t(t) << 32 | uint64_t(i))) ++errors;
          c.engines[1]->Submit(req, {});
        }
      } catch (const std::exception& e) {
        ADD_FAILURE() << "echo " << t << ": " << e.what();
        ++errors;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  // The path under test really ran (or, with "+proxy", really did not).
  const bool proxy = GetParam().find("+proxy") != std::string::npos;
  for (auto& e : c.engines) {
    if (proxy) {
      EXPECT_EQ(e->num_direct_posts(), 0u);
      EXPECT_EQ(e->num_caller_deliveries(), 0u);
      EXPECT_EQ(e->num_injected(), 0u);
    } else {
      EXPECT_GT(e->num_direct_posts(), 0u);
      EXPECT_GT(e->num_caller_deliveries(), 0u);
    }
  }
  // The echoes (submitted without a completion, 8 bytes) were injected.
  if (!proxy) {
    EXPECT_EQ(c.engines[1]->num_injected(), uint64_t(kThreads) * kRounds);
  }
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(c.engines[0]->imms().Available(uint32_t(200 + t)), 0) << "duplicate echo";
    EXPECT_EQ(c.engines[1]->imms().Available(uint32_t(100 + t)), 0) << "duplicate write";
  }
}

INSTANTIATE_TEST_SUITE_P(Providers, LowLatencyTest,
                         ::testing::Values("tcp;ofi_rxm", "shm", "tcp;ofi_rxm+proxy"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& ch : n) if (ch == ';' || ch == '+') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace pg::comm
