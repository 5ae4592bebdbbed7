// Host-side expert-parallel all-to-all over the TransferEngine (pplx-garden style), with host
// buffers standing in for the GPU's packed send/receive buffers.
//
// Records: every routed (token, k) pair travels as one record = RecordHeader + payload
// (dispatch: fp8 hidden + fp32 block scales, opaque bytes here), padded to 8 bytes.
//
// Dispatch, send half: pack records by destination rank; write my count vector [W] into
// every peer's count table (imm kCount); speculatively write the first `spec_tokens` records
// per peer into my private slot at that peer (imm kSpec) without waiting for anything. When
// every peer's counts have arrived (an ImmCounters expectation, run on the progress thread),
// the rest go as ONE bulk write per peer into the peer's compact overflow area at an offset
// all ranks compute from the count matrix (imm kBulk).
// Dispatch, receive half: wait for the count matrix and the expected spec/bulk immediates;
// hand out received records in (sender, send order).
// Combine, send half: expert outputs ([num_received][combine_bytes], bf16) go back in one
// write per source rank, landing in the source's send order (imm kCombine).
// Combine, receive half: wait, then weighted sum per token at the source; a barrier follows so
// no rank reuses buffers a peer may still write.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "comm/transfer/engine.h"
#include "comm/transfer/rendezvous.h"

namespace pg::comm {

struct AllToAllConfig {
  uint32_t num_experts = 0;          // divisible by world size; expert e on rank e / per_rank
  uint32_t max_tokens = 0;           // per rank per call
  uint32_t top_k = 0;
  uint32_t dispatch_bytes = 0;       // payload bytes per token (fp8 hidden + block scales)
  uint32_t combine_bytes = 0;        // bf16 hidden: 2 * hidden
  uint32_t spec_tokens = 16;         // private per-sender slot capacity, records
  uint16_t imm_tag = 1;              // distinguishes all-to-all instances (e.g. per layer)
  std::chrono::milliseconds timeout{10'000};
};

struct RecordHeader {
  uint32_t src_token;  // token index at the source rank
  uint16_t expert;     // global expert id
  uint16_t k;          // which of the token's top_k choices
};

struct ReceivedRecord {
  uint32_t src_rank;
  RecordHeader header;
  const uint8_t* payload;  // dispatch_bytes, valid until the next DispatchSend
};

struct DispatchInput {
  uint32_t num_tokens = 0;                  // <= max_tokens
  std::span<const uint32_t> experts;        // [num_tokens][top_k] global expert ids
  std::span<const uint8_t> payload;         // [num_tokens][dispatch_bytes]
};

// After any error (timeout, dead peer) an AllToAll is unusable: destroy it (and re-bootstrap).
class AllToAll {
 public:
  // Collective: every rank constructs with the same config; descriptors go through `store`.
  AllToAll(TransferEngine& engine, const PeerGroup& group, TcpStore& store, uint32_t rank,
           const AllToAllConfig& config);
  ~AllToAll();

  void DispatchSend(const DispatchInput& input);
  // Records received, ordered by (sender rank, sender's send order). Throws on timeout/error.
  const std::vector<ReceivedRecord>& DispatchRecv();

  // [num_received][combine_bytes] to fill with expert outputs, in DispatchRecv order.
  std::span<uint8_t> combine_input();
  void CombineSend();
  // out[t][h] = sum_k weights[t][k] * output(t, k)[h]; out is [num_tokens][combine_bytes/2].
  void CombineRecv(std::span<const float> weights, std::span<float> out);

  // counts[s][r]: records rank s sends rank r in the current round (valid after DispatchRecv).
  uint32_t count(uint32_t src, uint32_t dst) const { return counts_in_[src * world_ + dst]; }

 private:
  enum Kind : uint32_t { kCount = 1, kSpec = 2, kBulk = 3, kCombine = 4 };
  uint32_t Imm(Kind kind) const { return (uint32_t(config_.imm_tag) << 8) | kind; }
  void OnCountsComplete();  // progress thread: bulk writes
  uint64_t SendRecordOffset(uint32_t i) const { return send_records_off_ + uint64_t(i) * record_bytes_; }

  TransferEngine& engine_;
  const PeerGroup& group_;
  uint32_t rank_, world_;
  AllToAllConfig config_;
  uint64_t record_bytes_;
  uint64_t max_records_;  // per rank sent: max_tokens * top_k

  // Local send region: [W] u32 counts | [max_records] records | [W*max_records] combine out.
  std::vector<uint8_t> send_buf_;
  MemoryRegion send_mr_;
  uint64_t send_records_off_ = 0, combine_out_off_ = 0;
  // Remote region: [W][W] u32 counts | [W][spec] records | [W*max_records] bulk records |
  // [max_records][combine_bytes] combine results (in my send order).
  std::vector<uint8_t> recv_buf_;
  MemoryRegion recv_mr_;
  uint64_t spec_off_ = 0, bulk_off_ = 0, combine_in_off_ = 0;
  std::vector<RemoteMemory> remote_;  // per rank
  // Work requests built once per peer (addresses, keys, immediates resolved) and patched
  // with this round's offsets and lengths. [W]; entries for `rank_` are unused.
  std::vector<WriteRequest> count_req_, spec_req_, bulk_req_, combine_req_;

  uint32_t* counts_in_ = nullptr;            // [W][W] view of recv_buf_
  std::vector<uint32_t> send_start_;         // [W+1] record index where each dest begins
  std::vector<uint32_t> send_pos_;           // [num_tokens * top_k] record index per (t, k)
  uint32_t num_tokens_ = 0;
  std::vector<ReceivedRecord> received_;
  std::shared_ptr<OpCounter> writes_;        // this round's writes
  int64_t writes_expected_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool counts_ready_ = false;                // guarded by mu_
  std::string bulk_error_;                   // guarded by mu_
  uint16_t round_ = 0;
};

}  // namespace pg::comm
