#include "tokenizer/bpe.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <queue>

#include "core/status.h"

namespace pg::tokenizer {
namespace {

// Words up to this many symbols use the quadratic scan (fast for short words); longer ones
// use a heap over a linked list (n log n, for long runs of spaces or base64 blobs).
constexpr size_t kQuadraticMaxSymbols = 48;
// Longer words are not cached (they are rare and would crowd the cache).
constexpr size_t kCacheMaxWordBytes = 96;
// Models a thread keeps caches for; the least recently created is dropped beyond this.
constexpr size_t kCachedModelsPerThread = 4;

std::atomic<uint64_t> g_next_serial{1};

}  // namespace

BpeModel::BpeModel(BpeParams params)
    : ignore_merges_(params.ignore_merges),
      cache_capacity_(params.cache_capacity),
      serial_(g_next_serial.fetch_add(1)) {
  vocab_ = std::move(params.vocab);
  size_t index_size = 16;
  while (index_size < vocab_.size() * 2) index_size *= 2;
  vocab_index_.assign(index_size, VocabSlot{});
  for (size_t id = 0; id < vocab_.size(); ++id) {
    if (vocab_[id].empty()) continue;
    const size_t h = StringHash{}(vocab_[id]);
    for (size_t i = h & (index_size - 1);; i = (i + 1) & (index_size - 1)) {
      VocabSlot& slot = vocab_index_[i];
      if (slot.id < 0) {
        slot = {uint32_t(h), int32_t(id)};
        break;
      }
      if (slot.hash == uint32_t(h) && vocab_[slot.id] == vocab_[id]) break;  // keep the first id
    }
  }
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    // A byte without a token (SmolLM2 lacks some control bytes) is dropped when encoding,
    // as HF's BPE does when there is no unk_token.
    byte_ids_[b] = Find(std::string_view(&c, 1));
  }
  size_t table_size = 16;
  while (table_size < params.merges.size() * 2) table_size *= 2;
  merge_table_.assign(table_size, MergeSlot{});
  std::string joined;
  for (size_t rank = 0; rank < params.merges.size(); ++rank) {
    const auto& [left, right] = params.merges[rank];
    const int32_t l = Find(left), r = Find(right);
    joined = left;
    joined += right;
    const int32_t m = Find(joined);
    PG_ENSURE(l >= 0 && r >= 0 && m >= 0, kMalformed,
              "BPE merge #{} ('{}' + '{}') uses a token that is not in the vocab", rank, left,
              right);
    // A repeated pair keeps its last rank, as HF's merge map (built by insertion) does.
    InsertMerge(PairKey(l, r), Merge{int32_t(rank), m});
  }
}

BpeModel::WordCache& BpeModel::ThreadCache() const {
  thread_local std::vector<std::pair<uint64_t, std::unique_ptr<WordCache>>> caches;
  for (auto& [serial, cache] : caches)
    if (serial == serial_) return *cache;
  if (caches.size() >= kCachedModelsPerThread) caches.erase(caches.begin());
  caches.emplace_back(serial_, std::make_unique<WordCache>());
  return *caches.back().second;
}

int32_t BpeModel::Find(std::string_view bytes) const {
  const size_t h = StringHash{}(bytes);
  const size_t mask = vocab_index_.size() - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    const VocabSlot& slot = vocab_index_[i];
    if (slot.id < 0) return -1;
    if (slot.hash == uint32_t(h) && vocab_[slot.id] == bytes) return slot.id;
  }
}

namespace {
inline size_t HashPair(uint64_t key) { return size_t((key * 0x9E3779B97F4A7C15ull) >> 20); }
}  // namespace

void BpeModel::InsertMerge(uint64_t key, Merge m) {
  const size_t mask = merge_table_.size() - 1;
  for (size_t i = HashPair(key) & mask;; i = (i + 1) & mask) {
    MergeSlot& slot = merge_table_[i];
    if (slot.key == kEmptyKey) {
      slot.key = key;
      slot.merge = m;
      ++num_merges_;
      return;
    }
    if (slot.key == key) {
      slot.merge = m;
      return;
    }
  }
}

bool BpeModel::FindMerge(int32_t left, int32_t right, Merge* m) const {
  const uint64_t key = PairKey(left, right);
  const size_t mask = merge_table_.size() - 1;
  for (size_t i = HashPair(key) & mask;; i = (i + 1) & mask) {
    const MergeSlot& slot = merge_table_[i];
    if (slot.key == key) {
      *m = slot.merge;
      return true;
    }
    if (slot.key == kEmptyKey) return false;
  }
}

void BpeModel::MergeSymbols(std::vector<int32_t>* symbols) const {
  std::vector<int32_t>& s = *symbols;
  if (s.empty()) return;
  if (s.size() <= kQuadraticMaxSymbols) {
    // ranks[i] / merged[i]: the merge of (s[i], s[i+1]); INT32_MAX when they never merge.
    // Only the two pairs touching a merge are looked up again.
    int32_t ranks[kQuadraticMaxSymbols], merged[kQuadraticMaxSymbols];
    size_t n = s.size();
    auto look = [&](size_t i) {
      Merge m;
      if (FindMerge(s[i], s[i + 1], &m)) {
        ranks[i] = m.rank;
        merged[i] = m.merged_id;
      } else {
        ranks[i] = INT32_MAX;
      }
    };
    for (size_t i = 0; i + 1 < n; ++i) look(i);
    while (n > 1) {
      size_t best = 0;
      for (size_t i = 1; i + 1 < n; ++i)
        if (ranks[i] < ranks[best]) best = i;  // strict: leftmost among equal ranks
      if (ranks[best] == INT32_MAX) break;
      s[best] = merged[best];
      for (size_t i = best + 1; i + 1 < n; ++i) {
        s[i] = s[i + 1];
        ranks[i] = ranks[i + 1];
        merged[i] = merged[i + 1];
      }
      --n;
      if (best > 0) look(best - 1);
      if (best + 1 < n) look(best);
    }
    s.resize(n);
    return;
  }

  // Linked list of symbols; index = position of the symbol's first byte-symbol.
  struct Node {
    int32_t id, prev, next;
  };
  struct Candidate {
    int32_t rank, pos, left_id, right_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  const int32_t n = int32_t(s.size());
  std::vector<Node> nodes(n);
  for (int32_t i = 0; i < n; ++i) nodes[i] = {s[i], i - 1, i + 1 < n ? i + 1 : -1};
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push_pair = [&](int32_t pos) {
    if (pos < 0 || nodes[pos].next < 0) return;
    Merge m;
    if (FindMerge(nodes[pos].id, nodes[nodes[pos].next].id, &m))
      heap.push({m.rank, pos, nodes[pos].id, nodes[nodes[pos].next].id});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Node& left = nodes[c.pos];
    if (left.id != c.left_id || left.next < 0) continue;  // stale: left symbol changed
    Node& right = nodes[left.next];
    if (right.id != c.right_id) continue;                 // stale: right symbol changed
    Merge m;
    FindMerge(c.left_id, c.right_id, &m);
    left.id = m.merged_id;
    right.id = -1;
    left.next = right.next;
    if (left.next >= 0) nodes[left.next].prev = c.pos;
    push_pair(left.prev);
    push_pair(c.pos);
  }
  s.clear();
  for (int32_t i = 0; i >= 0; i = nodes[i].next) s.push_back(nodes[i].id);
}

void BpeModel::EncodeWord(std::string_view word, std::vector<int32_t>* out) const {
  PG_CHECK(!word.empty());
  if (word.size() == 1) {
    const int32_t id = byte_ids_[static_cast<uint8_t>(word[0])];
    if (id >= 0) out->push_back(id);
    return;
  }
  // The small per-thread cache is checked first: it stays in L1/L2, the vocab map does not.
  const bool cacheable = word.size() <= kCacheMaxWordBytes && cache_capacity_ > 0;
  WordCache* cache = cacheable ? &ThreadCache() : nullptr;
  if (cache) {
    auto it = cache->find(word);
    if (it != cache->end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  auto remember = [&](const int32_t* ids, size_t n) {
    out->insert(out->end(), ids, ids + n);
    if (cache) {
      if (cache->size() >= cache_capacity_) cache->clear();
      cache->emplace(std::string(word), std::vector<int32_t>(ids, ids + n));
    }
  };
  if (ignore_merges_) {
    const int32_t id = Find(word);
    if (id >= 0) {
      remember(&id, 1);
      return;
    }
  }
  thread_local std::vector<int32_t> symbols;
  symbols.clear();
  for (char c : word) {
    const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
    if (id >= 0) symbols.push_back(id);
  }
  MergeSymbols(&symbols);
  remember(symbols.data(), symbols.size());
}

}  // namespace pg::tokenizer
