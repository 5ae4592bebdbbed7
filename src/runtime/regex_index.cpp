#include "runtime/regex_index.h"

#include <utility>

#include "runtime/token_mask.h"

namespace pg::runtime {

std::unique_ptr<RegexTokenIndex> RegexTokenIndex::Build(const Regex& re, const TokenTable& t, bool plain_only) {
  std::unique_ptr<RegexTokenIndex> x(new RegexTokenIndex(re));
  const size_t k = x->classes_;
  x->child_.assign(k, -1);
  x->chars_.push_back(0);
  std::vector<int32_t> end_of(t.bytes.size(), -1);  // id -> its node
  for (size_t id = 0; id < t.bytes.size(); ++id) {
    const std::string& b = t.bytes[id];
    if (plain_only ? !t.plain[id] : (b.empty() || t.special[id] || t.IsEos(int32_t(id)))) continue;
    int32_t node = 0;
    for (char ch : b) {
      int32_t& slot = x->child_[size_t(node) * k + re.byte_class(uint8_t(ch))];
      if (slot < 0) {
        if ((x->chars_.size() + 1) * k > kMaxEntries) return nullptr;
        slot = int32_t(x->chars_.size());  // before the resize below moves child_
        x->chars_.push_back(x->chars_[size_t(node)] + ((uint8_t(ch) & 0xC0) != 0x80));
        x->child_.resize(x->child_.size() + k, -1);
      }
      node = x->child_[size_t(node) * k + re.byte_class(uint8_t(ch))];
    }
    end_of[id] = node;
  }
  // The ids by node: counts, offsets, then a stable fill (ids ascend within a node).
  x->ids_begin_.assign(x->chars_.size() + 1, 0);
  for (int32_t node : end_of)
    if (node >= 0) ++x->ids_begin_[size_t(node) + 1];
  for (size_t i = 1; i < x->ids_begin_.size(); ++i) x->ids_begin_[i] += x->ids_begin_[i - 1];
  x->ids_.resize(size_t(x->ids_begin_.back()));
  std::vector<int32_t> fill(x->ids_begin_.begin(), x->ids_begin_.end() - 1);
  for (size_t id = 0; id < end_of.size(); ++id)
    if (end_of[id] >= 0) x->ids_[size_t(fill[size_t(end_of[id])]++)] = int32_t(id);
  return x;
}

size_t RegexTokenIndex::Collect(int32_t state, uint32_t chars_left, std::span<uint8_t> kept) const {
  // Depth-first; a subtree is cut where the automaton dies or its code points exceed the
  // budget (they only grow along a path).
  size_t count = 0;
  std::vector<std::pair<int32_t, int32_t>> stack = {{0, state}};
  while (!stack.empty()) {
    const auto [node, s] = stack.back();
    stack.pop_back();
    for (size_t cls = 0; cls < classes_; ++cls) {
      const int32_t c = child_[size_t(node) * classes_ + cls];
      if (c < 0 || chars_[size_t(c)] > chars_left) continue;
      const int32_t next = re_->NextClass(s, uint8_t(cls));
      if (next == Regex::kDead) continue;
      if (uint64_t(chars_[size_t(c)]) + re_->min_chars(next) <= chars_left) {
        // Locals: the byte stores below may alias any member as far as the compiler knows.
        const int32_t* id = ids_.data() + ids_begin_[size_t(c)];
        const int32_t* const end = ids_.data() + ids_begin_[size_t(c) + 1];
        uint8_t* const k = kept.data();
        const size_t size = kept.size();
        size_t set = 0;
        for (; id != end; ++id)
          if (size_t(*id) < size) k[*id] = 1, ++set;
        count += set;
      }
      stack.emplace_back(c, next);
    }
  }
  return count;
}

}  // namespace pg::runtime
