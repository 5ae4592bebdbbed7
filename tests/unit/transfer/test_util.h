// Helpers shared by the transfer tests: deterministic random bytes.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace pg::comm::test {

inline std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = uint8_t(rng());
  return out;
}

}  // namespace pg::comm::test
