// Helpers shared by the transfer tests: deterministic random bytes, engine configs, and a set
// of in-process engines that all know each other.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "comm/transfer/engine.h"

namespace pg::comm::test {

inline std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = uint8_t(rng());
  return out;
}

// `provider` may end in "+proxy": the low-latency path off (no direct posts, waiters never
// poll, no injected writes), so every libfabric call runs on the progress thread.
inline TransferEngineConfig Config(const std::string& provider, uint32_t domains = 1,
                                   uint32_t eps = 1) {
  using namespace std::chrono_literals;
  TransferEngineConfig c;
  const auto plus = provider.find('+');
  c.provider.provider = provider.substr(0, plus);
  if (plus != std::string::npos) {
    c.direct_post = false;
    c.waiter_spin_us = 0;
    c.inject_writes = false;
  }
  c.provider.endpoints_per_domain = eps;
  c.num_domains = domains;
  c.op_timeout = 3000ms;
  return c;
}

// N engines that all know each other.
struct Cluster {
  std::vector<std::unique_ptr<TransferEngine>> engines;
  std::vector<PeerGroup> groups;  // groups[i]: engine i's view of everyone
  Cluster(int n, const TransferEngineConfig& config) {
    std::vector<EndpointAddress> addrs;
    for (int i = 0; i < n; ++i) {
      engines.push_back(std::make_unique<TransferEngine>(config));
      addrs.push_back(EndpointAddress::Deserialize(engines.back()->LocalAddress().Serialize()));
    }
    for (int i = 0; i < n; ++i) groups.push_back(engines[i]->ResolvePeers(addrs));
  }
};

}  // namespace pg::comm::test
