// Feeds a text to a streaming parser in random byte-sized pieces (UTF-8 sequences and markers
// are cut anywhere), so every test also checks chunk-boundary independence.
#pragma once

#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace pg::parsers::testing {

inline std::vector<std::string> RandomSplit(std::string_view text, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::string> pieces;
  size_t pos = 0;
  while (pos < text.size()) {
    // seed 0: one byte at a time; otherwise pieces of 1..9 bytes.
    const size_t len = seed == 0 ? 1 : 1 + rng() % 9;
    pieces.emplace_back(text.substr(pos, len));
    pos += len;
  }
  return pieces;
}

}  // namespace pg::parsers::testing
