// Serialisable descriptors exchanged between ranks before any transfer:
//  * EndpointAddress — the raw libfabric names of every endpoint of every domain of one
//    engine, plus the provider they belong to. Peers insert them into their address vectors.
//  * MemoryDescriptor — a remote-writable registration: its base (a virtual address when the
//    provider uses FI_MR_VIRT_ADDR, otherwise 0 and remote addresses are offsets), its length
//    and one protection key per domain.
// Both travel as bytes (through the rendezvous store). Deserialisation validates magic,
// version, exact length, provider, shape and an FNV-1a checksum, and throws pg::Error
// (kMalformed) on anything wrong: bytes from another process are never trusted.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace pg::comm {

struct EndpointAddress {
  std::string provider;             // e.g. "tcp;ofi_rxm"
  uint32_t num_domains = 0;         // >= 1
  uint32_t endpoints_per_domain = 0;// >= 1
  uint32_t name_bytes = 0;          // length of one raw endpoint name
  // [num_domains][endpoints_per_domain][name_bytes] raw fi_getname() output.
  std::vector<uint8_t> names;
  // A small remote-writable "landing" region per engine, target of zero-byte immediates
  // (barriers): its base (0 when offsets are used) and one key per domain.
  uint64_t landing_base = 0;
  std::vector<uint64_t> landing_keys;

  std::span<const uint8_t> Name(uint32_t domain, uint32_t endpoint) const;
  std::vector<uint8_t> Serialize() const;
  static EndpointAddress Deserialize(std::span<const uint8_t> bytes);
};

struct MemoryDescriptor {
  uint64_t base = 0;          // remote virtual address if virt_addr, else 0
  uint64_t length_bytes = 0;  // > 0
  bool virt_addr = false;     // provider used FI_MR_VIRT_ADDR at registration
  std::vector<uint64_t> keys; // one per domain of the owning engine

  // Address to put in fi_rma_iov for `offset` bytes into the region.
  uint64_t RemoteAddress(uint64_t offset) const { return (virt_addr ? base : 0) + offset; }

  std::vector<uint8_t> Serialize() const;
  static MemoryDescriptor Deserialize(std::span<const uint8_t> bytes);
};

// FNV-1a 64-bit; also used by tests to hash tokens.
uint64_t Fnv1a64(std::span<const uint8_t> bytes, uint64_t seed = 0xcbf29ce484222325ull);

}  // namespace pg::comm
