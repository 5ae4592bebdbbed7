#include <gtest/gtest.h>

#include "cache/kv_cache.h"
#include "unit/cache/test_util.h"

namespace pg::cache {
namespace {

using testing::RandomTokens;

constexpr int32_t kPage = 7;  // awkward page size

struct Seq {  // a request's view: tokens, keys, pages
  std::vector<int32_t> tokens;
  std::vector<uint64_t> keys;
  PageList pages;
};

// Allocates and "computes" every token of `tokens` after a prefix match, then inserts the
// full pages. Returns the match's number of hit pages.
int32_t RunSeq(KvCacheManager& kv, Seq& s, std::vector<CopyOp>* copies) {
  ExtendPageKeys(s.tokens, kPage, &s.keys);
  const int32_t max_pages = static_cast<int32_t>((s.tokens.size() - 1) / kPage);
  PrefixMatch m = kv.Match(s.tokens, s.keys, max_pages, copies);
  const int32_t hit = m.num_tokens();
  s.pages = std::move(m.pages);
  const int32_t need = static_cast<int32_t>((s.tokens.size() + kPage - 1) / kPage) - hit;
  EXPECT_TRUE(kv.Allocate(need, &s.pages, copies));
  kv.Insert(s.tokens, s.keys, s.pages, 0, static_cast<int32_t>(s.keys.size()));
  return hit;
}

TEST(PageKeys, ChainDependsOnWholePrefix) {
  std::mt19937 rng(1);
  auto a = RandomTokens(rng, 5 * kPage + 3);
  auto b = a;
  b[2] += 1;  // differs in page 0 only
  std::vector<uint64_t> ka, kb;
  ExtendPageKeys(a, kPage, &ka);
  ExtendPageKeys(b, kPage, &kb);
  ASSERT_EQ(ka.size(), 5u);  // the partial page has no key
  for (size_t i = 0; i < 5; ++i) EXPECT_NE(ka[i], kb[i]) << i;
  // Extending incrementally equals computing at once.
  std::vector<uint64_t> inc;
  ExtendPageKeys(std::span(a).first(2 * kPage + 1), kPage, &inc);
  ExtendPageKeys(a, kPage, &inc);
  EXPECT_EQ(inc, ka);
}

TEST(PrefixCache, NextTurnHitsPromptAndGeneratedTokens) {
  KvCacheManager kv(KvCacheConfig{kPage, 100, 0, true});
  std::mt19937 rng(2);
  std::vector<CopyOp> copies;
  Seq turn1{RandomTokens(rng, 10 * kPage + 4), {}, {}};  // prompt + generated output
  EXPECT_EQ(RunSeq(kv, turn1, &copies), 0);
  turn1.pages.Reset();  // finished
  EXPECT_EQ(kv.num_available_pages(), 100);
  EXPECT_EQ(kv.num_cached_device_pages(), 10);
  // Turn 2 = everything turn 1 saw + a new user message.
  Seq turn2{turn1.tokens, {}, {}};
  auto more = RandomTokens(rng, 23);
  turn2.tokens.insert(turn2.tokens.end(), more.begin(), more.end());
  EXPECT_EQ(RunSeq(kv, turn2, &copies), 10);
  EXPECT_TRUE(copies.empty());
  kv.CheckInvariants();
}

TEST(PrefixCache, HitCappedSoLastPromptTokenIsComputed) {
  KvCacheManager kv(KvCacheConfig{kPage, 64, 0, true});
  std::mt19937 rng(3);
  std::vector<CopyOp> copies;
  Seq a{RandomTokens(rng, 4 * kPage), {}, {}};  // exactly 4 full pages
  RunSeq(kv, a, &copies);
  a.pages.Reset();
  Seq b{a.tokens, {}, {}};  // the same prompt again: at most 3 pages, (28 - 1) / 7 = 3
  EXPECT_EQ(RunSeq(kv, b, &copies), 3);
}

TEST(PrefixCache, DivergingPromptHitsCommonPagesOnly) {
  KvCacheManager kv(KvCacheConfig{kPage, 64, 0, true});
  std::mt19937 rng(4);
  std::vector<CopyOp> copies;
  Seq a{RandomTokens(rng, 6 * kPage + 2), {}, {}};
  RunSeq(kv, a, &copies);
  Seq b{a.tokens, {}, {}};
  b.tokens[3 * kPage + 5] ^= 1;  // change a token inside page 3
  EXPECT_EQ(RunSeq(kv, b, &copies), 3);
  // a is still running: shared pages have two holders.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(kv.ref_count(a.pages[i]), 2);
  Seq c{RandomTokens(rng, 6 * kPage + 2), {}, {}};
  EXPECT_EQ(RunSeq(kv, c, &copies), 0);
  kv.CheckInvariants();
}

TEST(PrefixCache, PrefixCacheOffNeverHits) {
  KvCacheManager kv(KvCacheConfig{kPage, 64, 0, false});
  std::mt19937 rng(5);
  std::vector<CopyOp> copies;
  Seq a{RandomTokens(rng, 5 * kPage), {}, {}};
  RunSeq(kv, a, &copies);
  a.pages.Reset();
  Seq b{a.tokens, {}, {}};
  EXPECT_EQ(RunSeq(kv, b, &copies), 0);
  EXPECT_EQ(kv.num_free_pages(), 64 - 5);
}

TEST(PrefixCache, LruEvictsLeastRecentAndTailsFirst) {
  KvCacheManager kv(KvCacheConfig{kPage, 12, 0, true});
  std::mt19937 rng(6);
  std::vector<CopyOp> copies;
  Seq a{RandomTokens(rng, 4 * kPage), {}, {}}, b{RandomTokens(rng, 4 * kPage), {}, {}};
  RunSeq(kv, a, &copies);
  RunSeq(kv, b, &copies);
  a.pages.Reset();
  b.pages.Reset();
  // Touch a (hit 3 pages, release): a becomes more recent than b.
  Seq a2{a.tokens, {}, {}};
  EXPECT_EQ(RunSeq(kv, a2, &copies), 3);
  a2.pages.Reset();
  // LRU order now: a3 (not touched), b3, b2, b1, b0, a2, a1, a0; and 4 free pages.
  // Take 7: the 4 free ones, then a3, b3, b2.
  PageList hold;
  ASSERT_TRUE(kv.Allocate(7, &hold, &copies));
  Seq b2{b.tokens, {}, {}};
  Seq a3{a.tokens, {}, {}};
  hold.Reset();  // give the pages back so the probes can allocate
  EXPECT_EQ(RunSeq(kv, a3, &copies), 3);
  EXPECT_EQ(RunSeq(kv, b2, &copies), 2);  // b's pages 2 and 3 were evicted, 0 and 1 kept
  kv.CheckInvariants();
}

TEST(PrefixCache, SessionRetentionOutlivesPlainLruUntilTtl) {
  KvCacheManager kv(KvCacheConfig{kPage, 8, 0, true});
  std::mt19937 rng(7);
  std::vector<CopyOp> copies;
  kv.SetTime(1000);
  Seq session{RandomTokens(rng, 4 * kPage), {}, {}}, plain{RandomTokens(rng, 4 * kPage), {}, {}};
  RunSeq(kv, session, &copies);
  RunSeq(kv, plain, &copies);
  kv.ReleaseRetained(std::move(session.pages), /*expiry_us=*/5000);
  plain.pages.Reset();  // released later: plain LRU would evict `session` first
  EXPECT_EQ(kv.num_evictable_pages(), 8);
  {
    PageList hold;
    ASSERT_TRUE(kv.Allocate(4, &hold, &copies));  // takes the plain pages
  }
  Seq probe{session.tokens, {}, {}};
  EXPECT_EQ(RunSeq(kv, probe, &copies), 3);
  probe.pages.Reset();
  EXPECT_EQ(kv.stats().retained_evicted_pages, 0);

  // After the TTL the retained pages are plain LRU again and are evicted first.
  Seq s2{RandomTokens(rng, 4 * kPage), {}, {}};
  RunSeq(kv, s2, &copies);  // fills the 4 free pages
  kv.ReleaseRetained(std::move(s2.pages), 9000);
  kv.SetTime(6000);  // `session` expired (5000 < 6000), s2 still retained
  {
    PageList hold;
    ASSERT_TRUE(kv.Allocate(4, &hold, &copies));
  }
  Seq probe2{s2.tokens, {}, {}};
  EXPECT_EQ(RunSeq(kv, probe2, &copies), 3);
  kv.CheckInvariants();
}

TEST(PrefixCache, ConcurrentDuplicateComputationCachesOneCopy) {
  KvCacheManager kv(KvCacheConfig{kPage, 32, 0, true});
  std::mt19937 rng(8);
  std::vector<CopyOp> copies;
  Seq a{RandomTokens(rng, 3 * kPage + 1), {}, {}};
  Seq b{a.tokens, {}, {}};
  RunSeq(kv, a, &copies);  // both miss: b is matched before... (here after a inserted)
  // Force a miss for b by matching with max_pages 0, as when b was admitted before a's
  // pages were computed.
  ExtendPageKeys(b.tokens, kPage, &b.keys);
  PrefixMatch m = kv.Match(b.tokens, b.keys, 0, &copies);
  b.pages = std::move(m.pages);
  ASSERT_TRUE(kv.Allocate(4, &b.pages, &copies));
  kv.Insert(b.tokens, b.keys, b.pages, 0, 3);
  EXPECT_EQ(kv.num_cached_device_pages(), 3);  // b's duplicates are not cached
  b.pages.Reset();
  EXPECT_EQ(kv.num_free_pages(), 32 - 4);      // ... and go straight back to the free list
  a.pages.Reset();
  kv.CheckInvariants();
}

}  // namespace
}  // namespace pg::cache
