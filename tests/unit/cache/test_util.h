// Shared helpers for cache tests: random token sequences and an executor model that applies
// copy ops to "page contents" so tests can check that the bookkeeping moved the right data.
#pragma once

#include <random>
#include <vector>

#include "cache/kv_cache.h"

namespace pg::cache::testing {

inline std::vector<int32_t> RandomTokens(std::mt19937& rng, size_t n) {
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % 50000);
  return t;
}

// Content of a page = the prefix key of the token page whose KV it holds (0 = garbage).
struct ContentModel {
  std::vector<uint64_t> device, host;
  ContentModel(int32_t num_pages, int32_t num_slots) : device(num_pages, 0), host(num_slots, 0) {}
  void Apply(const std::vector<CopyOp>& ops) {  // sequentially, in order
    for (const CopyOp& op : ops) {
      if (op.kind == CopyKind::kDeviceToHost) host.at(op.host_slot) = device.at(op.device_page);
      else device.at(op.device_page) = host.at(op.host_slot);
    }
  }
};

}  // namespace pg::cache::testing
