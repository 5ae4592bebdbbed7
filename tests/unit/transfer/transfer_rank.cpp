// One rank of a multi-process transfer test, launched by multiproc_test (fork/exec, or
// `ip netns exec`, or mpirun). Bootstrap from PEREGRINE_* / OMPI_* environment.
//
//   transfer_rank a2a  <provider> <rounds> <max_tokens> <hidden> <spec_tokens>
//   transfer_rank kill <provider> <max_tokens> <hidden>      (the last rank dies in round 2)
//
// a2a checks every round three ways: (1) the multiset of received record hashes equals the
// one a reference all-to-all made of plain sends delivers; (2) it equals what the oracle says
// each sender routed to this rank; (3) the combined output equals the oracle's exactly.
// Exit code 0 = all checks passed; messages on stderr.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "a2a_oracle.h"
#include "comm/transfer/all_to_all.h"
#include "comm/transfer/engine.h"
#include "comm/transfer/rendezvous.h"
#include "core/log.h"
#include "core/status.h"

using namespace pg;
using namespace pg::comm;
using Clock = std::chrono::steady_clock;

namespace {

struct World {
  BootstrapConfig boot;
  std::unique_ptr<TcpStore> store;
  std::unique_ptr<TransferEngine> engine;
  PeerGroup group;
};

World Connect(const std::string& provider, std::chrono::milliseconds timeout) {
  World w;
  w.boot = BootstrapFromEnv(BootstrapConfig{});
  w.store = std::make_unique<TcpStore>(w.boot);
  TransferEngineConfig ec;
  ec.provider.provider = provider;
  if (const char* host = std::getenv("PEREGRINE_FABRIC_HOST")) ec.provider.local_host = host;
  ec.op_timeout = timeout;
  w.engine = std::make_unique<TransferEngine>(ec);
  std::vector<EndpointAddress> addrs;
  for (const auto& bytes : w.store->AllGather("addr", w.engine->LocalAddress().Serialize())) {
    addrs.push_back(EndpointAddress::Deserialize(bytes));
  }
  w.group = w.engine->ResolvePeers(addrs);
  return w;
}

// Reference all-to-all with plain sends: rank r sends each peer one message holding every
// record (u32 src, u32 token, u32 expert, u32 k, payload) it routes there, packed by the test.
std::vector<uint64_t> ReferenceHashes(World& w, const test::A2aShape& s,
                                      const test::RankInput& in, std::chrono::milliseconds to) {
  const uint32_t me = uint32_t(w.boot.rank), W = s.world;
  const uint32_t per_rank = s.num_experts / W, rec = 16 + s.dispatch_bytes();
  std::vector<std::vector<uint8_t>> out(W);
  for (uint32_t r = 0; r < W; ++r) out[r].resize(4);  // u32 sender rank first
  for (uint32_t t = 0; t < in.num_tokens; ++t) {
    for (uint32_t k = 0; k < s.top_k; ++k) {
      const uint32_t e = in.experts[t * s.top_k + k];
      auto& m = out[e / per_rank];
      uint32_t head[4] = {me, t, e, k};
      m.insert(m.end(), reinterpret_cast<uint8_t*>(head), reinterpret_cast<uint8_t*>(head) + 16);
      const uint8_t* p = in.payload.data() + size_t(t) * s.dispatch_bytes();
      m.insert(m.end(), p, p + s.dispatch_bytes());
    }
  }
  const size_t max_msg = 4 + size_t(s.max_tokens) * s.top_k * rec;
  std::vector<uint8_t> send_buf(W * max_msg), recv_buf(W * max_msg);
  auto smr = w.engine->Register(send_buf.data(), send_buf.size(), false);
  auto rmr = w.engine->Register(recv_buf.data(), recv_buf.size(), false);
  OpCounter sends, recvs;
  std::vector<size_t> lens(W, 0);
  for (uint32_t i = 0; i + 1 < W; ++i) {
    w.engine->Recv(rmr, i * max_msg, max_msg,
                   {[&lens, i](const OpResult& r) { lens[i] = r.length_bytes; }, &recvs});
  }
  std::vector<uint64_t> hashes;
  auto add = [&](const uint8_t* m, size_t len) {
    for (size_t off = 4; off + rec <= len; off += rec) {
      uint32_t head[4];
      std::memcpy(head, m + off, 16);
      hashes.push_back(test::RecordHash(head[0], head[1], head[2], head[3], m + off + 16,
                                        s.dispatch_bytes()));
    }
  };
  for (uint32_t r = 0; r < W; ++r) {
    std::memcpy(out[r].data(), &me, 4);
    if (r == me) {
      add(out[r].data(), out[r].size());
      continue;
    }
    std::memcpy(send_buf.data() + r * max_msg, out[r].data(), out[r].size());
    w.engine->Send(w.group[r], smr, r * max_msg, out[r].size(), {nullptr, &sends});
  }
  sends.Wait(W - 1, to);
  recvs.Wait(W - 1, to);
  for (uint32_t i = 0; i + 1 < W; ++i) add(recv_buf.data() + i * max_msg, lens[i]);
  w.engine->Barrier(w.group, me, 777, to);  // everyone done before buffers go away
  w.engine->Deregister(smr);
  w.engine->Deregister(rmr);
  std::sort(hashes.begin(), hashes.end());
  return hashes;
}

int Fail(const std::string& msg) {
  std::fprintf(stderr, "FAIL: %s\n", msg.c_str());
  return 1;
}

int RunA2a(int argc, char** argv, bool kill_mode) {
  const std::string provider = argv[2];
  const std::chrono::milliseconds timeout(kill_mode ? 3000 : 15000);
  World w = Connect(provider, timeout);
  const uint32_t me = uint32_t(w.boot.rank);
  test::A2aShape s;
  s.world = uint32_t(w.boot.world_size);
  s.num_experts = 3 * s.world;
  s.top_k = std::min<uint32_t>(3, s.num_experts);
  uint32_t rounds = kill_mode ? 4 : uint32_t(std::atoi(argv[3]));
  s.max_tokens = uint32_t(std::atoi(argv[kill_mode ? 3 : 4]));
  s.hidden = uint32_t(std::atoi(argv[kill_mode ? 4 : 5]));
  AllToAllConfig ac;
  ac.num_experts = s.num_experts;
  ac.max_tokens = s.max_tokens;
  ac.top_k = s.top_k;
  ac.dispatch_bytes = s.dispatch_bytes();
  ac.combine_bytes = s.combine_bytes();
  ac.spec_tokens = kill_mode ? 4 : uint32_t(std::atoi(argv[6]));
  ac.timeout = timeout;
  AllToAll a2a(*w.engine, w.group, *w.store, me, ac);
  uint64_t total_records = 0;
  for (uint32_t round = 0; round < rounds; ++round) {
    auto in = test::MakeInput(s, me, round);
    auto t0 = Clock::now();
    try {
      a2a.DispatchSend({in.num_tokens, in.experts, in.payload});
      const auto& got = a2a.DispatchRecv();
      if (kill_mode && round == 2 && me == s.world - 1) {
        // Dies between dispatch and combine: peers are mid-exchange with it.
        std::fprintf(stderr, "rank %u: dying mid-transfer\n", me);
        std::fflush(stderr);
        _exit(0);
      }
      std::vector<uint64_t> hashes;
      for (const auto& r : got) {
        hashes.push_back(test::RecordHash(r.src_rank, r.header.src_token, r.header.expert,
                                          r.header.k, r.payload, s.dispatch_bytes()));
      }
      std::sort(hashes.begin(), hashes.end());
      // Oracle: regenerate every sender's input and pick what it routed here.
      std::vector<uint64_t> oracle;
      for (uint32_t src = 0; src < s.world; ++src) {
        auto sin = test::MakeInput(s, src, round);
        for (uint32_t t = 0; t < sin.num_tokens; ++t) {
          for (uint32_t k = 0; k < s.top_k; ++k) {
            uint32_t e = sin.experts[t * s.top_k + k];
            if (e / (s.num_experts / s.world) != me) continue;
            oracle.push_back(test::RecordHash(src, t, e, k,
                                              sin.payload.data() + size_t(t) * s.dispatch_bytes(),
                                              s.dispatch_bytes()));
          }
        }
      }
      std::sort(oracle.begin(), oracle.end());
      if (hashes != oracle) {
        return Fail(fmt::format("rank {} round {}: {} records received, oracle says {}", me,
                                round, hashes.size(), oracle.size()));
      }
      auto combine_in = a2a.combine_input();
      for (size_t i = 0; i < got.size(); ++i) {
        test::ExpertOutput(s, got[i].payload, got[i].header.expert,
                           reinterpret_cast<uint16_t*>(combine_in.data()) + i * s.hidden);
      }
      a2a.CombineSend();
      std::vector<float> out(size_t(in.num_tokens) * s.hidden);
      a2a.CombineRecv(in.weights, out);
      auto us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      if (out != test::ExpectedCombine(s, in)) {
        return Fail(fmt::format("rank {} round {}: combine differs from the oracle", me, round));
      }
      if (!kill_mode) {
        auto ref = ReferenceHashes(w, s, in, timeout);
        if (ref != hashes) {
          return Fail(fmt::format("rank {} round {}: {} records vs {} by plain sends", me,
                                  round, hashes.size(), ref.size()));
        }
      }
      total_records += hashes.size();
      std::fprintf(stderr, "rank %u round %u: %zu records in, dispatch+combine %.0f us\n", me,
                   round, hashes.size(), us);
    } catch (const Error& e) {
      auto ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (kill_mode && round >= 2) {
        std::fprintf(stderr, "rank %u: error after %.0f ms (timeout %lld ms): %s\n", me, ms,
                     (long long)timeout.count(), e.what());
        return ms <= double(timeout.count()) + 1500 ? 0 : 4;
      }
      return Fail(fmt::format("rank {} round {}: {}", me, round, e.what()));
    }
  }
  if (kill_mode) return Fail(fmt::format("rank {}: no error although a peer died", me));
  std::fprintf(stderr, "rank %u: OK, %llu records over %u rounds\n", me,
               (unsigned long long)total_records, rounds);
  w.store->Barrier("done");
  w.store->Finalize();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "a2a" && argc == 7) return RunA2a(argc, argv, false);
    if (mode == "kill" && argc == 5) return RunA2a(argc, argv, true);
    std::fprintf(stderr, "usage: see the header of transfer_rank.cpp\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAIL: %s\n", e.what());
    return 1;
  }
}
