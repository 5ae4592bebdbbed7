// A model-free executor for scheduler tests. "KV" of a position is the token at that
// position, stored in page-shaped device/host arrays; copy ops move it like real KV. Before
// sampling it reads the whole context back through the entry's page table and checks it
// against the true sequence, so a wrong page table, a lost page, a wrong prefix hit or a
// wrong copy list fails the test. The sampled token is a hash of the true sequence, so a
// request's output is fixed by its prompt alone (the oracle: ReferenceOutput).
// Linear-attention state is modelled as a running hash of the tokens consumed, checked the
// same way, so state slots, resets, restores and checkpoints are checked too.
// With a `window` the next token is mostly a hash of the last `window` tokens, over 16 ids: the
// output soon repeats itself, so speculative drafts (plan.h) are accepted as well as rejected;
// the executor verifies them as a real one does (sample at each position, stop at the first
// sample that differs from the next draft).
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "scheduler/scheduler.h"

namespace pg::scheduler::testing {

inline uint64_t MixState(uint64_t h, int32_t token) {
  h ^= static_cast<uint64_t>(token) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h *= 0xff51afd7ed558ccdULL;
  return h ^ (h >> 29);
}

struct Sample { int32_t token; bool stop; };
inline Sample NextToken(const std::vector<int32_t>& seq, bool with_stops, int32_t window = 0) {
  uint64_t h = 1469598103934665603ULL;
  for (int32_t t : seq) h = MixState(h, t);
  if (window > 0 && h % 8 != 0) {  // 7 in 8 tokens: a function of the last `window` only
    const size_t from = seq.size() > size_t(window) ? seq.size() - size_t(window) : 0;
    h = 1469598103934665603ULL;
    for (size_t i = from; i < seq.size(); ++i) h = MixState(h, seq[i]);
  }
  if (window > 0) {
    const int32_t tok = static_cast<int32_t>(h % 16);
    return {tok, with_stops && tok == 0 && (h >> 20) % 4 == 0};
  }
  const int32_t tok = static_cast<int32_t>(h % 997);
  return {tok, with_stops && tok % 61 == 0};
}

// What a request generates when run alone: the oracle for every scheduled run.
inline std::vector<int32_t> ReferenceOutput(std::vector<int32_t> seq, int32_t max_new, bool with_stops,
                                            int32_t window = 0) {
  std::vector<int32_t> out;
  for (int32_t i = 0; i < max_new; ++i) {
    const Sample s = NextToken(seq, with_stops, window);
    out.push_back(s.token);
    seq.push_back(s.token);
    if (s.stop) break;
  }
  return out;
}

class FakeExecutor {
 public:
  FakeExecutor(const SchedulerConfig& c, bool with_stops, int32_t window = 0)
      : P_(c.kv.page_size_tokens), with_stops_(with_stops), window_(window),
        device_(size_t(c.kv.num_device_pages) * P_, -1), host_(size_t(c.kv.num_host_pages) * P_, -1),
        slots_(c.state.num_state_slots), checkpoints_(c.state.num_checkpoints) {}

  void AddRequest(RequestId id, const std::vector<int32_t>& prompt) { truth_[id] = prompt; }
  void Forget(RequestId id) { truth_.erase(id); }

  StepResult Run(const Plan& plan) {
    for (const cache::CopyOp& op : plan.copies) {
      int32_t* dev = &device_[size_t(op.device_page) * P_];
      int32_t* hst = &host_[size_t(op.host_slot) * P_];
      if (op.kind == cache::CopyKind::kDeviceToHost) std::copy(dev, dev + P_, hst);
      else std::copy(hst, hst + P_, dev);
    }
    // State restores happen before the forward pass, for every entry.
    for (const PlanEntry& e : plan.entries) {
      if (e.state_slot < 0) continue;
      if (e.reset_state) slots_[e.state_slot] = {1469598103934665603ULL, 0};
      if (e.restore_checkpoint) slots_[e.state_slot] = checkpoints_[*e.restore_checkpoint];
    }
    StepResult result;
    for (const PlanEntry& e : plan.entries) {
      auto& truth = truth_.at(e.id);
      EXPECT_EQ(e.input_tokens.size(), size_t(e.num_tokens));
      EXPECT_EQ(e.page_table.size(), size_t((e.first_position + e.num_tokens + P_ - 1) / P_));
      EXPECT_EQ(e.num_draft > 0, e.num_sample > 1);
      if (e.num_draft > 0) {
        EXPECT_TRUE(e.is_decode);
        EXPECT_EQ(e.num_sample, 1 + e.num_draft);
      }
      size_t save = 0;
      for (int32_t i = 0; i < e.num_tokens; ++i) {
        const int32_t pos = e.first_position + i;
        if (i > 0 && i <= e.num_draft) {  // a draft: not part of the sequence (yet)
          device_[size_t(e.page_table[pos / P_]) * P_ + pos % P_] = e.input_tokens[i];
          ++num_draft_tokens;
          continue;
        }
        EXPECT_EQ(e.input_tokens[i], truth.at(pos)) << "request " << e.id << " pos " << pos;
        device_[size_t(e.page_table[pos / P_]) * P_ + pos % P_] = e.input_tokens[i];
        if (e.state_slot >= 0) {
          auto& st = slots_[e.state_slot];
          EXPECT_EQ(st.second, pos) << "state of request " << e.id << " is at the wrong position";
          st = {MixState(st.first, e.input_tokens[i]), pos + 1};
          if (save < e.state_saves.size() && e.state_saves[save].num_tokens == pos + 1) {
            checkpoints_[e.state_saves[save++].checkpoint] = st;
          }
        }
      }
      if (e.state_slot >= 0) {
        EXPECT_EQ(save, e.state_saves.size());
      }
      if (e.num_sample == 0) continue;
      const int32_t end = e.first_position + e.num_tokens - e.num_draft;
      EXPECT_EQ(end, static_cast<int32_t>(truth.size()));
      uint64_t expect_state = 1469598103934665603ULL;
      for (int32_t pos = 0; pos < end; ++pos) {  // read the whole context back: the KV check
        const int32_t kv = device_[size_t(e.page_table[pos / P_]) * P_ + pos % P_];
        if (kv != truth[pos]) {
          ADD_FAILURE() << "request " << e.id << ": wrong KV at position " << pos;
          ++kv_errors;
          break;
        }
        expect_state = MixState(expect_state, truth[pos]);
      }
      if (e.state_slot >= 0) {
        EXPECT_EQ(slots_[e.state_slot].first, expect_state);
      }
      for (int32_t i = 0; i <= e.num_draft; ++i) {  // verify the drafts in order
        const Sample s = NextToken(truth, with_stops_, window_);
        truth.push_back(s.token);
        if (i < e.num_draft && !s.stop && s.token == e.input_tokens[size_t(i + 1)]) {
          ++num_accepted_tokens;
          continue;
        }
        result.sampled.push_back({.id = e.id, .token = s.token, .stop = s.stop, .num_accepted = i});
        break;
      }
    }
    return result;
  }

  int64_t kv_errors = 0;
  int64_t num_draft_tokens = 0, num_accepted_tokens = 0;

 private:
  int32_t P_;
  bool with_stops_;
  int32_t window_;
  std::vector<int32_t> device_, host_;
  std::vector<std::pair<uint64_t, int32_t>> slots_;        // (hash, tokens consumed)
  std::vector<std::pair<uint64_t, int32_t>> checkpoints_;
  std::unordered_map<RequestId, std::vector<int32_t>> truth_;
};

// Drives a Scheduler with a FakeExecutor one step at a time, collecting outputs.
struct Harness {
  explicit Harness(SchedulerConfig c, bool stops = false, int32_t window = 0)
      : s(c), exec(c, stops, window) {}
  void Submit(RequestId id, std::vector<int32_t> prompt, int32_t max_new, std::string session = "",
              int32_t priority = 0) {
    exec.AddRequest(id, prompt);
    s.Submit(id, SubmitParams{std::move(prompt), max_new, std::move(session), priority});
  }
  // One step; returns the plan's copy for inspection.
  Plan Step() {
    const Plan& plan = s.NextPlan(now += 1000);
    Plan copy;
    copy.entries = plan.entries;
    copy.copies = plan.copies;
    copy.preempted = plan.preempted;
    copy.num_tokens = plan.num_tokens;
    copy.num_decode_entries = plan.num_decode_entries;
    if (!plan.empty()) s.Advance(exec.Run(plan), now += 1000);
    for (auto& u : s.TakeUpdates()) {
      if (u.token) outputs[u.id].push_back(*u.token);
      if (u.finished) finished[u.id] = u;
    }
    s.CheckInvariants();
    return copy;
  }
  void RunAll(int max_steps = 100000) {
    for (int i = 0; i < max_steps && s.HasWork(); ++i) Step();
    ASSERT_FALSE(s.HasWork()) << "requests did not finish";
  }
  Scheduler s;
  FakeExecutor exec;
  int64_t now = 0;
  std::map<RequestId, std::vector<int32_t>> outputs;
  std::map<RequestId, RequestUpdate> finished;
};

}  // namespace pg::scheduler::testing
