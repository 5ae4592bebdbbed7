// Internal to runtime/regex*.cpp: a parsed pattern, before it becomes an automaton.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/regex.h"

namespace pg::runtime {

struct RegexAst {
  enum class Type : uint8_t {
    kSet,     // one code point from `ranges`
    kBytes,   // exactly `bytes` (guided_choice's literals)
    kCat,     // kids in order (none: the empty string)
    kAlt,     // one of kids
    kRepeat,  // kids[0] min..max times (max -1: unbounded)
  };
  using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;  // inclusive code point ranges
  struct Node {
    Type type = Type::kCat;
    Ranges ranges;               // kSet: sorted, disjoint, no surrogates
    std::string bytes;           // kBytes
    std::vector<int32_t> kids;
    int min = 0, max = -1;       // kRepeat
  };
  std::vector<Node> nodes;
  int32_t root = -1;

  int32_t Add(Node n) {
    nodes.push_back(std::move(n));
    return int32_t(nodes.size() - 1);
  }
};

// Code point sets: sorted, merged, surrogates (U+D800..U+DFFF) removed.
RegexAst::Ranges NormalizeRanges(RegexAst::Ranges r);
RegexAst::Ranges ComplementRanges(const RegexAst::Ranges& r);  // over all scalar values

// UTF-8 byte sequences (one byte from each range, in order) that encode exactly `ranges`.
using Utf8Seq = std::vector<std::pair<uint8_t, uint8_t>>;
std::vector<Utf8Seq> Utf8Sequences(const RegexAst::Ranges& ranges);

RegexAst ParseRegex(std::string_view pattern, Regex::Anchoring anchoring);

}  // namespace pg::runtime
