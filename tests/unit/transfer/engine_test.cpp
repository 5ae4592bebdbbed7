// TransferEngine between engines of one process (each with its own libfabric domain, so the
// provider really moves the bytes): writes with immediates, paged writes, scatter, barrier,
// send/recv, several domains and endpoints, bounds checks, and a dead peer timing out.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "comm/transfer/engine.h"
#include "core/status.h"
#include "test_util.h"

namespace pg::comm {
namespace {

using namespace std::chrono_literals;
using test::Cluster;
using test::Config;
using test::RandomBytes;

class EngineTest : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineTest, WriteWithImmediateDeliversBytes) {
  Cluster c(2, Config(GetParam()));
  auto src = RandomBytes(100'003, 1);
  std::vector<uint8_t> dst(120'000, 0xEE);
  auto smr = c.engines[0]->Register(src.data(), src.size(), false);
  auto dmr = c.engines[1]->Register(dst.data(), dst.size(), true);
  auto remote = c.engines[0]->Import(
      MemoryDescriptor::Deserialize(c.engines[1]->Describe(dmr).Serialize()));
  OpCounter counter;
  auto req = c.engines[0]->BuildWrite({&smr, 17, 77'777, &c.groups[0][1], &remote, 4321, 42u});
  c.engines[0]->Submit(req, {nullptr, &counter});
  counter.Wait(1, 5s);
  c.engines[1]->imms().Wait(42, 1, 5s);
  EXPECT_EQ(0, std::memcmp(dst.data() + 4321, src.data() + 17, 77'777));
  EXPECT_EQ(dst[4320], 0xEE);
  EXPECT_EQ(dst[4321 + 77'777], 0xEE);

  // The same request patched to another target range, completion by callback.
  std::atomic<int> calls{0};
  req.Patch(50'000, 100'000, 19'999);
  req.SetImm(43);
  c.engines[0]->Submit(req, {[&](const OpResult& r) { calls += r.ok ? 1 : 100; }, nullptr});
  c.engines[1]->imms().Wait(43, 1, 5s);
  EXPECT_EQ(0, std::memcmp(dst.data() + 100'000, src.data() + 50'000, 19'999));
  for (int i = 0; i < 500 && calls == 0; ++i) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(calls, 1);
}

TEST_P(EngineTest, PagedWriteFollowsIndicesAndStrides) {
  Cluster c(2, Config(GetParam()));
  constexpr size_t kPage = 1000, kSrcStride = 1111, kDstStride = 1500;
  auto src = RandomBytes(kSrcStride * 40, 2);
  std::vector<uint8_t> dst(kDstStride * 50 + 64, 0);
  auto smr = c.engines[0]->Register(src.data(), src.size(), false);
  auto dmr = c.engines[1]->Register(dst.data(), dst.size(), true);
  auto remote = c.engines[0]->Import(c.engines[1]->Describe(dmr));
  PagedWriteSpec spec;
  spec.src = &smr;
  spec.peer = &c.groups[0][1];
  spec.dst = &remote;
  spec.page_bytes = kPage;
  spec.src_base_offset = 3;
  spec.src_stride_bytes = kSrcStride;
  spec.dst_base_offset = 64;
  spec.dst_stride_bytes = kDstStride;
  spec.src_pages = {7, 0, 38, 12, 13, 21, 5};
  spec.dst_pages = {49, 1, 2, 30, 11, 0, 17};
  spec.imm = 7;
  OpCounter counter;
  c.engines[0]->SubmitPaged(spec, {nullptr, &counter});
  counter.Wait(1, 5s);
  c.engines[1]->imms().Wait(7, int64_t(spec.src_pages.size()), 5s);
  for (size_t i = 0; i < spec.src_pages.size(); ++i) {
    EXPECT_EQ(0, std::memcmp(dst.data() + 64 + spec.dst_pages[i] * kDstStride,
                             src.data() + 3 + spec.src_pages[i] * kSrcStride, kPage))
        << "page " << i;
  }
}

TEST_P(EngineTest, ScatterBarrierAndSendRecv) {
  constexpr int kN = 4;
  Cluster c(kN, Config(GetParam()));
  auto src = RandomBytes(9000, 3);
  auto smr = c.engines[0]->Register(src.data(), src.size(), false);
  std::vector<std::vector<uint8_t>> dst(kN, std::vector<uint8_t>(5000, 0));
  std::vector<MemoryRegion> dmr;
  std::vector<RemoteMemory> remote;
  for (int i = 0; i < kN; ++i) {
    dmr.push_back(c.engines[i]->Register(dst[i].data(), dst[i].size(), true));
    remote.push_back(c.engines[0]->Import(c.engines[i]->Describe(dmr[i])));
  }
  // Scatter: peer i gets src[i*2000, +1000+i) at offset 10*i, immediate 100+i.
  std::vector<WriteRequest> scatter;
  for (int i = 1; i < kN; ++i) {
    scatter.push_back(c.engines[0]->BuildWrite(
        {&smr, uint64_t(i) * 2000, uint64_t(1000 + i), &c.groups[0][i], &remote[i],
         uint64_t(10 * i), uint32_t(100 + i)}));
  }
  OpCounter counter;
  c.engines[0]->SubmitBatch(scatter, {nullptr, &counter});
  counter.Wait(1, 5s);
  for (int i = 1; i < kN; ++i) {
    c.engines[i]->imms().Wait(100 + i, 1, 5s);
    EXPECT_EQ(0, std::memcmp(dst[i].data() + 10 * i, src.data() + i * 2000, 1000 + i));
    EXPECT_EQ(c.engines[i]->imms().Available(100 + i), 0);  // exactly one arrived
  }
  // Barrier: every engine from its own thread, twice.
  for (int round = 0; round < 2; ++round) {
    std::vector<std::thread> threads;
    std::atomic<int> ok{0};
    for (int i = 0; i < kN; ++i) {
      threads.emplace_back([&, i] {
        c.engines[i]->Barrier(c.groups[i], uint32_t(i), 9, 5000ms);
        ++ok;
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(ok, kN);
  }
  // Send/recv: engine 2 receives two messages from engine 3 in order.
  std::vector<uint8_t> rbuf(4096, 0);
  auto rmr = c.engines[2]->Register(rbuf.data(), rbuf.size(), false);
  auto sbuf = RandomBytes(3000, 4);
  auto sm = c.engines[3]->Register(sbuf.data(), sbuf.size(), false);
  OpCounter recvs, sends;
  std::atomic<size_t> first_len{0};
  c.engines[2]->Recv(rmr, 0, 2048, {[&](const OpResult& r) { first_len = r.length_bytes; }, &recvs});
  c.engines[2]->Recv(rmr, 2048, 2048, {nullptr, &recvs});
  c.engines[3]->Send(c.groups[3][2], sm, 0, 1234, {nullptr, &sends});
  c.engines[3]->Send(c.groups[3][2], sm, 1234, 1766, {nullptr, &sends});
  sends.Wait(2, 5s);
  recvs.Wait(2, 5s);
  EXPECT_EQ(first_len, 1234u);
  EXPECT_EQ(0, std::memcmp(rbuf.data(), sbuf.data(), 1234));
  EXPECT_EQ(0, std::memcmp(rbuf.data() + 2048, sbuf.data() + 1234, 1766));
}

TEST_P(EngineTest, SeveralDomainsAndEndpointsAreAllPolled) {
  Cluster c(3, Config(GetParam(), /*domains=*/2, /*eps=*/2));
  auto src = RandomBytes(64 * 1024, 5);
  auto smr = c.engines[0]->Register(src.data(), src.size(), false);
  std::vector<std::vector<uint8_t>> dst(3, std::vector<uint8_t>(64 * 1024, 0));
  std::vector<RemoteMemory> remote(3);
  for (int i = 1; i < 3; ++i) {
    auto mr = c.engines[i]->Register(dst[i].data(), dst[i].size(), true);
    remote[i] = c.engines[0]->Import(c.engines[i]->Describe(mr));
  }
  // 64 chunk writes to each peer: they spread over both domains and all endpoints.
  std::vector<WriteRequest> reqs;
  for (int i = 1; i < 3; ++i) {
    for (int chunk = 0; chunk < 64; ++chunk) {
      reqs.push_back(c.engines[0]->BuildWrite({&smr, uint64_t(chunk) * 1024, 1024,
                                               &c.groups[0][i], &remote[i],
                                               uint64_t(chunk) * 1024, 5u}));
    }
  }
  OpCounter counter;
  c.engines[0]->SubmitBatch(reqs, {nullptr, &counter});
  counter.Wait(1, 5s);
  for (int i = 1; i < 3; ++i) {
    c.engines[i]->imms().Wait(5, 64, 5s);
    EXPECT_EQ(dst[i], src) << "peer " << i;
  }
}

// Far more writes than the provider's transmit queue holds, in one batch: the engine must
// keep the overflow queued on EAGAIN (and say so), and every write still lands exactly once.
TEST_P(EngineTest, BackpressureKeepsEveryWrite) {
  Cluster c(2, Config(GetParam()));
  constexpr size_t kWrites = 6000, kBytes = 333;
  auto src = RandomBytes(kWrites * kBytes, 9);
  std::vector<uint8_t> dst(kWrites * kBytes, 0);
  auto smr = c.engines[0]->Register(src.data(), src.size(), false);
  auto dmr = c.engines[1]->Register(dst.data(), dst.size(), true);
  auto remote = c.engines[0]->Import(c.engines[1]->Describe(dmr));
  auto base = c.engines[0]->BuildWrite({&smr, 0, kBytes, &c.groups[0][1], &remote, 0, 77u});
  std::vector<WriteRequest> reqs(kWrites, base);
  for (size_t i = 0; i < kWrites; ++i) {
    const size_t j = (i * 7919) % kWrites;  // scattered targets
    reqs[i].Patch(i * kBytes, j * kBytes, kBytes);
  }
  OpCounter counter;
  c.engines[0]->SubmitBatch(reqs, {nullptr, &counter});
  counter.Wait(1, 20s);
  c.engines[1]->imms().Wait(77, kWrites, 20s);
  EXPECT_EQ(c.engines[1]->imms().Available(77), 0);
  for (size_t i = 0; i < kWrites; ++i) {
    const size_t j = (i * 7919) % kWrites;
    ASSERT_EQ(0, std::memcmp(dst.data() + j * kBytes, src.data() + i * kBytes, kBytes)) << i;
  }
  EXPECT_GT(c.engines[0]->num_backpressure(), 0u) << "the provider never pushed back";
}

TEST_P(EngineTest, OutOfBoundsAndForeignDescriptorsAreRejected) {
  Cluster c(2, Config(GetParam()));
  std::vector<uint8_t> src(1000), dst(1000);
  auto smr = c.engines[0]->Register(src.data(), src.size(), false);
  auto dmr = c.engines[1]->Register(dst.data(), dst.size(), true);
  auto remote = c.engines[0]->Import(c.engines[1]->Describe(dmr));
  EXPECT_THROW(c.engines[0]->BuildWrite({&smr, 0, 1001, &c.groups[0][1], &remote, 0, {}}),
               Error);
  EXPECT_THROW(c.engines[0]->BuildWrite({&smr, 0, 10, &c.groups[0][1], &remote, 995, {}}),
               Error);
  EXPECT_THROW(c.engines[0]->BuildWrite({&smr, 0, 10, &c.groups[0][1], &remote, 0,
                                         TransferEngine::kBarrierBit | 1}),
               Error);
  EXPECT_THROW(c.engines[0]->Describe(smr), Error);  // not remote-accessible
  MemoryDescriptor two_keys = c.engines[1]->Describe(dmr);
  two_keys.keys.push_back(99);
  EXPECT_THROW(c.engines[0]->Import(two_keys), Error);
  EndpointAddress other = c.engines[1]->LocalAddress();
  other.provider = "verbs;ofi_rxm";
  EXPECT_THROW(c.engines[0]->ResolvePeers({other}), Error);
  other = c.engines[1]->LocalAddress();
  other.name_bytes += 1;
  other.names.resize(other.names.size() + 1);
  EXPECT_THROW(c.engines[0]->ResolvePeers({other}), Error);
}

// Over TCP only: shm maps the peer's memory into this very process, and libfabric 1.17's shm
// faults when that peer is destroyed in-process (the multi-process kill test covers shm).
class TcpEngineTest : public EngineTest {};

TEST_P(TcpEngineTest, DeadPeerGivesAnErrorWithinTheTimeout) {
  auto config = Config(GetParam());
  config.op_timeout = 1500ms;
  // Counters and registered buffers outlive the engines: the failed writes still report into
  // `counter` after its Wait threw (until the engine is destroyed).
  OpCounter warm, counter;
  std::vector<uint8_t> src(4096, 1), dst(4096);
  Cluster c(2, config);
  auto smr = c.engines[0]->Register(src.data(), src.size(), false);
  auto dmr = c.engines[1]->Register(dst.data(), dst.size(), true);
  auto remote = c.engines[0]->Import(c.engines[1]->Describe(dmr));
  auto req = c.engines[0]->BuildWrite({&smr, 0, 4096, &c.groups[0][1], &remote, 0, 1u});
  c.engines[0]->Submit(req, {nullptr, &warm});
  warm.Wait(1, 5s);
  c.engines[1].reset();  // the peer goes away
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 8; ++i) c.engines[0]->Submit(req, {nullptr, &counter});
  EXPECT_THROW(counter.Wait(8, 10s), Error);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_LT(elapsed, config.op_timeout + 1000ms);
  // And waiting for an immediate that never comes is an error too, not a hang.
  EXPECT_THROW(c.engines[0]->imms().Wait(12345, 1, 200ms), Error);
}

INSTANTIATE_TEST_SUITE_P(Providers, TcpEngineTest,
                         ::testing::Values("tcp;ofi_rxm", "net", "tcp;ofi_rxm+proxy"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& ch : n) if (ch == ';' || ch == '+') ch = '_';
                           return n;
                         });
INSTANTIATE_TEST_SUITE_P(Providers, EngineTest, ::testing::Values("tcp;ofi_rxm", "net", "shm"),
                         [](const auto& info) {
                           std::string n = info.param; for (auto& ch : n) if (ch == ';') ch = '_'; return n;
                         });
// The same tests with the low-latency path off: every post and every poll on the progress
// thread (the "+proxy" suffix, see test::Config).
INSTANTIATE_TEST_SUITE_P(ProxyOnly, EngineTest,
                         ::testing::Values("tcp;ofi_rxm+proxy", "shm+proxy"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& ch : n) if (ch == ';' || ch == '+') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace pg::comm
