// transfer_bench: TransferEngine performance, measured side by side with libfabric's own
// fi_pingpong on the same provider in the same run.
//
//   transfer_bench write   [--provider=P] [--max-bytes=16777216] [--pingpong=1]
//   transfer_bench raw     [--provider=P] [--max-bytes=16777216]   (provider alone, no engine)
//   transfer_bench scatter [--provider=P] [--peers=8,16,32] [--bytes=64] [--rounds=2000]
//   transfer_bench a2a     [--provider=P] [--worlds=2,4,8] [--tokens=128] [--hidden=7168]
//                          [--top-k=8] [--experts=256] [--iters=30]
// Common: --spin=1 busy-polls (progress threads and waiters; only with a core per thread),
// --low-latency=0 turns the engine's direct posts, polling waiters and injected writes off
// (proxy thread only), --inject=0 posts every write with a completion (write and raw modes),
// --fi-pingpong=CMD runs fi_pingpong through CMD (e.g. a bundled loader).
//
// The tool forks its own ranks (bootstrap through the TCP store on 127.0.0.1) and prints one
// table per mode. Latency = half a ping-pong round trip of write+immediate (what fi_pingpong
// reports as usec/xfer); stream bandwidth = back-to-back writes, one immediate each.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/transfer/all_to_all.h"
#include "comm/transfer/engine.h"
#include "comm/transfer/rendezvous.h"
#include "core/dtype.h"
#include "core/log.h"
#include "core/status.h"

using namespace pg;
using namespace pg::comm;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

std::map<std::string, std::string> g_flags;

std::string Flag(const std::string& name, const std::string& def) {
  auto it = g_flags.find(name);
  return it == g_flags.end() ? def : it->second;
}
std::vector<uint64_t> FlagList(const std::string& name, const std::string& def) {
  std::vector<uint64_t> out;
  std::stringstream ss(Flag(name, def));
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stoull(item));
  return out;
}
double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

bool LowLatency() { return Flag("low-latency", "1") == "1"; }

// Waits until `count` immediates `imm` are consumed. Low-latency path (the default): the
// engine's own wait, which polls the fabric from this thread (for up to 1 s with --spin=1,
// else 50 µs) before sleeping. --low-latency=0 (proxy only: every libfabric call on the
// progress thread): spinning on the lock-free arrival count (--spin=1, for machines with a
// core per thread) or blocking on the counter's condition variable.
void SpinImm(TransferEngine& e, uint32_t imm, int64_t count) {
  static const bool spin = Flag("spin", "0") == "1";
  if (!spin || LowLatency()) return e.imms().Wait(imm, count, 30s);
  const auto deadline = Clock::now() + 30s;
  for (;;) {
    const uint64_t seen = e.imms().arrivals();
    if (e.imms().TryConsume(imm, count)) return;
    while (e.imms().arrivals() == seen) {
      PG_ENSURE(Clock::now() < deadline, kCancelled, "benchmark: immediates missing");
    }
  }
}

struct Rank {
  BootstrapConfig boot;
  std::unique_ptr<TcpStore> store;
  std::unique_ptr<TransferEngine> engine;
  PeerGroup group;
};

Rank Connect(int rank, int world, uint16_t port) {
  Rank r;
  r.boot.rank = rank;
  r.boot.world_size = world;
  r.boot.store_port = port;
  r.store = std::make_unique<TcpStore>(r.boot);
  TransferEngineConfig ec;
  ec.provider.provider = Flag("provider", "tcp;ofi_rxm");
  const bool spin = Flag("spin", "0") == "1";
  ec.spin_before_sleep_us = spin ? 1'000'000 : 200;
  ec.direct_post = LowLatency();
  ec.inject_writes = LowLatency() && Flag("inject", "1") == "1";
  ec.waiter_spin_us = !LowLatency() ? 0 : spin ? 1'000'000 : 50;
  ec.op_timeout = 30s;
  r.engine = std::make_unique<TransferEngine>(ec);
  std::vector<EndpointAddress> addrs;
  for (auto& b : r.store->AllGather("addr", r.engine->LocalAddress().Serialize())) {
    addrs.push_back(EndpointAddress::Deserialize(b));
  }
  r.group = r.engine->ResolvePeers(addrs);
  return r;
}

// Forks `world` ranks running fn(rank, world, port); returns true when all exit 0.
template <typename Fn>
bool Spawn(int world, Fn fn) {
  const uint16_t port = uint16_t(20000 + (::getpid() * 7 + world * 131) % 30000);
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) {
      int code = 0;
      try {
        fn(r, world, port);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        code = 1;
      }
      std::fflush(stdout);
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  bool ok = true;
  for (pid_t p : pids) {
    int status = 0;
    ::waitpid(p, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  return ok;
}

// fi_pingpong on the same provider: half round trip (usec/xfer) per size, or -1.
double FiPingpong(const std::string& provider, uint64_t bytes, int iters) {
  const int port = 40000 + int(::getpid() % 20000);
  std::string base = Flag("fi-pingpong", "fi_pingpong") + " -p '" + provider + "' -e rdm -I " + std::to_string(iters) +
                     " -S " + std::to_string(bytes);
  std::string server = base + " -B " + std::to_string(port) + " >/dev/null 2>&1 &";
  if (std::system(server.c_str()) != 0) return -1;
  std::this_thread::sleep_for(300ms);
  std::string client = base + " -P " + std::to_string(port) + " 127.0.0.1 2>/dev/null";
  FILE* f = ::popen(client.c_str(), "r");
  if (!f) return -1;
  char line[512];
  double usec = -1;
  while (std::fgets(line, sizeof(line), f)) {
    char b[32], sent[32], ack[32], total[32], time[32];
    double mbps, us;
    if (std::sscanf(line, "%31s %31s %31s %31s %31s %lf %lf", b, sent, ack, total, time, &mbps,
                    &us) == 7 &&
        std::isdigit(uint8_t(b[0]))) {
      usec = us;
    }
  }
  ::pclose(f);
  std::this_thread::sleep_for(100ms);
  return usec;
}

// 8 B, 32 B, ... (x4) and max_bytes itself.
std::vector<uint64_t> Sizes(uint64_t max_bytes) {
  std::vector<uint64_t> out;
  for (uint64_t b = 8; b < max_bytes; b *= 4) out.push_back(b);
  out.push_back(max_bytes);
  return out;
}

int Iterations(uint64_t bytes) {
  return int(std::clamp<uint64_t>((256ull << 20) / std::max<uint64_t>(bytes, 1) / 16, 20, 2000));
}

void WriteRank(int rank, int world, uint16_t port) {
  Rank r = Connect(rank, world, port);
  const uint64_t max_bytes = std::stoull(Flag("max-bytes", "16777216"));
  std::vector<uint8_t> buf(max_bytes * 2, uint8_t(rank + 1));
  auto mr = r.engine->Register(buf.data(), buf.size(), true);
  auto peer_desc = MemoryDescriptor::Deserialize(
      r.store->AllGather("mr", r.engine->Describe(mr).Serialize())[1 - rank]);
  auto remote = r.engine->Import(peer_desc);
  const ResolvedPeer& peer = r.group[1 - rank];
  if (rank == 0) std::printf("%10s %12s %12s %12s\n", "bytes", "lat_us", "pp_MB/s", "stream_MB/s");
  for (uint64_t b : Sizes(max_bytes)) {
    auto req = r.engine->BuildWrite({&mr, 0, b, &peer, &remote, max_bytes, 1u});
    const int iters = Iterations(b);
    // Ping-pong: rank 0 writes, rank 1 answers each arrival with a write back.
    double lat_us = 0;
    for (int phase = 0; phase < 2; ++phase) {  // phase 0 = warm-up
      const int n = phase == 0 ? 5 : iters;
      r.store->Barrier("pp" + std::to_string(b) + "_" + std::to_string(phase));
      auto t0 = Clock::now();
      for (int i = 0; i < n; ++i) {
        if (rank == 0) {
          r.engine->Submit(req, {});
          SpinImm(*r.engine, 1, 1);
        } else {
          SpinImm(*r.engine, 1, 1);
          r.engine->Submit(req, {});
        }
      }
      lat_us = Seconds(t0, Clock::now()) * 1e6 / n / 2;
    }
    // Stream: rank 0 posts `n` writes, rank 1 acknowledges once all arrived.
    const int n = std::max(iters, 8);
    r.store->Barrier("st" + std::to_string(b));
    auto t0 = Clock::now();
    if (rank == 0) {
      OpCounter done;
      for (int i = 0; i < n; ++i) r.engine->Submit(req, {nullptr, &done});
      SpinImm(*r.engine, 2, 1);
      done.Wait(n, 30s);
    } else {
      SpinImm(*r.engine, 1, n);
      auto ack = r.engine->BuildWrite({&mr, 0, 8, &peer, &remote, max_bytes, 2u});
      r.engine->Submit(ack, {});
    }
    const double stream = double(b) * n / Seconds(t0, Clock::now()) / 1e6;
    if (rank == 0) std::printf("%10lu %12.2f %12.2f %12.2f\n", b, lat_us, b / lat_us, stream);
    std::fflush(stdout);
  }
  std::printf("# rank %d: %lu direct posts (%lu injected), %lu events delivered by waiters, "
              "%lu EAGAIN\n", rank, r.engine->num_direct_posts(), r.engine->num_injected(),
              r.engine->num_caller_deliveries(), r.engine->num_backpressure());
  r.store->Barrier("end");
  r.store->Finalize();
}

// The provider alone, one thread per process, no engine: each side posts write+imm and polls
// its CQ until the peer's immediate arrives. The floor the engine's write latency can reach
// on this provider (fi_pingpong measures send/recv, a different protocol).
void RawRank(int rank, int world, uint16_t port) {
  (void)world;
  BootstrapConfig boot;
  boot.rank = rank;
  boot.world_size = 2;
  boot.store_port = port;
  TcpStore store(boot);
  ProviderConfig pc;
  pc.provider = Flag("provider", "tcp;ofi_rxm");
  auto p = OpenLibfabricProvider(pc);
  const uint64_t max_bytes = std::stoull(Flag("max-bytes", "16777216"));
  std::vector<uint8_t> buf(max_bytes * 2, uint8_t(rank + 1));
  LocalRegion lr = p->Register(buf.data(), buf.size(), true, uint64_t(rank + 1));
  // Name, then (base, key) of the peer's region.
  const PeerAddr peer = p->InsertPeer(store.AllGather("raw_name", p->LocalNames())[1 - rank]);
  std::vector<uint8_t> mine(16);
  const uint64_t base = p->info().mr_virt_addr ? reinterpret_cast<uint64_t>(buf.data()) : 0;
  std::memcpy(mine.data(), &base, 8);
  std::memcpy(mine.data() + 8, &lr.key, 8);
  const auto theirs = store.AllGather("raw_mr", mine)[1 - rank];
  uint64_t peer_base = 0, peer_key = 0;
  std::memcpy(&peer_base, theirs.data(), 8);
  std::memcpy(&peer_key, theirs.data() + 8, 8);
  struct alignas(16) Ctx { uint8_t bytes[kProviderContextBytes]; };
  std::vector<Ctx> contexts(1024);  // a ring: far more than can be in flight in a ping-pong
  size_t next_ctx = 0;
  std::vector<ProviderEvent> events;
  int64_t imms = 0;
  auto poll = [&] {
    events.clear();
    p->Poll(events);
    for (const auto& ev : events) {
      PG_ENSURE(ev.kind != ProviderEvent::kLocalError, kIo, "raw write failed: {}", ev.error);
      imms += ev.kind == ProviderEvent::kRemoteImm;
    }
  };
  const bool inject = Flag("inject", "1") == "1";
  auto post = [&](uint64_t bytes) {
    WriteOp op{buf.data(), bytes, lr.desc, peer, peer_base + max_bytes, peer_key, true, 1};
    if (inject && bytes <= p->info().inject_bytes) {
      while (p->InjectWrite(0, op) == PostResult::kAgain) poll();
      return;
    }
    while (p->PostWrite(0, op, &contexts[next_ctx % contexts.size()]) == PostResult::kAgain) {
      poll();
    }
    ++next_ctx;
  };
  auto await = [&](int64_t n) {
    const auto deadline = Clock::now() + 30s;
    while (imms < n) {
      poll();
      PG_ENSURE(Clock::now() < deadline, kCancelled, "raw: immediates missing");
    }
  };
  if (rank == 0) {
    std::printf("# inject %s (provider inject size %zu B)\n", inject ? "on" : "off",
                p->info().inject_bytes);
    std::printf("%10s %12s\n", "bytes", "raw_lat_us");
  }
  for (uint64_t b : Sizes(max_bytes)) {
    const int iters = Iterations(b);
    double lat_us = 0;
    for (int phase = 0; phase < 2; ++phase) {
      const int n = phase == 0 ? 5 : iters;
      store.Barrier("raw" + std::to_string(b) + "_" + std::to_string(phase));
      imms = 0;
      auto t0 = Clock::now();
      for (int i = 1; i <= n; ++i) {
        if (rank == 0) {
          post(b);
          await(i);
        } else {
          await(i);
          post(b);
        }
      }
      lat_us = Seconds(t0, Clock::now()) * 1e6 / n / 2;
      // Drain the last local completions before the barrier.
      for (int k = 0; k < 100; ++k) poll();
    }
    if (rank == 0) std::printf("%10lu %12.2f\n", b, lat_us);
    std::fflush(stdout);
  }
  store.Barrier("raw_end");
  store.Finalize();
  p->Deregister(lr);
}

void ScatterRank(int rank, int world, uint16_t port) {
  Rank r = Connect(rank, world, port);
  const uint64_t bytes = std::stoull(Flag("bytes", "64"));
  const int rounds = std::stoi(Flag("rounds", "2000"));
  const int peers = world - 1;
  std::vector<uint8_t> buf(bytes * world, uint8_t(rank));
  auto mr = r.engine->Register(buf.data(), buf.size(), true);
  auto all = r.store->AllGather("mr", r.engine->Describe(mr).Serialize());
  std::vector<RemoteMemory> remote;
  for (auto& b : all) remote.push_back(r.engine->Import(MemoryDescriptor::Deserialize(b)));
  r.store->Barrier("go");
  if (rank == 0) {
    // Built once; each round resubmits the same scatter (peer i at its own offset).
    std::vector<WriteRequest> scatter;
    for (int p = 1; p < world; ++p) {
      scatter.push_back(r.engine->BuildWrite({&mr, uint64_t(p) * bytes, bytes, &r.group[p],
                                              &remote[p], 0, 3u}));
    }
    OpCounter done;
    auto t0 = Clock::now();
    for (int i = 0; i < rounds; ++i) {
      r.engine->SubmitBatch(scatter, {nullptr, &done});
      if (i >= 64) {  // at most 64 scatters in flight
        while (done.done + done.failed < i - 63) std::this_thread::yield();
      }
    }
    done.Wait(rounds, 60s);
    SpinImm(*r.engine, 4, peers);
    const double s = Seconds(t0, Clock::now());
    std::printf("scatter peers=%d bytes=%lu rounds=%d: %.0f scatters/s, %.3f M msgs/s\n", peers,
                bytes, rounds, rounds / s, rounds * double(peers) / s / 1e6);
  } else {
    SpinImm(*r.engine, 3, rounds);
    auto ack = r.engine->BuildWrite({&mr, 0, 8, &r.group[0], &remote[0], 0, 4u});
    r.engine->Submit(ack, {});
  }
  r.store->Barrier("end");
  r.store->Finalize();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void A2aRank(int rank, int world, uint16_t port) {
  Rank r = Connect(rank, world, port);
  const uint32_t tokens = std::stoul(Flag("tokens", "128"));
  const uint32_t hidden = std::stoul(Flag("hidden", "7168"));
  const uint32_t top_k = std::stoul(Flag("top-k", "8"));
  const uint32_t experts = std::stoul(Flag("experts", "256"));
  const int iters = std::stoi(Flag("iters", "30"));
  AllToAllConfig c;
  c.num_experts = experts;
  c.max_tokens = tokens;
  c.top_k = top_k;
  c.dispatch_bytes = hidden + 4 * ((hidden + 127) / 128);  // fp8 e4m3 + fp32 scale per 128
  c.combine_bytes = 2 * hidden;                            // bf16
  c.spec_tokens = std::stoul(Flag("spec", "16"));
  c.timeout = 30s;
  AllToAll a2a(*r.engine, r.group, *r.store, uint32_t(rank), c);
  std::mt19937 rng(rank + 1);
  std::vector<uint32_t> ex;
  std::vector<uint32_t> all(experts);
  std::iota(all.begin(), all.end(), 0);
  for (uint32_t t = 0; t < tokens; ++t) {
    std::shuffle(all.begin(), all.end(), rng);
    ex.insert(ex.end(), all.begin(), all.begin() + top_k);
  }
  std::vector<uint8_t> payload(size_t(tokens) * c.dispatch_bytes);
  for (auto& b : payload) b = uint8_t(rng());
  std::vector<float> weights(size_t(tokens) * top_k, 0.125f), out(size_t(tokens) * hidden);
  std::vector<double> dispatch_us, combine_us;
  for (int i = 0; i < iters + 3; ++i) {
    auto t0 = Clock::now();
    a2a.DispatchSend({tokens, ex, payload});
    const auto& got = a2a.DispatchRecv();
    auto t1 = Clock::now();
    auto ci = a2a.combine_input();
    std::memset(ci.data(), 0x3c, ci.size());
    auto t2 = Clock::now();
    a2a.CombineSend();
    a2a.CombineRecv(weights, out);
    auto t3 = Clock::now();
    (void)got;
    if (i >= 3) {
      dispatch_us.push_back(Seconds(t0, t1) * 1e6);
      combine_us.push_back(Seconds(t2, t3) * 1e6);
    }
  }
  // The host weighted sum alone (same shape, no transfer), to separate it from combine.
  std::vector<uint16_t> ys(size_t(tokens) * top_k * hidden, 0x3c3c);
  std::vector<double> sum_us;
  for (int i = 0; i < 5; ++i) {
    auto s0 = Clock::now();
    for (uint32_t t = 0; t < tokens; ++t) {
      float* o = out.data() + size_t(t) * hidden;
      std::fill(o, o + hidden, 0.0f);
      for (uint32_t k = 0; k < top_k; ++k) {
        const uint16_t* x = ys.data() + (size_t(t) * top_k + k) * hidden;
        for (uint32_t h = 0; h < hidden; ++h) o[h] += weights[t * top_k + k] * Bf16ToF32(x[h]);
      }
    }
    sum_us.push_back(Seconds(s0, Clock::now()) * 1e6);
  }
  std::printf("a2a world=%d rank=%d tokens=%u hidden=%u top_k=%u: dispatch median %.0f us, "
              "combine median %.0f us (incl. weighted sum %.0f us and barrier)\n",
              world, rank, tokens, hidden, top_k, Median(dispatch_us), Median(combine_us),
              Median(sum_us));
  r.store->Barrier("end");
  r.store->Finalize();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: transfer_bench write|scatter|a2a [--flag=value ...]\n");
    return 2;
  }
  const std::string mode = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    auto eq = a.find('=');
    if (a.rfind("--", 0) != 0 || eq == std::string::npos) {
      std::fprintf(stderr, "bad flag %s\n", a.c_str());
      return 2;
    }
    g_flags[a.substr(2, eq - 2)] = a.substr(eq + 1);
  }
  SetLogLevel("warn");
  const std::string provider = Flag("provider", "tcp;ofi_rxm");
  if (mode == "raw") {
    std::printf("# provider %s alone (no engine)\n", provider.c_str());
  } else {
    std::printf("# provider %s, %s path\n", provider.c_str(),
                LowLatency() ? "low-latency (direct post, polling waiters, inject)"
                             : "proxy-only");
  }
  std::fflush(stdout);
  if (mode == "write") {
    bool ok = Spawn(2, WriteRank);
    if (Flag("pingpong", "1") == "1") {
      std::printf("# fi_pingpong -p '%s' -e rdm (msg send/recv), same sizes\n", provider.c_str());
      std::printf("%10s %12s %12s\n", "bytes", "lat_us", "pp_MB/s");
      const uint64_t max_bytes = std::stoull(Flag("max-bytes", "16777216"));
      for (uint64_t b : Sizes(max_bytes)) {
        double us = FiPingpong(provider, b, Iterations(b));
        std::printf("%10lu %12.2f %12.2f\n", b, us, us > 0 ? b / us : 0.0);
        std::fflush(stdout);
      }
    }
    return ok ? 0 : 1;
  }
  if (mode == "raw") return Spawn(2, RawRank) ? 0 : 1;
  if (mode == "scatter") {
    bool ok = true;
    for (uint64_t peers : FlagList("peers", "8,16,32")) ok = Spawn(int(peers) + 1, ScatterRank) && ok;
    return ok ? 0 : 1;
  }
  if (mode == "a2a") {
    bool ok = true;
    for (uint64_t w : FlagList("worlds", "2,4,8")) ok = Spawn(int(w), A2aRank) && ok;
    return ok ? 0 : 1;
  }
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}
