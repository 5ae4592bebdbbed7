// Constrained decoding's shared half: a model's token table (every id's raw bytes, indexed for
// masking) and ByteConstraint, which masks a logits row with any byte-level matcher, exactly: a
// token is kept iff every byte of it is accepted. Greedy and seeded sampling then draw from the
// constrained distribution, not from a filtered unconstrained draw.
//
// Matchers (JsonMatcher: JSON mode; SchemaMatcher: a JSON schema) are values, copied to try
// bytes, with:
//   bool Accept(uint8_t c);    false: c cannot come next (the copy is then dead)
//   bool can_end() const;      the output may end here (EOS allowed)
//   int string_budget() const; -1 unless inside a string where every plain token (TokenTable::
//                              plain) is accepted and leaves nothing but a character count
//                              changed; then the characters (code points) the string may still
//                              take, kUnlimited for no bound
// and optionally
//   int64_t mask_key() const;      >= 0: a name of the state such that equal names allow equal
//                                  tokens (the mask is then cached per name); -1: none
//   RegexView regex_view() const;  a state in which a regex automaton alone judges the tokens
//                                  (RegexView's comment); the mask then walks a
//                                  RegexTokenIndex instead of the byte trie
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <unordered_map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/regex.h"
#include "runtime/regex_index.h"

namespace pg::runtime {

// Raw bytes of every token id (byte-level BPE pieces decoded: " the", "{\""), the ids that
// never appear inside JSON (special / control tokens) and the end-of-sequence ids. Built once
// per model from its tokenizer and shared by every constrained request.
struct TokenTable {
  std::vector<std::string> bytes;  // id -> raw bytes (may be a partial UTF-8 sequence)
  std::vector<uint8_t> special;    // id -> 1: never allowed (EOS is allowed separately)
  std::vector<uint8_t> plain;      // id -> 1: text (not special, not EOS), non-empty, no '"', '\\'
                                   // or byte < 0x20 (Make sets it)
  std::vector<uint8_t> chars;      // id -> code points its bytes start (bytes not 10xxxxxx),
                                   // saturating at 255 (Make sets it)
  std::vector<int32_t> eos_ids;
  // Indexes Make builds for the mask: ids that are not plain (special and EOS ones included),
  // the plain ones by length (for strings of bounded length), and a byte trie of the text ids (not special, not EOS, non-empty). Node 0 is the root; a
  // node's children are first_child, then next_sibling, ..., in increasing byte order (-1
  // ends); node n is reached by byte[n] and the ids spelled by its path are
  // ends[end_begin[n] .. end_begin[n] + end_count[n]).
  std::vector<int32_t> not_plain;
  std::vector<int32_t> plain_by_chars;  // the plain ids, most characters first
  struct Trie {
    std::vector<int32_t> first_child, next_sibling, end_begin, end_count;
    std::vector<uint8_t> byte;
    std::vector<int32_t> ends;
  } trie;

  static TokenTable Make(std::vector<std::string> bytes, std::vector<uint8_t> special,
                         std::vector<int32_t> eos_ids);
  bool IsEos(int32_t token) const {
    return std::find(eos_ids.begin(), eos_ids.end(), token) != eos_ids.end();
  }
};

// One request's constraint on what it may generate (SamplerState owns it; runtime::Sample
// masks with it and feeds it each sampled token).
class OutputConstraint {
 public:
  virtual ~OutputConstraint() = default;
  // Sets every token that cannot come next to -inf. If none could (a vocabulary without the
  // bytes needed), EOS tokens stay allowed; logits.size() may exceed the table (ids beyond it
  // are masked).
  virtual void Mask(std::span<float> logits) const = 0;
  virtual bool Allowed(int32_t token) const = 0;
  virtual void Accept(int32_t token) = 0;  // advances past a sampled token (EOS: no bytes)
  virtual bool can_end() const = 0;        // EOS is allowed now
};

inline constexpr int kUnlimited = std::numeric_limits<int>::max();

// A matcher state in which a token's fate is the regex automaton's alone: a token (every text
// token, or with plain_only every TokenTable::plain one) is allowed iff its bytes lead `state`
// to a live state from which a match can end within chars_left code points, the token's own
// included. With plain_only the other tokens are tried one by one. re null: no such state.
struct RegexView {
  const Regex* re = nullptr;
  int32_t state = 0;
  uint32_t chars_left = std::numeric_limits<uint32_t>::max();
  bool plain_only = false;
};

// UTF-8 code points of `bytes`: the bytes that do not continue a sequence (not 10xxxxxx).
inline size_t CodePoints(std::string_view bytes) {
  size_t n = 0;
  for (char ch : bytes) n += (uint8_t(ch) & 0xC0) != 0x80;
  return n;
}

template <class Matcher>
class ByteConstraint final : public OutputConstraint {
 public:
  // owner: kept alive with the constraint (what the matcher points into, e.g. its schema).
  explicit ByteConstraint(std::shared_ptr<const TokenTable> table, Matcher matcher = Matcher(),
                          std::shared_ptr<const void> owner = nullptr)
      : table_(std::move(table)), owner_(std::move(owner)), matcher_(std::move(matcher)) {
    if (table_ == nullptr) throw std::invalid_argument("a constrained output needs a token table");
  }

  bool can_end() const override { return matcher_.can_end(); }
  const Matcher& matcher() const { return matcher_; }
  size_t regex_indexes_built() const {  // for tests: which mask path ran
    size_t n = 0;
    for (const auto& [key, slot] : indexes_) n += slot.index != nullptr;
    return n;
  }

  bool Allowed(int32_t token) const override {
    const TokenTable& t = *table_;
    if (token < 0 || size_t(token) >= t.bytes.size()) return false;
    if (t.IsEos(token)) return matcher_.can_end();
    if (t.special[size_t(token)]) return false;
    const int budget = matcher_.string_budget();
    if (budget >= 0 && t.plain[size_t(token)]) return t.chars[size_t(token)] <= budget;
    const std::string& b = t.bytes[size_t(token)];
    if (b.empty()) return false;
    Matcher m = matcher_;
    for (char ch : b)
      if (!m.Accept(uint8_t(ch))) return false;
    return true;
  }

  void Accept(int32_t token) override {
    if (token < 0 || size_t(token) >= table_->bytes.size() || table_->IsEos(token)) return;
    Matcher m = matcher_;
    for (char ch : table_->bytes[size_t(token)])
      if (!m.Accept(uint8_t(ch))) return;  // not an allowed token: the state stays
    matcher_ = m;
  }

  // With a matcher that names its states (mask_key() >= 0: equal keys allow equal tokens),
  // the allowed set of each state is computed once per request and replayed: a grammar inside
  // a string or free text, where the walk touches most of the vocabulary, costs that walk
  // once per state rather than per token.
  void Mask(std::span<float> logits) const override {
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    if constexpr (requires(const Matcher& m) { m.mask_key(); }) {
      const int64_t key = matcher_.mask_key();
      if (key >= 0) {
        auto it = mask_cache_.find(key);
        if (it == mask_cache_.end()) {
          if (mask_cache_.size() >= kMaxCachedMasks) mask_cache_.clear();
          std::vector<float> probe(logits.size(), 0.0f);
          CachedMask m{std::vector<uint64_t>((probe.size() + 63) / 64, 0), MaskUncached(probe)};
          for (size_t i = 0; i < probe.size(); ++i)
            if (probe[i] != kNegInf) m.bits[i / 64] |= uint64_t(1) << (i % 64);
          it = mask_cache_.emplace(key, std::move(m)).first;
        }
        const CachedMask& m = it->second;
        if (m.bits.size() == (logits.size() + 63) / 64) {
          for (size_t w = 0; w < m.bits.size(); ++w) {
            const uint64_t word = m.bits[w];
            if (word == ~uint64_t(0)) continue;
            const size_t b = w * 64, e = std::min(logits.size(), b + 64);
            if (word == 0) {
              std::fill(logits.begin() + std::ptrdiff_t(b), logits.begin() + std::ptrdiff_t(e), kNegInf);
              continue;
            }
            for (size_t i = b; i < e; ++i)
              if (!((word >> (i - b)) & 1)) logits[i] = kNegInf;
          }
          if (m.fallback) SetEosZero(logits);
          return;
        }
      }
    }
    MaskUncached(logits);
  }

 private:
  void SetEosZero(std::span<float> logits) const {
    for (int32_t e : table_->eos_ids)
      if (e >= 0 && size_t(e) < logits.size()) logits[size_t(e)] = 0.0f;
  }
  // Returns true when nothing could continue and EOS was let through at 0 (the fallback).
  bool MaskUncached(std::span<float> logits) const {
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    const TokenTable& t = *table_;
    const size_t n = std::min(logits.size(), t.bytes.size());
    for (size_t i = n; i < logits.size(); ++i) logits[i] = kNegInf;  // ids beyond the table
    bool any = false;
    const int budget = matcher_.string_budget();
    RegexView view;
    if constexpr (requires(const Matcher& m) { m.regex_view(); }) view = matcher_.regex_view();
    IndexSlot* slot = view.re != nullptr ? &indexes_[{view.re, view.plain_only}] : nullptr;
    if (slot != nullptr && slot->index != nullptr) {
      // The automaton judges the indexed tokens by class path; the rest (plain_only: quotes,
      // escapes, specials, EOS) are tried one by one; without plain_only, EOS where it may end.
      std::vector<uint8_t> kept(n, 0);
      size_t count = slot->index->Collect(view.state, view.chars_left, kept);
      if (view.plain_only) {
        for (int32_t id : t.not_plain)
          if (size_t(id) < n && Allowed(id)) kept[size_t(id)] = 1, ++count;
      } else if (matcher_.can_end()) {
        for (int32_t e : t.eos_ids)
          if (e >= 0 && size_t(e) < n) kept[size_t(e)] = 1, ++count;
      }
      for (size_t i = 0; i < n; ++i) logits[i] = kept[i] ? logits[i] : kNegInf;
      any = count > 0;
    } else if (budget >= 0) {
      // Inside a string every plain token whose characters fit the budget is allowed (and
      // changes nothing but the count): mask the longer ones, a prefix of plain_by_chars (none
      // without a bound), and try only the others (quotes, escapes, control bytes, specials).
      size_t longer = 0;
      for (; longer < t.plain_by_chars.size(); ++longer) {
        const int32_t id = t.plain_by_chars[longer];
        if (t.chars[size_t(id)] <= budget) break;
        if (size_t(id) < n) logits[size_t(id)] = kNegInf;
      }
      any = longer < t.plain_by_chars.size();
      for (int32_t id : t.not_plain) {
        if (size_t(id) >= n) continue;
        if (Allowed(id)) any = true;
        else logits[size_t(id)] = kNegInf;
      }
    } else {
      // Elsewhere few tokens fit: walk the trie, one matcher step per node, pruning a subtree
      // at the first byte that cannot follow; keep the logits of the ids found, mask the rest.
      std::vector<std::pair<int32_t, float>> keep;
      const TokenTable::Trie& tr = t.trie;
      size_t steps = 0;
      auto walk = [&](auto& self, int32_t node, const Matcher& m) -> void {
        for (int32_t c = tr.first_child[size_t(node)]; c >= 0; c = tr.next_sibling[size_t(c)]) {
          ++steps;
          Matcher next = m;
          if (!next.Accept(tr.byte[size_t(c)])) continue;
          for (int32_t k = 0; k < tr.end_count[size_t(c)]; ++k) {
            const int32_t id = tr.ends[size_t(tr.end_begin[size_t(c)] + k)];
            if (size_t(id) < n) keep.emplace_back(id, logits[size_t(id)]);
          }
          self(self, c, next);
        }
      };
      walk(walk, 0, matcher_);
      // A regex state that took a long walk: later masks under this regex use its index.
      if (slot != nullptr && !slot->tried && steps > kIndexAfterSteps) {
        slot->tried = true;
        slot->index = RegexTokenIndex::Build(*view.re, t, view.plain_only);
      }
      if (matcher_.can_end())
        for (int32_t e : t.eos_ids)
          if (e >= 0 && size_t(e) < n) keep.emplace_back(e, logits[size_t(e)]);
      std::fill(logits.begin(), logits.begin() + std::ptrdiff_t(n), kNegInf);
      for (const auto& [id, v] : keep) logits[size_t(id)] = v;
      any = !keep.empty();
    }
    if (any) return false;
    // Nothing can continue the output (a vocabulary without the needed bytes): end it rather
    // than draw from an empty set. The caller sees the truncated text.
    SetEosZero(logits);
    return true;
  }

  // The table seen through a regex (RegexView's), built once a byte-trie walk under it took
  // more than kIndexAfterSteps steps, and kept for the request (Mask runs on one thread at a
  // time: the sampler's). Null where not built or too large to build.
  struct IndexSlot {
    bool tried = false;
    std::unique_ptr<RegexTokenIndex> index;
  };
  static constexpr size_t kIndexAfterSteps = 20000;

  std::shared_ptr<const TokenTable> table_;
  std::shared_ptr<const void> owner_;
  Matcher matcher_;
  mutable std::map<std::pair<const Regex*, bool>, IndexSlot> indexes_;
  // Allowed ids per matcher state (mask_key), as bits over the row; `fallback`: nothing could
  // continue and EOS was let through at 0. Cleared when full (a request's distinct states).
  struct CachedMask {
    std::vector<uint64_t> bits;
    bool fallback = false;
  };
  static constexpr size_t kMaxCachedMasks = 256;
  mutable std::unordered_map<int64_t, CachedMask> mask_cache_;
};

}  // namespace pg::runtime
