// TransferEngine: one-sided RDMA writes with immediates, scatter to peer groups, barriers and
// send/recv over a Provider (libfabric), after pplx-garden's TransferEngine.
//
// Threads and ownership:
//  * Each domain has a fabric lock: whoever holds it may call its Provider (the domain is
//    opened FI_THREAD_DOMAIN) and touch its pending/in-flight lists. One progress thread per
//    domain takes it in short passes: posts queued work in FIFO order, keeps items queued while
//    the provider says EAGAIN (backpressure), polls every endpoint, and fails work that
//    outlives `op_timeout` so a dead peer gives an error.
//  * Low-latency path (config.direct_post / waiter_spin_us): a submitter whose domain has
//    nothing queued posts on its own thread under the fabric lock (EAGAIN: the rest is queued
//    for the progress thread); a waiter (ImmCounters::Wait, OpCounter::Wait) polls the CQs
//    itself for a bounded time before sleeping, and while callers poll, the progress thread
//    stands off (see caller_poll.h). Per-thread FIFO order of posts is kept either way. A
//    write submitted without a completion and within the provider's inject size is injected
//    (config.inject_writes): no local completion, so its failure goes unreported, as before.
//  * Callers on any thread build requests and submit them; completion is reported by callback
//    (run on the progress thread: keep it short, never block in it) and/or by an OpCounter
//    (recorded on whichever thread polled the completion).
//  * Registered memory must stay valid until Deregister or engine destruction.
//
// Immediates: user values are 31-bit (top bit reserved for barriers). A write with an
// immediate produces one arrival of that value at the target, counted by ImmCounters.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "comm/transfer/caller_poll.h"
#include "comm/transfer/descriptor.h"
#include "comm/transfer/imm_counter.h"
#include "comm/transfer/provider.h"

namespace pg::comm {

struct TransferEngineConfig {
  ProviderConfig provider;
  uint32_t num_domains = 1;                       // one progress thread each
  std::chrono::milliseconds op_timeout{10'000};   // posted or queued work older fails
  uint32_t spin_before_sleep_us = 200;            // busy-poll this long after activity
  uint32_t idle_sleep_us = 20;                    // then poll every this many microseconds
  // Callers post directly when their domain has nothing queued (else the progress thread does).
  bool direct_post = true;
  // Waiters poll the fabric themselves this long before sleeping (0 = never poll).
  uint32_t waiter_spin_us = 50;
  // Writes submitted without a completion and no larger than the provider's inject size are
  // injected (no local completion; a failure of such a write is not reported, as before).
  bool inject_writes = true;
};

struct OpResult {
  bool ok = true;
  std::string error;
  size_t length_bytes = 0;  // receives: bytes received
};

// Completion by atomic counters: `done`/`failed` count whole operations.
class OpCounter {
 public:
  std::atomic<int64_t> done{0};
  std::atomic<int64_t> failed{0};
  void Record(const OpResult& r);
  // Blocks until done + failed >= target (polling the fabric first, when an engine set a
  // poller). Throws pg::Error (kIo) with the first error when any op failed, or kCancelled on
  // timeout. A counter must not be waited on after the engine it was used with is destroyed
  // unless every op it counts has finished.
  void Wait(int64_t target, std::chrono::milliseconds timeout);
  std::string first_error() const;
  // Set by the engine on each submission that reports to this counter.
  void SetPoller(CallerPoller* poller, std::chrono::microseconds spin) {
    poller_.store(poller, std::memory_order_relaxed);
    spin_us_.store(spin.count(), std::memory_order_relaxed);
  }

 private:
  std::atomic<CallerPoller*> poller_{nullptr};
  std::atomic<int64_t> spin_us_{0};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string first_error_;
};

struct Completion {
  std::function<void(const OpResult&)> callback;  // optional; runs on a progress thread
  OpCounter* counter = nullptr;                   // optional; must outlive the op
};

struct MemoryRegion {
  uint32_t id = 0;
  uint8_t* base = nullptr;
  size_t length_bytes = 0;
  bool remote = false;
};

// A peer resolved once into every domain/endpoint address of ours.
struct ResolvedPeer {
  uint32_t index = 0;              // position in its group
  std::vector<PeerAddr> addrs;     // [num_domains][endpoints_per_domain]
  uint64_t landing_base = 0;
  std::vector<uint64_t> landing_keys;
};

struct PeerGroup {
  std::vector<ResolvedPeer> peers;
  size_t size() const { return peers.size(); }
  const ResolvedPeer& operator[](size_t i) const { return peers[i]; }
};

// A remote region validated against this engine (number of domains, addressing mode).
struct RemoteMemory {
  MemoryDescriptor desc;
};

// A write built once (addresses, keys, descriptors resolved) and patched per use.
class WriteRequest {
 public:
  // Re-targets the request; bounds are checked against both regions.
  void Patch(uint64_t src_offset, uint64_t dst_offset, uint64_t length_bytes);
  void SetImm(std::optional<uint32_t> imm);
  uint64_t length_bytes() const { return op_.length_bytes; }

 private:
  friend class TransferEngine;
  WriteOp op_;
  uint32_t domain_ = 0;
  const uint8_t* src_base_ = nullptr;
  size_t src_length_ = 0;
  const MemoryDescriptor* dst_ = nullptr;  // points into a RemoteMemory the caller keeps
  const PeerAddr* peer_addrs_ = nullptr;    // [endpoints_per_domain] in the caller's PeerGroup
};

struct WriteSpec {
  const MemoryRegion* src = nullptr;
  uint64_t src_offset = 0;
  uint64_t length_bytes = 0;
  const ResolvedPeer* peer = nullptr; // its PeerGroup must outlive the request
  const RemoteMemory* dst = nullptr;  // must outlive the request
  uint64_t dst_offset = 0;
  std::optional<uint32_t> imm;
};

// Pages of `page_bytes` at base + index * stride on both sides (KV-cache pages).
struct PagedWriteSpec {
  const MemoryRegion* src = nullptr;
  const ResolvedPeer* peer = nullptr;
  const RemoteMemory* dst = nullptr;
  uint64_t page_bytes = 0;
  uint64_t src_base_offset = 0, src_stride_bytes = 0;
  uint64_t dst_base_offset = 0, dst_stride_bytes = 0;
  std::vector<uint32_t> src_pages, dst_pages;  // same length; page i -> page i
  std::optional<uint32_t> imm;                 // carried by every page write
};

class TransferEngine final : public CallerPoller {
 public:
  explicit TransferEngine(const TransferEngineConfig& config);
  ~TransferEngine() override;
  TransferEngine(const TransferEngine&) = delete;
  TransferEngine& operator=(const TransferEngine&) = delete;

  const ProviderInfo& provider_info() const;
  const TransferEngineConfig& config() const { return config_; }
  EndpointAddress LocalAddress() const { return address_; }

  // --- memory ------------------------------------------------------------------------
  // remote = peers may write it (then Describe() gives its serialisable descriptor).
  MemoryRegion Register(void* base, size_t length_bytes, bool remote);
  void Deregister(const MemoryRegion& region);
  MemoryDescriptor Describe(const MemoryRegion& region) const;
  // Validates a descriptor received from a peer (throws kMalformed / kInvalidArgument).
  RemoteMemory Import(const MemoryDescriptor& desc) const;

  // --- peers -------------------------------------------------------------------------
  // Inserts every address into every domain once. Throws kMalformed on mismatch.
  PeerGroup ResolvePeers(const std::vector<EndpointAddress>& addresses);

  // --- transfers ---------------------------------------------------------------------
  WriteRequest BuildWrite(const WriteSpec& spec) const;
  void Submit(const WriteRequest& request, Completion done);
  // One op completing when every request has; requests may target different peers.
  void SubmitBatch(const std::vector<WriteRequest>& requests, Completion done);
  void SubmitPaged(const PagedWriteSpec& spec, Completion done);
  // Zero-byte immediate `kBarrierBit | tag` to every other member, then waits for theirs.
  void Barrier(const PeerGroup& group, uint32_t self_index, uint16_t tag,
               std::chrono::milliseconds timeout);
  // Two-sided messages over domain 0 endpoint 0; receives match any sender, in post order.
  void Send(const ResolvedPeer& peer, const MemoryRegion& region, uint64_t offset,
            uint64_t length_bytes, Completion done);
  void Recv(const MemoryRegion& region, uint64_t offset, uint64_t length_bytes,
            Completion done);

  ImmCounters& imms() { return imms_; }
  // One caller-side pass over every free domain (see caller_poll.h); for custom busy-waits.
  bool PollOnce() override;
  // Times a post was refused with EAGAIN and the item stayed queued (backpressure).
  uint64_t num_backpressure() const { return num_backpressure_.load(); }
  // Low-latency path use: items posted on the submitter's thread, and arrivals + completions
  // delivered by a polling waiter (rather than by the progress thread).
  uint64_t num_direct_posts() const { return num_direct_posts_.load(); }
  uint64_t num_caller_deliveries() const { return num_caller_deliveries_.load(); }
  uint64_t num_injected() const { return num_injected_.load(); }
  static constexpr uint32_t kBarrierBit = 0x80000000u;

 private:
  struct Domain;
  struct WorkItem;
  struct OpState;
  struct Finished;
  // A new op of `fragments` provider operations reporting to `done` (null when `done` is
  // empty: then nothing is tracked beyond the provider context).
  std::shared_ptr<OpState> NewOp(Completion done, int fragments);
  WorkItem* NewWriteItem(const WriteRequest& req, const std::shared_ptr<OpState>& op,
                         std::chrono::steady_clock::time_point deadline);
  // A write nobody waits on, injected on the caller's thread without any bookkeeping when
  // its domain is idle and free. false: take the ordinary path.
  bool TryInjectNow(const WriteRequest& req);
  uint32_t PickEndpoint();
  // Posts `items` (FIFO) on the caller's thread when the domain has nothing queued and its
  // fabric is free, else queues them for the progress thread.
  void PostOrQueue(uint32_t domain, WorkItem* const* items, size_t n,
                   std::chrono::steady_clock::time_point now);
  void Enqueue(uint32_t domain, WorkItem* const* items, size_t n);
  // Runs `fn` under the domain's fabric lock (registration, AV inserts).
  void RunOnDomain(uint32_t domain, const std::function<void()>& fn);
  void ProgressLoop(Domain& d);
  // Fabric lock held: posts one item. false = EAGAIN (the caller keeps it); errors -> `failed`.
  bool PostLocked(Domain& d, WorkItem* item, std::chrono::steady_clock::time_point now,
                  std::vector<Finished>& failed);
  // Fabric lock held: polls every endpoint; completed items leave `inflight` into `finished`.
  void DrainLocked(Domain& d, std::vector<ProviderEvent>& events,
                   std::vector<Finished>& finished);
  // No lock held: delivers arrivals and completions. Off the progress thread, callbacks and
  // expectations are handed to it (`on_progress` false).
  void Deliver(Domain& d, std::vector<ProviderEvent>& events, std::vector<Finished>& finished,
               bool on_progress);
  void Wake(Domain& d);
  // Completes one fragment of `op`; the last one reports. With `deferred`, a callback is
  // appended there instead of run.
  static void FinishFragment(const std::shared_ptr<OpState>& op, bool is_recv,
                             const OpResult& r,
                             std::vector<std::function<void()>>* deferred);

  TransferEngineConfig config_;
  std::vector<std::unique_ptr<Domain>> domains_;
  EndpointAddress address_;
  ImmCounters imms_;
  std::mutex regions_mu_;
  struct RegionEntry {
    MemoryRegion region;
    std::vector<LocalRegion> per_domain;
  };
  std::vector<RegionEntry> regions_;  // index = id - 1; entries with base == null are free
  std::atomic<uint64_t> next_key_{1};
  std::vector<uint8_t> landing_;
  MemoryRegion landing_region_;
  std::atomic<uint32_t> ep_round_robin_{0};
  std::atomic<uint64_t> num_backpressure_{0};
  std::atomic<uint64_t> num_direct_posts_{0};
  std::atomic<uint64_t> num_caller_deliveries_{0};
  std::atomic<uint64_t> num_injected_{0};
};

}  // namespace pg::comm
