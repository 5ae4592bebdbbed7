// `peregrine bench gpu-prefill`: whole-model prefill and time to first token on one GPU,
// held against the FLOP floor measured in the same run:
//   FLOPs = 2 · linear params per token · tokens        (q/k/v/o, gate/up/down of every layer)
//         + 2 · vocab · hidden · logit rows             (one row per step: its last token)
//         + 4 · layers · heads · head_dim · Σ_tokens (keys visible to the token)
//   where a token at position p sees p + 1 keys (causal, any cached prefix included), and
//   floor = FLOPs / bf16 GEMM rate (cuBLASLt 8192^3 in this run).
// Prefill: one prompt of each length, chunked by `chunk` tokens per GpuRunner::Step (eager),
// timed from the first chunk's staging to the last chunk's logits on the host.
// TTFT: `ttft_new` tokens appended to a `ttft_prefix`-token cached prefix of one sequence
// (the prefix is made untimed: random KV values by default, or really prefilled), timed from
// staging to the first token chosen (greedy argmax on the host over the read-back logits).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace pg::runtime::cuda {

struct GpuPrefillBenchOptions {
  std::string model;                  // as GpuDecodeBenchOptions::model
  bool dummy = true;
  std::vector<int> prompts{8192, 32768};  // prompt lengths (tokens), one sequence each
  std::vector<int> chunks{8192};      // tokens per step; each chunk size is a fresh runner
  int ttft_prefix = 50000;            // cached tokens before the TTFT step (0: no TTFT)
  int ttft_new = 800;                 // new tokens of the TTFT step (0: no TTFT)
  int ttft_reps = 3;                  // timed TTFT runs (median reported), after one warm-up
  bool prefill_prefix = false;        // prefill the TTFT prefix instead of random KV values
  double gpu_memory_utilization = 0.9;
  int page_size = 16;
  uint64_t seed = 1;
};

struct GpuPrefillBenchRow {
  std::string kind;                   // "prefill" or "ttft"
  int chunk = 0;                      // tokens per step
  int prefix = 0;                     // cached tokens before the timed tokens
  int tokens = 0;                     // timed new tokens
  bool ok = false;
  std::string note;                   // why a point was skipped
  double seconds = 0;                 // wall time (median for ttft)
  double flops = 0;                   // per the model above
  double floor_seconds = 0;           // flops / GEMM rate
  std::vector<double> step_ms;        // prefill: each chunk's wall time
  double ratio() const { return seconds > 0 ? floor_seconds / seconds : 0; }
  double tokens_per_s() const { return seconds > 0 ? tokens / seconds : 0; }
};

struct GpuPrefillBenchReport {
  std::string model;
  double gemm_flops_per_s = 0;        // measured in this run
  double linear_params_per_token = 0; // matmul parameters every token passes through
  std::vector<GpuPrefillBenchRow> rows;
};

// FLOPs of appending `tokens` tokens after `prefix` cached ones in `steps` steps (the model
// in the header comment); pure arithmetic.
struct PrefillFlopShape {
  double linear_params_per_token;
  int64_t vocab, hidden, layers, heads, head_dim;
};
double PrefillFlops(const PrefillFlopShape& shape, int64_t prefix, int64_t tokens, int64_t steps);

GpuPrefillBenchReport RunGpuPrefillBench(
    const GpuPrefillBenchOptions& options,
    const std::function<void(const GpuPrefillBenchRow&)>& on_row = {});
std::string FormatGpuPrefillHeader(const GpuPrefillBenchReport& report);
std::string FormatGpuPrefillRow(const GpuPrefillBenchRow& row);

}  // namespace pg::runtime::cuda
