#include "comm/transfer/descriptor.h"

#include <cstring>

#include "core/status.h"

namespace pg::comm {
namespace {

constexpr uint32_t kAddressMagic = 0x41454750;  // "PGEA"
constexpr uint32_t kMemoryMagic = 0x444d4750;   // "PGMD"
constexpr uint16_t kVersion = 1;
constexpr uint32_t kMaxDomains = 64;
constexpr uint32_t kMaxEndpoints = 64;
constexpr uint32_t kMaxNameBytes = 4096;
constexpr uint32_t kMaxProviderChars = 256;

class Writer {
 public:
  template <typename T>
  void Put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out_.insert(out_.end(), p, p + sizeof(T));
  }
  void PutBytes(std::span<const uint8_t> b) { out_.insert(out_.end(), b.begin(), b.end()); }
  std::vector<uint8_t> Finish() {
    Put<uint64_t>(Fnv1a64(out_));
    return std::move(out_);
  }

 private:
  std::vector<uint8_t> out_;
};

// Bounds-checked reader; every failure is a kMalformed pg::Error naming `what`.
class Reader {
 public:
  Reader(std::span<const uint8_t> bytes, const char* what) : bytes_(bytes), what_(what) {
    PG_ENSURE(bytes.size() >= sizeof(uint64_t), kMalformed, "{}: {} bytes is too short", what,
              bytes.size());
    uint64_t stored;
    std::memcpy(&stored, bytes.data() + bytes.size() - 8, 8);
    body_ = bytes.first(bytes.size() - 8);
    PG_ENSURE(stored == Fnv1a64(body_), kMalformed, "{}: checksum mismatch", what);
  }
  template <typename T>
  T Get() {
    PG_ENSURE(pos_ + sizeof(T) <= body_.size(), kMalformed, "{}: truncated at byte {}", what_,
              pos_);
    T v;
    std::memcpy(&v, body_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::span<const uint8_t> GetBytes(size_t n) {
    PG_ENSURE(n <= body_.size() - pos_, kMalformed, "{}: truncated at byte {}", what_, pos_);
    auto s = body_.subspan(pos_, n);
    pos_ += n;
    return s;
  }
  void ExpectEnd() {
    PG_ENSURE(pos_ == body_.size(), kMalformed, "{}: {} trailing bytes", what_,
              body_.size() - pos_);
  }

 private:
  std::span<const uint8_t> bytes_, body_;
  const char* what_;
  size_t pos_ = 0;
};

}  // namespace

uint64_t Fnv1a64(std::span<const uint8_t> bytes, uint64_t seed) {
  uint64_t h = seed;
  for (uint8_t b : bytes) {
    h ^= b;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::span<const uint8_t> EndpointAddress::Name(uint32_t domain, uint32_t endpoint) const {
  PG_CHECK(domain < num_domains && endpoint < endpoints_per_domain, "name ({}, {}) out of range",
           domain, endpoint);
  size_t index = size_t(domain) * endpoints_per_domain + endpoint;
  return std::span<const uint8_t>(names).subspan(index * name_bytes, name_bytes);
}

std::vector<uint8_t> EndpointAddress::Serialize() const {
  PG_CHECK(names.size() == size_t(num_domains) * endpoints_per_domain * name_bytes);
  Writer w;
  w.Put(kAddressMagic);
  w.Put(kVersion);
  w.Put<uint16_t>(uint16_t(provider.size()));
  w.PutBytes({reinterpret_cast<const uint8_t*>(provider.data()), provider.size()});
  w.Put(num_domains);
  w.Put(endpoints_per_domain);
  w.Put(name_bytes);
  w.PutBytes(names);
  PG_CHECK(landing_keys.size() == num_domains);
  w.Put(landing_base);
  for (uint64_t k : landing_keys) w.Put(k);
  return w.Finish();
}

EndpointAddress EndpointAddress::Deserialize(std::span<const uint8_t> bytes) {
  Reader r(bytes, "endpoint address");
  PG_ENSURE(r.Get<uint32_t>() == kAddressMagic, kMalformed, "endpoint address: bad magic");
  uint16_t version = r.Get<uint16_t>();
  PG_ENSURE(version == kVersion, kMalformed, "endpoint address: version {} (want {})", version,
            kVersion);
  EndpointAddress a;
  uint16_t provider_chars = r.Get<uint16_t>();
  PG_ENSURE(provider_chars > 0 && provider_chars <= kMaxProviderChars, kMalformed,
            "endpoint address: provider name of {} chars", provider_chars);
  auto p = r.GetBytes(provider_chars);
  a.provider.assign(p.begin(), p.end());
  a.num_domains = r.Get<uint32_t>();
  a.endpoints_per_domain = r.Get<uint32_t>();
  a.name_bytes = r.Get<uint32_t>();
  PG_ENSURE(a.num_domains >= 1 && a.num_domains <= kMaxDomains, kMalformed,
            "endpoint address: {} domains", a.num_domains);
  PG_ENSURE(a.endpoints_per_domain >= 1 && a.endpoints_per_domain <= kMaxEndpoints, kMalformed,
            "endpoint address: {} endpoints per domain", a.endpoints_per_domain);
  PG_ENSURE(a.name_bytes >= 1 && a.name_bytes <= kMaxNameBytes, kMalformed,
            "endpoint address: name of {} bytes", a.name_bytes);
  auto n = r.GetBytes(size_t(a.num_domains) * a.endpoints_per_domain * a.name_bytes);
  a.names.assign(n.begin(), n.end());
  a.landing_base = r.Get<uint64_t>();
  for (uint32_t i = 0; i < a.num_domains; ++i) a.landing_keys.push_back(r.Get<uint64_t>());
  r.ExpectEnd();
  return a;
}

std::vector<uint8_t> MemoryDescriptor::Serialize() const {
  Writer w;
  w.Put(kMemoryMagic);
  w.Put(kVersion);
  w.Put<uint16_t>(virt_addr ? 1 : 0);
  w.Put(base);
  w.Put(length_bytes);
  w.Put<uint32_t>(uint32_t(keys.size()));
  for (uint64_t k : keys) w.Put(k);
  return w.Finish();
}

MemoryDescriptor MemoryDescriptor::Deserialize(std::span<const uint8_t> bytes) {
  Reader r(bytes, "memory descriptor");
  PG_ENSURE(r.Get<uint32_t>() == kMemoryMagic, kMalformed, "memory descriptor: bad magic");
  uint16_t version = r.Get<uint16_t>();
  PG_ENSURE(version == kVersion, kMalformed, "memory descriptor: version {} (want {})", version,
            kVersion);
  MemoryDescriptor d;
  uint16_t flags = r.Get<uint16_t>();
  PG_ENSURE(flags <= 1, kMalformed, "memory descriptor: unknown flags {:#x}", flags);
  d.virt_addr = flags == 1;
  d.base = r.Get<uint64_t>();
  d.length_bytes = r.Get<uint64_t>();
  PG_ENSURE(d.length_bytes > 0, kMalformed, "memory descriptor: empty region");
  PG_ENSURE(d.virt_addr || d.base == 0, kMalformed,
            "memory descriptor: offset-addressed region with base {:#x}", d.base);
  PG_ENSURE(d.base + d.length_bytes >= d.base, kMalformed, "memory descriptor: region wraps");
  uint32_t num_keys = r.Get<uint32_t>();
  PG_ENSURE(num_keys >= 1 && num_keys <= kMaxDomains, kMalformed,
            "memory descriptor: {} keys", num_keys);
  for (uint32_t i = 0; i < num_keys; ++i) d.keys.push_back(r.Get<uint64_t>());
  r.ExpectEnd();
  return d;
}

}  // namespace pg::comm
