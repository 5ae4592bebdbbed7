// Byte-level BPE model: maps one pre-tokenized piece (raw bytes) to token ids by applying
// merges in rank order (lowest rank first, leftmost first among equal ranks), as HF
// tokenizers' BPE model does. Thread-safe: the word cache is per thread (no locks on the hot
// path), keyed by a per-model serial number so a new model never sees an old model's words.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace pg::tokenizer {

struct BpeParams {
  // id -> raw bytes of the token (after byte-level decoding); empty for ids the model does
  // not define (holes, added tokens that live outside the model vocab).
  std::vector<std::string> vocab;
  // Merges in rank order, as raw byte strings (left, right). Both sides and their
  // concatenation must be in `vocab`.
  std::vector<std::pair<std::string, std::string>> merges;
  // HF `ignore_merges` (Llama-3): a piece that is itself a vocab entry maps to that id
  // directly, without running the merges.
  bool ignore_merges = false;
  size_t cache_capacity = 1 << 15;  // words per thread; the cache is cleared when full
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

class BpeModel {
 public:
  // Throws pg::Error(kMalformed) for a merge whose parts are not in the vocab.
  explicit BpeModel(BpeParams params);

  // Appends the ids of `word` (non-empty raw bytes) to *out.
  void EncodeWord(std::string_view word, std::vector<int32_t>* out) const;

  // -1 when absent.
  int32_t Find(std::string_view bytes) const;
  size_t num_merges() const { return num_merges_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
  }
  // Looks a pair up; returns false when the pair never merges.
  bool FindMerge(int32_t left, int32_t right, Merge* m) const;
  void InsertMerge(uint64_t key, Merge m);
  void MergeSymbols(std::vector<int32_t>* symbols) const;

  // Vocab index: open addressing over (hash fingerprint, id), keys compared against vocab_.
  struct VocabSlot {
    uint32_t hash = 0;
    int32_t id = -1;  // -1: empty
  };
  std::vector<std::string> vocab_;  // id -> raw bytes
  std::vector<VocabSlot> vocab_index_;
  // Open-addressing table of merges (linear probing, power-of-two size, load <= 1/2):
  // one cache line per lookup instead of a node-based map's pointer chase.
  struct MergeSlot {
    uint64_t key = kEmptyKey;
    Merge merge{};
  };
  static constexpr uint64_t kEmptyKey = ~uint64_t{0};
  std::vector<MergeSlot> merge_table_;
  size_t num_merges_ = 0;
  using WordCache =
      std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>>;
  // This thread's cache for this model (created on first use).
  WordCache& ThreadCache() const;

  int32_t byte_ids_[256];  // -1 for a byte the vocab lacks (dropped, as HF does without unk)
  bool ignore_merges_;
  size_t cache_capacity_;
  uint64_t serial_;  // unique per BpeModel instance in this process
};

}  // namespace pg::tokenizer
