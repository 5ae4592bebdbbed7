// A token table seen through one regex: the tokens' bytes mapped to the regex's byte classes
// and gathered in a trie over class sequences. Tokens whose bytes fall in the same classes move
// every automaton state alike, so a mask walks one path for all of them: a permissive pattern
// ([^\n]{0,200}, \S) merges the whole vocabulary into a few hundred nodes, where the byte trie
// takes a step for every node of every token. Restrictive patterns (few live paths) do as well
// on the byte trie, which needs no index: ByteConstraint builds one only after a walk of the
// byte trie proved long.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "runtime/regex.h"

namespace pg::runtime {

struct TokenTable;  // runtime/token_mask.h

class RegexTokenIndex {
 public:
  // The text tokens (not special, not EOS, non-empty); with plain_only only TokenTable::plain
  // ones (inside a JSON string, where they are written raw). Null when the class trie would
  // exceed kMaxEntries child slots (a pattern with many classes: the byte trie serves it).
  static std::unique_ptr<RegexTokenIndex> Build(const Regex& re, const TokenTable& table, bool plain_only);
  static constexpr size_t kMaxEntries = size_t(1) << 22;

  // Sets kept[id] = 1 for every indexed id (inside kept) whose bytes lead `state` to a live
  // state from which a match can end within `chars_left` code points, the token's own
  // included; returns how many it set.
  size_t Collect(int32_t state, uint32_t chars_left, std::span<uint8_t> kept) const;
  size_t nodes() const { return chars_.size(); }

 private:
  explicit RegexTokenIndex(const Regex& re) : re_(&re), classes_(re.classes()) {}
  const Regex* re_;
  size_t classes_;
  // Node 0 is the root; child_[node * classes_ + cls] (-1: none); chars_[node]: code points
  // (UTF-8 lead bytes) from the root; the ids spelled by node's path are
  // ids_[ids_begin_[node] .. ids_begin_[node + 1]).
  std::vector<int32_t> child_;
  std::vector<uint32_t> chars_;
  std::vector<int32_t> ids_begin_, ids_;
};

}  // namespace pg::runtime
