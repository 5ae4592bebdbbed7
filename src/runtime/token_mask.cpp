#include "runtime/token_mask.h"

#include <algorithm>
#include <string_view>

#include "core/status.h"

namespace pg::runtime {

TokenTable TokenTable::Make(std::vector<std::string> bytes, std::vector<uint8_t> special,
                            std::vector<int32_t> eos_ids) {
  PG_CHECK(special.size() == bytes.size(), "{} special flags for {} tokens", special.size(), bytes.size());
  TokenTable t{.bytes = std::move(bytes), .special = std::move(special), .plain = {}, .chars = {},
               .eos_ids = std::move(eos_ids)};
  t.plain.resize(t.bytes.size());
  t.chars.resize(t.bytes.size());
  std::vector<uint8_t> eos(t.bytes.size());  // EOS ids are masked by their own rule, never plain
  for (int32_t e : t.eos_ids)
    if (e >= 0 && size_t(e) < eos.size()) eos[size_t(e)] = 1;
  std::vector<int32_t> ids;  // the text ids (not special, not EOS, non-empty): the trie's
  for (size_t i = 0; i < t.bytes.size(); ++i) {
    const std::string& b = t.bytes[i];
    const bool text = !t.special[i] && !eos[i] && !b.empty();
    if (text) ids.push_back(int32_t(i));
    t.plain[i] = text && std::none_of(b.begin(), b.end(), [](char ch) {
      const auto c = uint8_t(ch);
      return c == '"' || c == '\\' || c < 0x20;
    });
    if (!t.plain[i]) t.not_plain.push_back(int32_t(i));
    t.chars[i] = uint8_t(std::min<size_t>(255, CodePoints(b)));
  }
  for (size_t i = 0; i < t.bytes.size(); ++i)
    if (t.plain[i]) t.plain_by_chars.push_back(int32_t(i));
  std::stable_sort(t.plain_by_chars.begin(), t.plain_by_chars.end(),
                   [&](int32_t a, int32_t b) { return t.chars[size_t(a)] > t.chars[size_t(b)]; });
  // The trie, from the text ids sorted by their bytes: equal spellings are adjacent, a prefix
  // comes before its extensions, and children are appended in increasing byte order.
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return t.bytes[size_t(a)] < t.bytes[size_t(b)] || (t.bytes[size_t(a)] == t.bytes[size_t(b)] && a < b);
  });
  TokenTable::Trie& tr = t.trie;
  std::vector<int32_t> last_child;
  auto add_node = [&](uint8_t c) {
    tr.first_child.push_back(-1), tr.next_sibling.push_back(-1), tr.byte.push_back(c);
    tr.end_begin.push_back(0), tr.end_count.push_back(0), last_child.push_back(-1);
    return int32_t(tr.byte.size() - 1);
  };
  add_node(0);                      // the root
  std::vector<int32_t> path = {0};  // path[k]: the node of the current spelling's first k bytes
  std::string_view prev;
  for (int32_t id : ids) {
    const std::string_view b = t.bytes[size_t(id)];
    size_t common = 0;
    while (common < prev.size() && common < b.size() && prev[common] == b[common]) ++common;
    path.resize(common + 1);
    for (size_t k = common; k < b.size(); ++k) {
      const int32_t parent = path.back(), n = add_node(uint8_t(b[k]));
      if (last_child[size_t(parent)] < 0) tr.first_child[size_t(parent)] = n;
      else tr.next_sibling[size_t(last_child[size_t(parent)])] = n;
      last_child[size_t(parent)] = n;
      path.push_back(n);
    }
    const int32_t node = path.back();
    if (tr.end_count[size_t(node)] == 0) tr.end_begin[size_t(node)] = int32_t(tr.ends.size());
    tr.ends.push_back(id);
    ++tr.end_count[size_t(node)];
    prev = b;
  }
  return t;
}

}  // namespace pg::runtime
