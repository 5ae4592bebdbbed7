#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <chrono>
#include <numeric>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

namespace pg {
namespace {

TEST(ThreadPool, CoversRangeExactlyOnce) {
  ThreadPool pool(4);
  for (int64_t n : {1, 3, 17, 1000, 12345}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.ParallelFor(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
}

TEST(ThreadPool, NestedCallRunsSerially) {
  ThreadPool pool(3);
  std::atomic<int64_t> sum{0};
  pool.ParallelFor(8, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      pool.ParallelFor(10, [&](int64_t b2, int64_t e2) { sum += e2 - b2; });
  });
  EXPECT_EQ(sum.load(), 80);
}

// Thousands of back-to-back tiny loops (the decode pattern): every element covered once per
// loop, chunk sums exact, no lost or repeated chunk when workers race into the next job.
TEST(ThreadPool, BackToBackSmallLoops) {
  ThreadPool pool(2);
  std::vector<int64_t> data(97);
  std::iota(data.begin(), data.end(), 1);
  for (int it = 0; it < 20000; ++it) {
    const int64_t n = 1 + it % 97;
    std::atomic<int64_t> sum{0}, calls{0};
    pool.ParallelFor(n, [&](int64_t b, int64_t e) {
      int64_t s = 0;
      for (int64_t i = b; i < e; ++i) s += data[size_t(i)];
      sum += s;
      ++calls;
    });
    ASSERT_EQ(sum.load(), n * (n + 1) / 2) << "iteration " << it;
    ASSERT_GE(calls.load(), 1);
  }
}

// min_chunk: every chunk but the last has at least min_chunk items; n <= min_chunk is one call.
TEST(ThreadPool, ChunksRespectMinChunk) {
  ThreadPool pool(3);
  for (int64_t min_chunk : {1, 5, 64}) {
    for (int64_t n : {1, 7, 64, 65, 1000}) {
      std::mutex mu;
      std::vector<std::pair<int64_t, int64_t>> chunks;
      pool.ParallelFor(n, [&](int64_t b, int64_t e) {
        std::lock_guard<std::mutex> lock(mu);
        chunks.emplace_back(b, e);
      }, min_chunk);
      std::sort(chunks.begin(), chunks.end());
      ASSERT_EQ(chunks.front().first, 0);
      ASSERT_EQ(chunks.back().second, n);
      for (size_t i = 0; i < chunks.size(); ++i) {
        if (i + 1 < chunks.size()) {
          EXPECT_EQ(chunks[i].second, chunks[i + 1].first);
          EXPECT_GE(chunks[i].second - chunks[i].first, min_chunk);
        }
      }
      if (n <= min_chunk) {
        EXPECT_EQ(chunks.size(), 1u);
      }
    }
  }
}

// Workers that went to sleep (idle past their spin time) wake for the next loop, and the
// pool shuts down cleanly whether its workers are asleep or spinning.
TEST(ThreadPool, WakesAfterSleepAndShutsDown) {
  for (int round = 0; round < 20; ++round) {
    ThreadPool pool(3);
    std::atomic<int64_t> sum{0};
    pool.ParallelFor(300, [&](int64_t b, int64_t e) { sum += e - b; });
    if (round % 2 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    pool.ParallelFor(300, [&](int64_t b, int64_t e) { sum += e - b; });
    EXPECT_EQ(sum.load(), 600);
  }
}

// Two threads calling ParallelFor on one pool at once: one runs on the pool, the other
// serially on its own thread; both cover their ranges exactly.
TEST(ThreadPool, ConcurrentCallersBothComplete) {
  ThreadPool pool(2);
  auto run = [&pool](std::atomic<int64_t>* total) {
    for (int it = 0; it < 2000; ++it)
      pool.ParallelFor(50, [&](int64_t b, int64_t e) { *total += e - b; });
  };
  std::atomic<int64_t> a{0}, b{0};
  std::thread t1(run, &a), t2(run, &b);
  t1.join();
  t2.join();
  EXPECT_EQ(a.load(), 2000 * 50);
  EXPECT_EQ(b.load(), 2000 * 50);
}

}  // namespace
}  // namespace pg
