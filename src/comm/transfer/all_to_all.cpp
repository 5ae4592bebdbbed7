#include "comm/transfer/all_to_all.h"

#include <algorithm>
#include <cstring>

#include "core/dtype.h"
#include "core/status.h"

namespace pg::comm {
namespace {
uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
}  // namespace

AllToAll::AllToAll(TransferEngine& engine, const PeerGroup& group, TcpStore& store,
                   uint32_t rank, const AllToAllConfig& config)
    : engine_(engine), group_(group), rank_(rank), world_(uint32_t(group.size())),
      config_(config) {
  PG_ENSURE(world_ >= 1 && rank < world_, kInvalidArgument, "rank {} of {}", rank, world_);
  PG_ENSURE(config.num_experts > 0 && config.num_experts % world_ == 0, kInvalidArgument,
            "{} experts do not split over {} ranks", config.num_experts, world_);
  PG_ENSURE(config.num_experts <= 65536, kInvalidArgument, "too many experts");
  PG_ENSURE(config.max_tokens > 0 && config.top_k > 0 && config.dispatch_bytes > 0 &&
                config.combine_bytes > 0 && config.combine_bytes % 2 == 0,
            kInvalidArgument, "all-to-all sizes must be positive (combine bytes even)");
  record_bytes_ = AlignUp(sizeof(RecordHeader) + config.dispatch_bytes, 8);
  max_records_ = uint64_t(config.max_tokens) * config.top_k;

  send_records_off_ = AlignUp(uint64_t(world_) * 4, 64);
  combine_out_off_ = AlignUp(send_records_off_ + max_records_ * record_bytes_, 64);
  send_buf_.assign(combine_out_off_ + world_ * max_records_ * config.combine_bytes, 0);
  send_mr_ = engine.Register(send_buf_.data(), send_buf_.size(), /*remote=*/false);

  spec_off_ = AlignUp(uint64_t(world_) * world_ * 4, 64);
  bulk_off_ = spec_off_ + uint64_t(world_) * config.spec_tokens * record_bytes_;
  combine_in_off_ = AlignUp(bulk_off_ + world_ * max_records_ * record_bytes_, 64);
  recv_buf_.assign(combine_in_off_ + max_records_ * config.combine_bytes, 0);
  recv_mr_ = engine.Register(recv_buf_.data(), recv_buf_.size(), /*remote=*/true);
  counts_in_ = reinterpret_cast<uint32_t*>(recv_buf_.data());

  auto all = store.AllGather(fmt::format("a2a/{}/desc", config.imm_tag),
                             engine.Describe(recv_mr_).Serialize());
  PG_ENSURE(all.size() == world_, kInvalidArgument, "store world {} != group {}", all.size(),
            world_);
  for (const auto& bytes : all) remote_.push_back(engine.Import(MemoryDescriptor::Deserialize(bytes)));
  for (uint32_t r = 0; r < world_; ++r) {
    PG_ENSURE(remote_[r].desc.length_bytes == recv_buf_.size(), kMalformed,
              "rank {} registered a {}-byte all-to-all region, expected {}", r,
              remote_[r].desc.length_bytes, recv_buf_.size());
  }
  send_start_.assign(world_ + 1, 0);
  for (uint32_t r = 0; r < world_; ++r) {
    auto build = [&](Kind kind) {
      return engine.BuildWrite({&send_mr_, 0, 0, &group_[r], &remote_[r], 0, Imm(kind)});
    };
    count_req_.push_back(build(kCount));
    spec_req_.push_back(build(kSpec));
    bulk_req_.push_back(build(kBulk));
    combine_req_.push_back(build(kCombine));
  }
}

AllToAll::~AllToAll() {
  // After a failed round the count expectation (capturing `this`) may still be pending.
  engine_.imms().CancelExpectations(Imm(kCount));
  try {
    engine_.Deregister(send_mr_);
    engine_.Deregister(recv_mr_);
  } catch (const Error&) {
  }
}

void AllToAll::DispatchSend(const DispatchInput& in) {
  PG_ENSURE(in.num_tokens <= config_.max_tokens, kInvalidArgument,
            "{} tokens exceed max_tokens {}", in.num_tokens, config_.max_tokens);
  PG_ENSURE(in.experts.size() == size_t(in.num_tokens) * config_.top_k &&
                in.payload.size() == size_t(in.num_tokens) * config_.dispatch_bytes,
            kInvalidArgument, "dispatch input shapes do not match {} tokens", in.num_tokens);
  num_tokens_ = in.num_tokens;
  const uint32_t per_rank = config_.num_experts / world_;
  // Pack by destination: counting pass, then placement (stable in (token, k) order).
  std::vector<uint32_t> counts(world_, 0);
  for (uint32_t e : in.experts) {
    PG_ENSURE(e < config_.num_experts, kInvalidArgument, "expert {} of {}", e,
              config_.num_experts);
    ++counts[e / per_rank];
  }
  send_start_[0] = 0;
  for (uint32_t r = 0; r < world_; ++r) send_start_[r + 1] = send_start_[r] + counts[r];
  std::vector<uint32_t> cursor(send_start_.begin(), send_start_.end() - 1);
  send_pos_.resize(in.experts.size());
  for (uint32_t t = 0; t < in.num_tokens; ++t) {
    for (uint32_t k = 0; k < config_.top_k; ++k) {
      const uint32_t e = in.experts[t * config_.top_k + k];
      const uint32_t slot = cursor[e / per_rank]++;
      send_pos_[t * config_.top_k + k] = slot;
      uint8_t* rec = send_buf_.data() + SendRecordOffset(slot);
      RecordHeader h{t, uint16_t(e), uint16_t(k)};
      std::memcpy(rec, &h, sizeof(h));
      std::memcpy(rec + sizeof(h), in.payload.data() + size_t(t) * config_.dispatch_bytes,
                  config_.dispatch_bytes);
    }
  }
  std::memcpy(send_buf_.data(), counts.data(), world_ * 4);
  {
    std::lock_guard lock(mu_);
    counts_ready_ = false;
    bulk_error_.clear();
  }
  writes_ = std::make_shared<OpCounter>();
  writes_expected_ = 0;
  ++round_;

  // Self: counts row and private slot by memcpy.
  std::memcpy(counts_in_ + rank_ * world_, counts.data(), world_ * 4);
  const uint32_t self_spec = std::min(counts[rank_], config_.spec_tokens);
  std::memcpy(recv_buf_.data() + spec_off_ + uint64_t(rank_) * config_.spec_tokens * record_bytes_,
              send_buf_.data() + SendRecordOffset(send_start_[rank_]), self_spec * record_bytes_);

  std::vector<WriteRequest> batch;
  for (uint32_t r = 0; r < world_; ++r) {
    if (r == rank_) continue;
    count_req_[r].Patch(0, uint64_t(rank_) * world_ * 4, uint64_t(world_) * 4);
    batch.push_back(count_req_[r]);
    const uint32_t spec = std::min(counts[r], config_.spec_tokens);
    if (spec > 0) {
      spec_req_[r].Patch(SendRecordOffset(send_start_[r]),
                         spec_off_ + uint64_t(rank_) * config_.spec_tokens * record_bytes_,
                         spec * record_bytes_);
      batch.push_back(spec_req_[r]);
    }
  }
  if (!batch.empty()) {
    ++writes_expected_;
    auto w = writes_;
    engine_.SubmitBatch(batch, {[w](const OpResult& r) { w->Record(r); }, nullptr});
  }
  if (world_ == 1) {
    OnCountsComplete();
  } else {
    engine_.imms().Expect(Imm(kCount), world_ - 1, [this] { OnCountsComplete(); });
  }
}

void AllToAll::OnCountsComplete() {
  // Every row of counts_in_ is now this round's. Bulk offsets at receiver r for sender s:
  // sum over s' < s of max(0, counts[s'][r] - spec).
  std::vector<WriteRequest> batch;
  try {
    for (uint32_t r = 0; r < world_; ++r) {
      const uint32_t c = count(rank_, r);
      if (c <= config_.spec_tokens) continue;
      uint64_t before = 0;
      for (uint32_t s = 0; s < rank_; ++s) {
        before += count(s, r) > config_.spec_tokens ? count(s, r) - config_.spec_tokens : 0;
      }
      const uint64_t src = SendRecordOffset(send_start_[r] + config_.spec_tokens);
      const uint64_t bytes = uint64_t(c - config_.spec_tokens) * record_bytes_;
      const uint64_t dst = bulk_off_ + before * record_bytes_;
      PG_ENSURE(dst + bytes <= combine_in_off_, kMalformed,
                "peer counts overflow the bulk area of rank {}", r);
      if (r == rank_) {
        std::memcpy(recv_buf_.data() + dst, send_buf_.data() + src, bytes);
      } else {
        bulk_req_[r].Patch(src, dst, bytes);
        batch.push_back(bulk_req_[r]);
      }
    }
    if (!batch.empty()) {
      auto w = writes_;
      engine_.SubmitBatch(batch, {[w](const OpResult& r) { w->Record(r); }, nullptr});
    }
  } catch (const Error& e) {
    std::lock_guard lock(mu_);
    bulk_error_ = e.what();
  }
  {
    std::lock_guard lock(mu_);
    if (!batch.empty()) ++writes_expected_;
    counts_ready_ = true;
  }
  cv_.notify_all();
}

const std::vector<ReceivedRecord>& AllToAll::DispatchRecv() {
  {
    std::unique_lock lock(mu_);
    bool ok = cv_.wait_for(lock, config_.timeout, [&] { return counts_ready_; });
    PG_ENSURE(ok, kCancelled, "dispatch: token counts of {} peers missing after {} ms",
              world_ - 1 - engine_.imms().Available(Imm(kCount)), config_.timeout.count());
    PG_ENSURE(bulk_error_.empty(), kIo, "dispatch: {}", bulk_error_);
  }
  int64_t spec = 0, bulk = 0;
  for (uint32_t s = 0; s < world_; ++s) {
    if (s == rank_) continue;
    spec += count(s, rank_) > 0;
    bulk += count(s, rank_) > config_.spec_tokens;
  }
  engine_.imms().Wait(Imm(kSpec), spec, config_.timeout);
  engine_.imms().Wait(Imm(kBulk), bulk, config_.timeout);
  int64_t expected;
  {
    std::lock_guard lock(mu_);
    expected = writes_expected_;
  }
  writes_->Wait(expected, config_.timeout);

  received_.clear();
  uint64_t bulk_before = 0;
  for (uint32_t s = 0; s < world_; ++s) {
    const uint32_t c = count(s, rank_);
    for (uint32_t i = 0; i < c; ++i) {
      const uint8_t* rec =
          i < config_.spec_tokens
              ? recv_buf_.data() + spec_off_ +
                    (uint64_t(s) * config_.spec_tokens + i) * record_bytes_
              : recv_buf_.data() + bulk_off_ +
                    (bulk_before + i - config_.spec_tokens) * record_bytes_;
      ReceivedRecord r;
      r.src_rank = s;
      std::memcpy(&r.header, rec, sizeof(RecordHeader));
      r.payload = rec + sizeof(RecordHeader);
      received_.push_back(r);
    }
    bulk_before += c > config_.spec_tokens ? c - config_.spec_tokens : 0;
  }
  return received_;
}

std::span<uint8_t> AllToAll::combine_input() {
  return {send_buf_.data() + combine_out_off_, received_.size() * config_.combine_bytes};
}

void AllToAll::CombineSend() {
  // Results for sender s sit contiguously in combine_out (DispatchRecv order); they land at s
  // where s's records for me began in its send order.
  const uint64_t cb = config_.combine_bytes;
  std::vector<WriteRequest> batch;
  uint64_t src_records = 0;
  for (uint32_t s = 0; s < world_; ++s) {
    const uint32_t c = count(s, rank_);
    uint64_t dst_records = 0;
    for (uint32_t r = 0; r < rank_; ++r) dst_records += count(s, r);
    const uint64_t src = combine_out_off_ + src_records * cb;
    const uint64_t dst = combine_in_off_ + dst_records * cb;
    if (c > 0 && s == rank_) {
      std::memcpy(recv_buf_.data() + dst, send_buf_.data() + src, c * cb);
    } else if (c > 0) {
      combine_req_[s].Patch(src, dst, c * cb);
      batch.push_back(combine_req_[s]);
    }
    src_records += c;
  }
  writes_ = std::make_shared<OpCounter>();
  writes_expected_ = batch.empty() ? 0 : 1;
  if (!batch.empty()) {
    auto w = writes_;
    engine_.SubmitBatch(batch, {[w](const OpResult& r) { w->Record(r); }, nullptr});
  }
}

void AllToAll::CombineRecv(std::span<const float> weights, std::span<float> out) {
  const uint32_t hidden = config_.combine_bytes / 2;
  PG_ENSURE(weights.size() == size_t(num_tokens_) * config_.top_k &&
                out.size() == size_t(num_tokens_) * hidden,
            kInvalidArgument, "combine output shapes do not match {} tokens", num_tokens_);
  int64_t from = 0;
  for (uint32_t r = 0; r < world_; ++r) from += r != rank_ && count(rank_, r) > 0;
  engine_.imms().Wait(Imm(kCombine), from, config_.timeout);
  writes_->Wait(writes_expected_, config_.timeout);
  const auto* results =
      reinterpret_cast<const uint16_t*>(recv_buf_.data() + combine_in_off_);  // bf16
  for (uint32_t t = 0; t < num_tokens_; ++t) {
    float* o = out.data() + size_t(t) * hidden;
    std::fill(o, o + hidden, 0.0f);
    for (uint32_t k = 0; k < config_.top_k; ++k) {
      const float w = weights[t * config_.top_k + k];
      const uint16_t* x = results + size_t(send_pos_[t * config_.top_k + k]) * hidden;
      for (uint32_t h = 0; h < hidden; ++h) o[h] += w * Bf16ToF32(x[h]);
    }
  }
  // No peer may write into our buffers for the next round before everyone is done here.
  engine_.Barrier(group_, rank_, uint16_t(config_.imm_tag), config_.timeout);
}

}  // namespace pg::comm
