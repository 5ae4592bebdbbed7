// TransferEngine API: counters, construction, registration, peers, request building and
// submission. The data path (posting, polling, delivery, progress thread) is in
// engine_progress.cpp.
#include "comm/transfer/engine.h"

#include "comm/transfer/engine_internal.h"
#include "core/log.h"
#include "core/status.h"

namespace pg::comm {

// ---- OpCounter ------------------------------------------------------------------------

void OpCounter::Record(const OpResult& r) {
  // Notified under the lock: a waiter that sees the new count (Wait always takes the lock
  // before returning) may destroy the counter right after, so nothing here may touch it later.
  std::lock_guard lock(mu_);
  if (r.ok) {
    done.fetch_add(1);
  } else {
    if (first_error_.empty()) first_error_ = r.error;
    failed.fetch_add(1);
  }
  cv_.notify_all();
}

void OpCounter::Wait(int64_t target, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  auto finished = [&] { return done.load() + failed.load() >= target || failed.load() > 0; };
  SpinPoll(poller_.load(std::memory_order_relaxed),
           std::chrono::microseconds(spin_us_.load(std::memory_order_relaxed)), deadline,
           finished);
  std::unique_lock lock(mu_);
  bool ok = cv_.wait_until(lock, deadline, finished);
  if (failed > 0) Throw(ErrorCode::kIo, "transfer failed: {}", first_error_);
  if (!ok) {
    Throw(ErrorCode::kCancelled, "timed out after {} ms: {} of {} transfers done",
          timeout.count(), done.load(), target);
  }
}

std::string OpCounter::first_error() const {
  std::lock_guard lock(mu_);
  return first_error_;
}

TransferEngine::TransferEngine(const TransferEngineConfig& config) : config_(config) {
  PG_ENSURE(config.num_domains >= 1 && config.num_domains <= 64, kInvalidArgument,
            "num_domains must be in [1, 64], got {}", config.num_domains);
  for (uint32_t i = 0; i < config.num_domains; ++i) {
    auto d = std::make_unique<Domain>();
    d->index = i;
    d->provider = OpenLibfabricProvider(config.provider);
    domains_.push_back(std::move(d));
  }
  const ProviderInfo& info = domains_[0]->provider->info();
  address_.provider = info.provider;
  address_.num_domains = config.num_domains;
  address_.endpoints_per_domain = domains_[0]->provider->num_endpoints();
  address_.name_bytes = uint32_t(info.name_bytes);
  for (auto& d : domains_) {
    auto names = d->provider->LocalNames();
    address_.names.insert(address_.names.end(), names.begin(), names.end());
  }
  for (auto& d : domains_) {
    Domain* dp = d.get();
    d->thread = std::thread([this, dp] { ProgressLoop(*dp); });
  }
  if (config_.waiter_spin_us > 0) {
    imms_.SetPoller(this, std::chrono::microseconds(config_.waiter_spin_us));
  }
  landing_.assign(64, 0);
  landing_region_ = Register(landing_.data(), landing_.size(), /*remote=*/true);
  MemoryDescriptor ld = Describe(landing_region_);
  address_.landing_base = ld.base;
  address_.landing_keys = ld.keys;
}

TransferEngine::~TransferEngine() {
  // Callers must not be submitting or polling any more; the progress threads stop first.
  for (auto& d : domains_) {
    {
      std::lock_guard lock(d->mu);
      d->stop = true;
      d->has_work.store(true, std::memory_order_release);
    }
    d->cv.notify_all();
    d->thread.join();
  }
  const OpResult gone{false, "transfer engine shut down", 0};
  for (auto& d : domains_) {
    std::vector<Finished> failed;
    for (WorkItem* item : d->submitted) d->pending.push_back(item);
    for (WorkItem* item : d->pending) {
      failed.push_back({item->op, item->kind == WorkItem::kRecv, gone});
      delete item;
    }
    for (auto& entry : regions_) {
      if (entry.region.base) d->provider->Deregister(entry.per_domain[d->index]);
    }
    d->provider.reset();  // closes endpoints: no completion can reference items now
    for (WorkItem* item = d->inflight; item != nullptr;) {
      WorkItem* next = item->next;
      if (!item->abandoned) failed.push_back({item->op, item->kind == WorkItem::kRecv, gone});
      delete item;
      item = next;
    }
    d->inflight = nullptr;
    for (auto& fn : d->deferred) fn();  // completions callers found but did not report yet
    for (const Finished& f : failed) FinishFragment(f.op, f.is_recv, f.result, nullptr);
  }
}

const ProviderInfo& TransferEngine::provider_info() const {
  return domains_[0]->provider->info();
}

// ---- memory ---------------------------------------------------------------------------

MemoryRegion TransferEngine::Register(void* base, size_t length_bytes, bool remote) {
  PG_ENSURE(base != nullptr && length_bytes > 0, kInvalidArgument,
            "cannot register an empty region");
  RegionEntry entry;
  entry.region.base = static_cast<uint8_t*>(base);
  entry.region.length_bytes = length_bytes;
  entry.region.remote = remote;
  // Keys are ours to choose when the provider lacks FI_MR_PROV_KEY: unique per engine.
  const uint64_t key = next_key_.fetch_add(1);
  for (auto& d : domains_) {
    LocalRegion lr;
    RunOnDomain(d->index, [&] { lr = d->provider->Register(base, length_bytes, remote, key); });
    entry.per_domain.push_back(lr);
  }
  std::lock_guard lock(regions_mu_);
  entry.region.id = uint32_t(regions_.size() + 1);
  regions_.push_back(entry);
  return entry.region;
}

void TransferEngine::Deregister(const MemoryRegion& region) {
  RegionEntry entry;
  {
    std::lock_guard lock(regions_mu_);
    PG_ENSURE(region.id >= 1 && region.id <= regions_.size() &&
                  regions_[region.id - 1].region.base == region.base,
              kInvalidArgument, "deregistering an unknown region");
    entry = regions_[region.id - 1];
    regions_[region.id - 1].region.base = nullptr;
  }
  for (auto& d : domains_) {
    RunOnDomain(d->index, [&] { d->provider->Deregister(entry.per_domain[d->index]); });
  }
}

MemoryDescriptor TransferEngine::Describe(const MemoryRegion& region) const {
  PG_ENSURE(region.remote, kInvalidArgument, "region {} is not remote-accessible", region.id);
  std::lock_guard lock(const_cast<std::mutex&>(regions_mu_));
  PG_CHECK(region.id >= 1 && region.id <= regions_.size());
  const RegionEntry& e = regions_[region.id - 1];
  MemoryDescriptor d;
  d.virt_addr = provider_info().mr_virt_addr;
  d.base = d.virt_addr ? reinterpret_cast<uint64_t>(region.base) : 0;
  d.length_bytes = region.length_bytes;
  for (const auto& lr : e.per_domain) d.keys.push_back(lr.key);
  return d;
}

RemoteMemory TransferEngine::Import(const MemoryDescriptor& desc) const {
  PG_ENSURE(desc.keys.size() == domains_.size(), kMalformed,
            "memory descriptor has {} keys, this engine has {} domains", desc.keys.size(),
            domains_.size());
  PG_ENSURE(desc.virt_addr == provider_info().mr_virt_addr, kMalformed,
            "memory descriptor addressing (virt_addr={}) differs from provider {}",
            desc.virt_addr, provider_info().provider);
  PG_ENSURE(desc.length_bytes > 0, kMalformed, "memory descriptor: empty region");
  return RemoteMemory{desc};
}

PeerGroup TransferEngine::ResolvePeers(const std::vector<EndpointAddress>& addresses) {
  PeerGroup group;
  for (size_t i = 0; i < addresses.size(); ++i) {
    const EndpointAddress& a = addresses[i];
    PG_ENSURE(a.provider == address_.provider, kMalformed,
              "peer {} uses provider '{}', this engine '{}'", i, a.provider, address_.provider);
    PG_ENSURE(a.num_domains == address_.num_domains &&
                  a.endpoints_per_domain == address_.endpoints_per_domain &&
                  a.name_bytes == address_.name_bytes,
              kMalformed, "peer {} has {}x{} endpoints of {} bytes, this engine {}x{} of {}", i,
              a.num_domains, a.endpoints_per_domain, a.name_bytes, address_.num_domains,
              address_.endpoints_per_domain, address_.name_bytes);
    ResolvedPeer peer;
    peer.index = uint32_t(i);
    peer.landing_base = a.landing_base;
    peer.landing_keys = a.landing_keys;
    for (auto& d : domains_) {
      for (uint32_t e = 0; e < a.endpoints_per_domain; ++e) {
        PeerAddr addr = 0;
        RunOnDomain(d->index, [&] { addr = d->provider->InsertPeer(a.Name(d->index, e)); });
        peer.addrs.push_back(addr);
      }
    }
    group.peers.push_back(std::move(peer));
  }
  return group;
}

// ---- transfers ------------------------------------------------------------------------

void WriteRequest::Patch(uint64_t src_offset, uint64_t dst_offset, uint64_t length_bytes) {
  PG_ENSURE(src_offset <= src_length_ && length_bytes <= src_length_ - src_offset,
            kOutOfRange, "write source [{}, +{}) outside a {}-byte region", src_offset,
            length_bytes, src_length_);
  PG_ENSURE(dst_offset <= dst_->length_bytes && length_bytes <= dst_->length_bytes - dst_offset,
            kOutOfRange, "write target [{}, +{}) outside a {}-byte remote region", dst_offset,
            length_bytes, dst_->length_bytes);
  op_.src = src_base_ + src_offset;
  op_.length_bytes = length_bytes;
  op_.dst_addr = dst_->RemoteAddress(dst_offset);
}

void WriteRequest::SetImm(std::optional<uint32_t> imm) {
  PG_ENSURE(!imm || (*imm & TransferEngine::kBarrierBit) == 0, kInvalidArgument,
            "immediate {:#x} uses the reserved top bit", *imm);
  op_.has_imm = imm.has_value();
  op_.imm = imm.value_or(0);
}

WriteRequest TransferEngine::BuildWrite(const WriteSpec& spec) const {
  PG_ENSURE(spec.src && spec.peer && spec.dst, kInvalidArgument,
            "write needs a source region, a peer and a target");
  PG_ENSURE(spec.length_bytes <= provider_info().max_msg_bytes, kInvalidArgument,
            "write of {} bytes exceeds the provider's {}", spec.length_bytes,
            provider_info().max_msg_bytes);
  WriteRequest r;
  r.domain_ = spec.peer->index % uint32_t(domains_.size());
  {
    std::lock_guard lock(const_cast<std::mutex&>(regions_mu_));
    PG_ENSURE(spec.src->id >= 1 && spec.src->id <= regions_.size() &&
                  regions_[spec.src->id - 1].region.base == spec.src->base,
              kInvalidArgument, "write source is not a registered region");
    r.op_.src_desc = regions_[spec.src->id - 1].per_domain[r.domain_].desc;
  }
  r.src_base_ = spec.src->base;
  r.src_length_ = spec.src->length_bytes;
  r.dst_ = &spec.dst->desc;
  const uint32_t eps = address_.endpoints_per_domain;
  r.peer_addrs_ = spec.peer->addrs.data() + size_t(r.domain_) * eps;
  r.op_.dst = r.peer_addrs_[0];
  r.op_.dst_key = spec.dst->desc.keys[r.domain_];
  r.Patch(spec.src_offset, spec.dst_offset, spec.length_bytes);
  r.SetImm(spec.imm);
  return r;
}

std::shared_ptr<TransferEngine::OpState> TransferEngine::NewOp(Completion done, int fragments) {
  if (!done.callback && done.counter == nullptr) return nullptr;
  auto op = std::make_shared<OpState>();
  op->done = std::move(done);
  op->remaining = fragments;
  // A waiter on this counter polls this engine's fabric before sleeping.
  if (op->done.counter && config_.waiter_spin_us > 0) {
    op->done.counter->SetPoller(this, std::chrono::microseconds(config_.waiter_spin_us));
  }
  return op;
}

TransferEngine::WorkItem* TransferEngine::NewWriteItem(const WriteRequest& req,
                                                       const std::shared_ptr<OpState>& op,
                                                       Clock::time_point deadline) {
  auto* item = new WorkItem;
  item->kind = WorkItem::kWrite;
  item->write = req.op_;
  item->op = op;
  item->deadline = deadline;
  const uint32_t ep = PickEndpoint();
  item->ep = ep;
  item->write.dst = req.peer_addrs_[ep];
  return item;
}

uint32_t TransferEngine::PickEndpoint() {
  // Spread over the domain's endpoints; the peer address moves to the same endpoint index.
  const uint32_t eps = address_.endpoints_per_domain;
  return eps == 1 ? 0 : ep_round_robin_.fetch_add(1) % eps;
}

void TransferEngine::Submit(const WriteRequest& request, Completion done) {
  if (!done.callback && done.counter == nullptr && TryInjectNow(request)) return;
  auto op = NewOp(std::move(done), 1);
  const auto now = Clock::now();
  WorkItem* item = NewWriteItem(request, op, now + config_.op_timeout);
  PostOrQueue(request.domain_, &item, 1, now);
}

void TransferEngine::SubmitBatch(const std::vector<WriteRequest>& requests, Completion done) {
  auto op = NewOp(std::move(done), int(requests.size()));
  if (requests.empty()) {
    if (op && op->done.callback) op->done.callback(OpResult{});
    if (op && op->done.counter) op->done.counter->Record(OpResult{});
    return;
  }
  const auto now = Clock::now();
  const auto deadline = now + config_.op_timeout;
  std::vector<std::vector<WorkItem*>> per_domain(domains_.size());
  for (const auto& req : requests) {
    per_domain[req.domain_].push_back(NewWriteItem(req, op, deadline));
  }
  for (uint32_t d = 0; d < per_domain.size(); ++d) {
    if (!per_domain[d].empty()) PostOrQueue(d, per_domain[d].data(), per_domain[d].size(), now);
  }
}

void TransferEngine::SubmitPaged(const PagedWriteSpec& spec, Completion done) {
  PG_ENSURE(spec.src_pages.size() == spec.dst_pages.size(), kInvalidArgument,
            "paged write: {} source pages but {} target pages", spec.src_pages.size(),
            spec.dst_pages.size());
  PG_ENSURE(spec.page_bytes > 0, kInvalidArgument, "paged write: zero-byte pages");
  WriteRequest base = BuildWrite(WriteSpec{spec.src, spec.src_base_offset, 0, spec.peer,
                                           spec.dst, spec.dst_base_offset, spec.imm});
  std::vector<WriteRequest> requests(spec.src_pages.size(), base);
  for (size_t i = 0; i < requests.size(); ++i) {
    requests[i].Patch(spec.src_base_offset + uint64_t(spec.src_pages[i]) * spec.src_stride_bytes,
                      spec.dst_base_offset + uint64_t(spec.dst_pages[i]) * spec.dst_stride_bytes,
                      spec.page_bytes);
  }
  SubmitBatch(requests, std::move(done));
}

void TransferEngine::Barrier(const PeerGroup& group, uint32_t self_index, uint16_t tag,
                             std::chrono::milliseconds timeout) {
  PG_ENSURE(self_index < group.size(), kInvalidArgument, "barrier: self {} of a {}-peer group",
            self_index, group.size());
  const uint32_t imm = kBarrierBit | tag;
  const uint32_t eps = address_.endpoints_per_domain;
  if (group.size() == 1) return;
  auto sent = std::make_shared<OpCounter>();  // outlives this call if a write is stuck
  auto op = NewOp({nullptr, sent.get()}, int(group.size()) - 1);
  op->keep_alive = sent;
  const auto deadline = Clock::now() + timeout;
  for (const ResolvedPeer& peer : group.peers) {
    if (peer.index == self_index) continue;
    const uint32_t domain = peer.index % uint32_t(domains_.size());
    auto* item = new WorkItem;
    item->kind = WorkItem::kWrite;
    item->op = op;
    item->deadline = deadline;
    item->write.src = landing_.data();
    item->write.length_bytes = 0;
    {
      std::lock_guard lock(regions_mu_);
      item->write.src_desc = regions_[landing_region_.id - 1].per_domain[domain].desc;
    }
    item->write.dst = peer.addrs[size_t(domain) * eps];
    item->write.dst_addr = peer.landing_base;
    item->write.dst_key = peer.landing_keys[domain];
    item->write.has_imm = true;
    item->write.imm = imm;
    PostOrQueue(domain, &item, 1, Clock::now());
  }
  sent->Wait(1, timeout);  // one op covering every peer
  imms_.Wait(imm, int64_t(group.size()) - 1, timeout);
}

void TransferEngine::Send(const ResolvedPeer& peer, const MemoryRegion& region, uint64_t offset,
                          uint64_t length_bytes, Completion done) {
  PG_ENSURE(offset <= region.length_bytes && length_bytes <= region.length_bytes - offset,
            kOutOfRange, "send [{}, +{}) outside a {}-byte region", offset, length_bytes,
            region.length_bytes);
  auto op = NewOp(std::move(done), 1);
  auto* item = new WorkItem;
  item->kind = WorkItem::kSend;
  item->op = op;
  item->deadline = Clock::now() + config_.op_timeout;
  item->msg.buf = region.base + offset;
  item->msg.length_bytes = length_bytes;
  {
    std::lock_guard lock(regions_mu_);
    item->msg.desc = regions_.at(region.id - 1).per_domain[0].desc;
  }
  item->msg.peer = peer.addrs[0];
  PostOrQueue(0, &item, 1, Clock::now());
}

void TransferEngine::Recv(const MemoryRegion& region, uint64_t offset, uint64_t length_bytes,
                          Completion done) {
  PG_ENSURE(offset <= region.length_bytes && length_bytes <= region.length_bytes - offset,
            kOutOfRange, "recv [{}, +{}) outside a {}-byte region", offset, length_bytes,
            region.length_bytes);
  auto op = NewOp(std::move(done), 1);
  auto* item = new WorkItem;
  item->kind = WorkItem::kRecv;
  item->op = op;  // receives wait for a sender: no deadline (the caller's wait times out)
  item->msg.buf = region.base + offset;
  item->msg.length_bytes = length_bytes;
  {
    std::lock_guard lock(regions_mu_);
    item->msg.desc = regions_.at(region.id - 1).per_domain[0].desc;
  }
  PostOrQueue(0, &item, 1, Clock::now());
}

}  // namespace pg::comm
