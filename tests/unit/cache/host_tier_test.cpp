#include <gtest/gtest.h>

#include <deque>
#include <map>

#include "cache/kv_cache.h"
#include "unit/cache/test_util.h"

namespace pg::cache {
namespace {

using testing::ContentModel;
using testing::RandomTokens;

constexpr int32_t kPage = 5;

struct Seq {
  std::vector<int32_t> tokens;
  std::vector<uint64_t> keys;
  PageList pages;
};

// Match + allocate + "compute" (write each full page's key as its content) + insert.
// Asserts that every hit page holds the right content once the copies are applied.
int32_t RunSeq(KvCacheManager& kv, ContentModel& mem, Seq& s) {
  std::vector<CopyOp> copies;
  ExtendPageKeys(s.tokens, kPage, &s.keys);
  const int32_t max_pages = static_cast<int32_t>((s.tokens.size() - 1) / kPage);
  PrefixMatch m = kv.Match(s.tokens, s.keys, max_pages, &copies);
  const int32_t hit = m.num_tokens();
  s.pages = std::move(m.pages);
  const int32_t total = static_cast<int32_t>((s.tokens.size() + kPage - 1) / kPage);
  if (!kv.Allocate(total - hit, &s.pages, &copies)) {
    mem.Apply(copies);
    s.pages.Reset();
    return -1;
  }
  mem.Apply(copies);
  for (int32_t i = 0; i < hit; ++i) {
    EXPECT_EQ(mem.device[s.pages[i]], s.keys[i]) << "hit page " << i << " has wrong KV";
  }
  for (int32_t i = hit; i < total; ++i) {
    mem.device[s.pages[i]] = i < static_cast<int32_t>(s.keys.size()) ? s.keys[i] : 0;
  }
  kv.Insert(s.tokens, s.keys, s.pages, 0, static_cast<int32_t>(s.keys.size()));
  return hit;
}

TEST(HostTier, EvictionWritesBackAndHitLoadsBackWithExactCopyLists) {
  KvCacheManager kv(KvCacheConfig{kPage, 6, 16, true});
  ContentModel mem(6, 16);
  std::mt19937 rng(11);
  Seq a{RandomTokens(rng, 3 * kPage + 1), {}, {}};
  ASSERT_EQ(RunSeq(kv, mem, a), 0);
  const std::vector<PageId> a_pages(a.pages.ids().begin(), a.pages.ids().end());
  a.pages.Reset();  // 3 cached pages on the LRU (tail first), the partial page freed

  Seq b{RandomTokens(rng, 6 * kPage), {}, {}};
  std::vector<CopyOp> copies;
  ExtendPageKeys(b.tokens, kPage, &b.keys);
  ASSERT_TRUE(kv.Allocate(6, &b.pages, &copies));
  // 3 free pages first, then a's cached pages tail first, written to host slots 0, 1, 2.
  const std::vector<CopyOp> expect_out = {
      {CopyKind::kDeviceToHost, a_pages[2], 0},
      {CopyKind::kDeviceToHost, a_pages[1], 1},
      {CopyKind::kDeviceToHost, a_pages[0], 2}};
  EXPECT_EQ(copies, expect_out);
  mem.Apply(copies);
  for (int i = 0; i < 6; ++i) mem.device[b.pages[i]] = b.keys[i];
  kv.Insert(b.tokens, b.keys, b.pages, 0, 6);
  const std::vector<PageId> b_pages(b.pages.ids().begin(), b.pages.ids().end());
  b.pages.Reset();

  // a again: its 3 pages come back from the host; each needs a device page, taken from b's
  // tail (written back first to slots 3, 4, 5).
  Seq a2{a.tokens, {}, {}};
  copies.clear();
  ExtendPageKeys(a2.tokens, kPage, &a2.keys);
  PrefixMatch m = kv.Match(a2.tokens, a2.keys, 3, &copies);
  EXPECT_EQ(m.num_host_hits, 3);
  EXPECT_EQ(m.num_device_hits, 0);
  const std::vector<CopyOp> expect = {
      {CopyKind::kDeviceToHost, b_pages[5], 3}, {CopyKind::kHostToDevice, b_pages[5], 2},
      {CopyKind::kDeviceToHost, b_pages[4], 4}, {CopyKind::kHostToDevice, b_pages[4], 1},
      {CopyKind::kDeviceToHost, b_pages[3], 5}, {CopyKind::kHostToDevice, b_pages[3], 0}};
  EXPECT_EQ(copies, expect);
  mem.Apply(copies);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(mem.device[m.pages[i]], a2.keys[i]);
  m.pages.Reset();
  kv.CheckInvariants();
}

TEST(HostTier, WithoutHostTierEvictedPagesAreGone) {
  KvCacheManager kv(KvCacheConfig{kPage, 6, 0, true});
  ContentModel mem(6, 0);
  std::mt19937 rng(12);
  Seq a{RandomTokens(rng, 3 * kPage + 1), {}, {}};
  RunSeq(kv, mem, a);
  a.pages.Reset();
  Seq b{RandomTokens(rng, 6 * kPage), {}, {}};
  RunSeq(kv, mem, b);
  b.pages.Reset();
  Seq a2{a.tokens, {}, {}};
  EXPECT_EQ(RunSeq(kv, mem, a2), 0);
}

TEST(HostTier, SwapOutAndInPreservesContent) {
  KvCacheManager kv(KvCacheConfig{kPage, 9, 9, true});
  ContentModel mem(9, 9);
  std::mt19937 rng(13);
  Seq a{RandomTokens(rng, 4 * kPage + 3), {}, {}};
  RunSeq(kv, mem, a);
  mem.device[a.pages[4]] = 777;  // the partial page's KV: not cached, must survive the swap
  std::vector<uint64_t> before;
  for (PageId p : a.pages.ids()) before.push_back(mem.device[p]);
  std::vector<CopyOp> copies;
  HostSlotList slots;
  ASSERT_TRUE(kv.SwapOut(&a.pages, &slots, &copies));
  EXPECT_TRUE(a.pages.empty());
  // Someone else overwrites the whole device.
  Seq b{RandomTokens(rng, 9 * kPage), {}, {}};
  mem.Apply(copies);
  copies.clear();
  ASSERT_EQ(RunSeq(kv, mem, b), 0);
  b.pages.Reset();
  PageList back;
  ASSERT_TRUE(kv.SwapIn(&slots, &back, &copies));
  mem.Apply(copies);
  ASSERT_EQ(back.size(), before.size());
  for (size_t i = 0; i < before.size(); ++i) EXPECT_EQ(mem.device[back[i]], before[i]) << i;
  EXPECT_TRUE(slots.empty());
  back.Reset();
  kv.CheckInvariants();
}

// Thousands of random operations on conversations that grow turn by turn, with small device
// and host pools: every hit must read the right content, invariants hold after every step,
// refcounts equal the number of holders, and all pages come back at the end.
TEST(HostTier, RandomConversationsKeepContentAndInvariants) {
  for (int32_t host_pages : {0, 7, 40}) {
    KvCacheManager kv(KvCacheConfig{kPage, 29, host_pages, true});
    ContentModel mem(29, host_pages);
    std::mt19937 rng(100 + host_pages);
    std::vector<std::vector<int32_t>> convs(6);
    std::deque<Seq> running;
    int64_t now = 0, hits = 0;
    for (int step = 0; step < 3000; ++step) {
      kv.SetTime(now += rng() % 50);
      const int op = rng() % 4;
      if (op < 2 && running.size() < 4) {
        auto& conv = convs[rng() % convs.size()];
        auto more = RandomTokens(rng, 1 + rng() % 12);
        conv.insert(conv.end(), more.begin(), more.end());
        if (conv.size() > 40) conv.erase(conv.begin(), conv.begin() + kPage * 3);  // new prefix
        Seq s{conv, {}, {}};
        const int32_t hit = RunSeq(kv, mem, s);
        if (hit > 0) hits += hit;
        if (hit >= 0) running.push_back(std::move(s));
      } else if (!running.empty()) {
        const size_t i = rng() % running.size();
        if (rng() % 2) kv.ReleaseRetained(std::move(running[i].pages), now + 200);
        running.erase(running.begin() + i);
      }
      kv.CheckInvariants();
      std::map<PageId, int> holders;
      for (const Seq& s : running) {
        for (PageId p : s.pages.ids()) ++holders[p];
      }
      for (auto& [p, n] : holders) ASSERT_EQ(kv.ref_count(p), n);
      ASSERT_EQ(kv.num_available_pages() + static_cast<int32_t>(holders.size()), 29);
      if (::testing::Test::HasFailure()) return;
    }
    running.clear();
    EXPECT_EQ(kv.num_available_pages(), 29);
    EXPECT_GT(hits, 100) << "host_pages " << host_pages;
    if (host_pages > 0) {
      EXPECT_GT(kv.stats().host_hit_pages, 0);
    }
  }
}

}  // namespace
}  // namespace pg::cache
