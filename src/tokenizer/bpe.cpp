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
  token_to_id_.reserve(params.vocab.size());
  for (size_t id = 0; id < params.vocab.size(); ++id) {
    if (!params.vocab[id].empty()) token_to_id_.emplace(params.vocab[id], int32_t(id));
  }
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    // A byte without a token (SmolLM2 lacks some control bytes) is dropped when encoding,
    // as HF's BPE does when there is no unk_token.
    byte_ids_[b] = Find(std::string_view(&c, 1));
  }
  merge_map_.reserve(params.merges.size());
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
    merge_map_[PairKey(l, r)] = Merge{int32_t(rank), m};
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
  auto it = token_to_id_.find(bytes);
  return it == token_to_id_.end() ? -1 : it->second;
}

bool BpeModel::FindMerge(int32_t left, int32_t right, Merge* m) const {
  auto it = merge_map_.find(PairKey(left, right));
  if (it == merge_map_.end()) return false;
  *m = it->second;
  return true;
}

void BpeModel::MergeSymbols(std::vector<int32_t>* symbols) const {
  std::vector<int32_t>& s = *symbols;
  if (s.empty()) return;
  if (s.size() <= kQuadraticMaxSymbols) {
    while (s.size() > 1) {
      int32_t best_rank = INT32_MAX, best_id = -1;
      size_t best_pos = 0;
      Merge m;
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        if (FindMerge(s[i], s[i + 1], &m) && m.rank < best_rank) {
          best_rank = m.rank;
          best_id = m.merged_id;
          best_pos = i;
        }
      }
      if (best_id < 0) break;
      s[best_pos] = best_id;
      s.erase(s.begin() + best_pos + 1);
    }
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
  if (ignore_merges_) {
    const int32_t id = Find(word);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  }
  const bool cacheable = word.size() <= kCacheMaxWordBytes && cache_capacity_ > 0;
  WordCache* cache = cacheable ? &ThreadCache() : nullptr;
  if (cache) {
    auto it = cache->find(word);
    if (it != cache->end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
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
  out->insert(out->end(), symbols.begin(), symbols.end());
  if (cache) {
    if (cache->size() >= cache_capacity_) cache->clear();
    cache->emplace(std::string(word), symbols);
  }
}

}  // namespace pg::tokenizer
