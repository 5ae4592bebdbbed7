// Serialised endpoint addresses and memory descriptors: round trips, and every malformed
// input (each truncation, each flipped byte, wrong magic/version/shape) rejected with
// pg::Error(kMalformed) rather than trusted. Also ImmCounters semantics.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "comm/transfer/descriptor.h"
#include "comm/transfer/imm_counter.h"
#include "core/status.h"
#include "test_util.h"

namespace pg::comm {
namespace {

using namespace std::chrono_literals;

EndpointAddress SampleAddress() {
  EndpointAddress a;
  a.provider = "tcp;ofi_rxm";
  a.num_domains = 2;
  a.endpoints_per_domain = 3;
  a.name_bytes = 17;
  a.names = test::RandomBytes(2 * 3 * 17, 11);
  a.landing_base = 0;
  a.landing_keys = {5, 9};
  return a;
}

MemoryDescriptor SampleMemory() {
  MemoryDescriptor d;
  d.virt_addr = true;
  d.base = 0x7f0012345000ull;
  d.length_bytes = 123457;
  d.keys = {0xdeadbeefull, 77};
  return d;
}

void ExpectMalformed(const std::function<void()>& fn, const std::string& what) {
  try {
    fn();
    ADD_FAILURE() << what << ": accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kMalformed) << what << ": " << e.what();
  }
}

TEST(Descriptor, AddressRoundTrip) {
  EndpointAddress a = SampleAddress();
  EndpointAddress b = EndpointAddress::Deserialize(a.Serialize());
  EXPECT_EQ(b.provider, a.provider);
  EXPECT_EQ(b.num_domains, 2u);
  EXPECT_EQ(b.endpoints_per_domain, 3u);
  EXPECT_EQ(b.names, a.names);
  EXPECT_EQ(b.landing_keys, a.landing_keys);
  auto n = b.Name(1, 2);
  EXPECT_EQ(0, std::memcmp(n.data(), a.names.data() + 5 * 17, 17));
}

TEST(Descriptor, MemoryRoundTripAndAddressing) {
  MemoryDescriptor d = SampleMemory();
  MemoryDescriptor e = MemoryDescriptor::Deserialize(d.Serialize());
  EXPECT_EQ(e.base, d.base);
  EXPECT_EQ(e.length_bytes, d.length_bytes);
  EXPECT_EQ(e.keys, d.keys);
  EXPECT_EQ(e.RemoteAddress(100), d.base + 100);
  e.virt_addr = false;  // offset addressing (tcp, shm without FI_MR_VIRT_ADDR)
  EXPECT_EQ(e.RemoteAddress(100), 100u);
}

TEST(Descriptor, EveryTruncationAndEveryFlippedByteIsRejected) {
  for (const auto& bytes : {SampleAddress().Serialize(), SampleMemory().Serialize()}) {
    const bool is_address = bytes.size() == SampleAddress().Serialize().size();
    auto parse = [&](const std::vector<uint8_t>& b) {
      if (is_address) {
        EndpointAddress::Deserialize(b);
      } else {
        MemoryDescriptor::Deserialize(b);
      }
    };
    for (size_t n = 0; n < bytes.size(); ++n) {
      std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + n);
      ExpectMalformed([&] { parse(cut); }, "truncated to " + std::to_string(n));
    }
    for (size_t i = 0; i < bytes.size(); ++i) {
      auto bad = bytes;
      bad[i] ^= 0x5a;
      ExpectMalformed([&] { parse(bad); }, "byte " + std::to_string(i) + " flipped");
    }
    auto longer = bytes;
    longer.push_back(0);
    ExpectMalformed([&] { parse(longer); }, "one byte appended");
  }
}

TEST(Descriptor, WellChecksummedButInconsistentFieldsAreRejected) {
  // The checksum is right, the content is not: these must fail on their own merits.
  auto a = SampleAddress();
  a.num_domains = 0;
  a.names.clear();
  a.landing_keys.clear();
  ExpectMalformed([&] { EndpointAddress::Deserialize(a.Serialize()); }, "zero domains");
  auto m = SampleMemory();
  m.length_bytes = 0;
  ExpectMalformed([&] { MemoryDescriptor::Deserialize(m.Serialize()); }, "empty region");
  m = SampleMemory();
  m.virt_addr = false;  // offsets, but a non-zero base
  ExpectMalformed([&] { MemoryDescriptor::Deserialize(m.Serialize()); }, "base with offsets");
  m = SampleMemory();
  m.base = ~0ull - 10;  // wraps
  ExpectMalformed([&] { MemoryDescriptor::Deserialize(m.Serialize()); }, "wrapping region");
  m = SampleMemory();
  m.keys.clear();
  ExpectMalformed([&] { MemoryDescriptor::Deserialize(m.Serialize()); }, "no keys");
  // A memory descriptor is not an address and vice versa (magic).
  ExpectMalformed([&] { EndpointAddress::Deserialize(SampleMemory().Serialize()); }, "magic");
  ExpectMalformed([&] { MemoryDescriptor::Deserialize(SampleAddress().Serialize()); }, "magic");
}

TEST(ImmCounters, ArrivalsBeforeTheExpectedCountAreKept) {
  ImmCounters c;
  c.Arrive(7, 3);               // before anyone waits
  c.Wait(7, 2, 10ms);           // consumes two
  EXPECT_EQ(c.Available(7), 1);
  EXPECT_FALSE(c.TryConsume(7, 2));
  int fired = 0;
  c.Expect(7, 3, [&] { ++fired; });  // one present, two to go
  EXPECT_EQ(fired, 0);
  c.Arrive(7);
  EXPECT_EQ(fired, 0);
  c.Arrive(7);
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(c.Available(7), 0);
  c.Arrive(8, 5);  // other values are independent
  EXPECT_EQ(c.Available(7), 0);
  EXPECT_TRUE(c.TryConsume(8, 5));
}

TEST(ImmCounters, CancelledExpectationsNeverFire) {
  ImmCounters c;
  int fired = 0;
  c.Expect(3, 2, [&] { ++fired; });
  c.CancelExpectations(3);
  c.Arrive(3, 2);
  EXPECT_EQ(fired, 0);
  EXPECT_EQ(c.Available(3), 2);  // the arrivals stay for whoever asks next
}

TEST(ImmCounters, WaitWakesOnArrivalAndTimesOutWithAnError) {
  ImmCounters c;
  std::thread t([&] {
    std::this_thread::sleep_for(20ms);
    c.Arrive(1, 4);
  });
  c.Wait(1, 4, 5000ms);
  t.join();
  try {
    c.Wait(1, 1, 30ms);
    ADD_FAILURE() << "no timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCancelled);
  }
}

}  // namespace
}  // namespace pg::comm
