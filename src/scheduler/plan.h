// What the scheduler asks the executor to do in one step, and what the executor reports back.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "cache/kv_cache.h"
#include "cache/state_slots.h"
#include "scheduler/request_fsm.h"

namespace pg::scheduler {

// Linear-attention layers: after the forward pass has processed `num_tokens` tokens of the
// request (an absolute count, a multiple of the page size), copy its state slot into
// checkpoint `checkpoint`.
struct StateSave {
  int32_t num_tokens = 0;
  cache::CheckpointId checkpoint = -1;
};

// One request's share of a step. Spans point into scheduler-owned storage and stay valid
// until the next Advance() (they are not copied per step: page tables can be long).
struct PlanEntry {
  RequestId id = 0;
  int32_t first_position = 0;                 // position of input_tokens[0]
  int32_t num_tokens = 0;                     // tokens to compute: positions [first, first+n)
  std::span<const int32_t> input_tokens;      // [num_tokens]
  std::span<const cache::PageId> page_table;  // pages for positions [0, first+n), in order;
                                              // position p lives in page p / page_size
  // Tokens to sample, from the logits of the last num_sample positions: 0 (a prefill chunk
  // short of the prompt's end), 1, or 1 + num_draft for a speculative decode.
  int32_t num_sample = 0;
  bool is_decode = false;   // a decoding request's entry: every earlier position computed,
                            // num_tokens == 1 + num_draft
  // Speculative decoding: input_tokens = [last token, draft_1 .. draft_d] with d = num_draft.
  // The executor samples at each of the 1 + d positions in order with the request's sampler
  // and stops at the first sample that differs from the next draft (the drafts before it are
  // accepted; that sample is the step's new token), or after the last position (every draft
  // accepted, plus one more token). Drawing from the sampler's own distribution and comparing
  // is exact rejection sampling for a draft proposed with probability 1: the output has the
  // distribution (and, seeded, the tokens) of plain decoding. The KV written at rejected
  // positions lies past the request's computed tokens and is overwritten before it is read.
  int32_t num_draft = 0;
  int32_t num_cached_tokens = 0;  // prompt tokens served from cache (for reporting)
  // Hybrid models only (state slots enabled):
  cache::StateSlotId state_slot = -1;
  bool reset_state = false;  // first_position == 0: start from the zero state
  std::optional<cache::CheckpointId> restore_checkpoint;  // load before the step
  std::vector<StateSave> state_saves;                     // in increasing num_tokens
};

struct Plan {
  uint64_t step = 0;
  // Decode entries first (every running decode that fits), then prefill chunks.
  std::vector<PlanEntry> entries;
  // Page copies to perform in this order before the forward pass (see kv_cache.h).
  std::vector<cache::CopyOp> copies;
  // Requests preempted while planning this step (their KV is swapped out by `copies` or
  // dropped to be recomputed). Informational: they have no entry.
  std::vector<RequestId> preempted;
  int32_t num_tokens = 0;         // sum of entries' num_tokens (<= the step budget)
  int32_t num_decode_entries = 0;
  bool empty() const { return entries.empty() && copies.empty(); }
};

// Executor's report for one step: for every entry with num_sample > 0, its new token and,
// for a speculative decode, how many of its drafts were accepted before it.
struct SampledToken {
  RequestId id = 0;
  int32_t token = 0;
  bool stop = false;  // the engine saw EOS / a stop token: finish with reason kStop
  // Drafts accepted (input_tokens[1 .. num_accepted]), generated before `token`; none of them
  // is a stop token (the engine ends the accepted run at a stop: that draft becomes `token`).
  int32_t num_accepted = 0;
};
struct StepResult {
  std::vector<SampledToken> sampled;
};

// Per-request news produced by Advance / Abort, drained with Scheduler::TakeUpdates.
struct RequestUpdate {
  RequestId id = 0;
  std::optional<int32_t> token;  // newly generated token, if any
  bool finished = false;
  FinishReason reason = FinishReason::kStop;
  int32_t num_prompt_tokens = 0;
  int32_t num_cached_tokens = 0;  // prompt tokens served from the prefix cache
  int32_t num_generated_tokens = 0;
};

}  // namespace pg::scheduler
