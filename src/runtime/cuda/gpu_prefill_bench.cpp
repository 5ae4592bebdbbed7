#include "runtime/cuda/gpu_prefill_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <span>

#include <fmt/format.h>

#include "core/log.h"
#include "core/status.h"
#include "kernels/cuda/ceilings.h"
#include "kernels/cuda/common/cuda_check.h"
#include "runtime/cuda/gpu_decode_bench.h"
#include "runtime/cuda/gpu_runner.h"

namespace pg::runtime::cuda {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

PrefillFlopShape FlopShape(const models::ModelConfig& c) {
  const double h = c.hidden_size, qd = double(c.num_heads) * c.head_dim,
               kvd = double(c.num_kv_heads) * c.head_dim, inter = c.intermediate_size;
  // Per layer: q, k, v ([qd | kvd | kvd] x h), o (h x qd), gate, up (inter x h), down.
  const double per_layer = h * (qd + 2 * kvd) + qd * h + 3 * h * inter;
  return {per_layer * c.num_layers, c.vocab_size, c.hidden_size, c.num_layers, c.num_heads,
          c.head_dim};
}

// Deterministic prompt tokens in [0, vocab) (the values do not change the timing).
std::vector<int32_t> PromptTokens(int n, int vocab, uint64_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[size_t(i)] = int32_t((uint64_t(i) * 7919 + seed * 104729 + 13) % uint64_t(vocab));
  return t;
}

// Appends tokens [prefix, prefix + tokens.size()) of slot 0 in steps of `chunk` tokens; the
// last step's logits go to `logits` (read back), earlier steps read nothing back. Returns
// each step's wall time in ms (each step is synchronised so its time is its own).
std::vector<double> ChunkedSteps(GpuRunner& r, int prefix, std::span<const int32_t> tokens,
                                 int chunk, std::span<float> logits) {
  std::vector<double> ms;
  for (size_t at = 0; at < tokens.size(); at += size_t(chunk)) {
    const size_t len = std::min<size_t>(size_t(chunk), tokens.size() - at);
    const bool last = at + len == tokens.size();
    const StepSeq s{0, prefix + int(at), tokens.subspan(at, len)};
    const auto t0 = Clock::now();
    r.Step(std::span<const StepSeq>(&s, 1), last ? logits : std::span<float>());
    PG_CUDA_CHECK(cudaStreamSynchronize(r.stream()));
    ms.push_back(SecondsSince(t0) * 1e3);
  }
  return ms;
}

}  // namespace

double PrefillFlops(const PrefillFlopShape& s, int64_t prefix, int64_t tokens, int64_t steps) {
  const double n = double(tokens), p = double(prefix);
  // Σ over new tokens at positions prefix .. prefix + n - 1 of (position + 1) keys.
  const double keys = n * p + n * (n + 1) / 2;
  return 2.0 * s.linear_params_per_token * n + 2.0 * double(s.vocab) * double(s.hidden) * double(steps) +
         4.0 * double(s.layers) * double(s.heads) * double(s.head_dim) * keys;
}

GpuPrefillBenchReport RunGpuPrefillBench(
    const GpuPrefillBenchOptions& o, const std::function<void(const GpuPrefillBenchRow&)>& on_row) {
  PG_ENSURE(!o.chunks.empty() && o.ttft_reps > 0 && o.ttft_prefix >= 0 && o.ttft_new >= 0,
            kInvalidArgument, "gpu-prefill: need chunk sizes, ttft reps > 0, ttft sizes >= 0");
  for (int c : o.chunks) PG_ENSURE(c > 0, kInvalidArgument, "chunk {} must be > 0", c);
  for (int p : o.prompts) PG_ENSURE(p > 0, kInvalidArgument, "prompt {} must be > 0", p);
  const bool ttft = o.ttft_prefix > 0 && o.ttft_new > 0;
  int max_context = o.prompts.empty() ? 1 : *std::max_element(o.prompts.begin(), o.prompts.end());
  if (ttft) max_context = std::max(max_context, o.ttft_prefix + o.ttft_new);

  GpuPrefillBenchReport report;
  report.gemm_flops_per_s = pg::cuda::MeasureBf16GemmFlopsPerS();
  auto emit = [&](GpuPrefillBenchRow row) {
    if (on_row) on_row(row);
    report.rows.push_back(std::move(row));
  };

  for (int chunk : o.chunks) {
    // A fresh runner per chunk size: the activation scratch and io buffers are sized by it.
    BenchModel bm = PlaceBenchModel(o.model, o.dummy,
                                    {.gpu_memory_utilization = o.gpu_memory_utilization,
                                     .max_batch_tokens = chunk, .page_size = o.page_size},
                                    o.seed);
    GpuRunner& runner = *bm.runner;
    const models::ModelConfig& cfg = bm.model->config();
    const PrefillFlopShape shape = FlopShape(cfg);
    report.model = cfg.Summary();
    report.linear_params_per_token = shape.linear_params_per_token;
    const int vocab = cfg.vocab_size;
    std::vector<float> logits(static_cast<size_t>(vocab));
    try {
      runner.ConfigureKv(1, max_context);
    } catch (const Error& e) {
      GpuPrefillBenchRow row;
      row.kind = "prefill", row.chunk = chunk, row.note = e.what();
      emit(row);
      continue;
    }
    runner.FillKvRandom(o.seed + 1000);
    // Warm-up: one full chunk at position 0 (cuBLASLt heuristics, scratch first touch).
    {
      const std::vector<int32_t> w = PromptTokens(chunk, vocab, o.seed);
      ChunkedSteps(runner, 0, w, chunk, logits);
    }
    for (int prompt : o.prompts) {
      GpuPrefillBenchRow row;
      row.kind = "prefill", row.chunk = chunk, row.prefix = 0, row.tokens = prompt;
      const std::vector<int32_t> t = PromptTokens(prompt, vocab, o.seed + 1);
      const int64_t steps = (prompt + chunk - 1) / chunk;
      row.flops = PrefillFlops(shape, 0, prompt, steps);
      row.floor_seconds = row.flops / report.gemm_flops_per_s;
      const auto t0 = Clock::now();
      row.step_ms = ChunkedSteps(runner, 0, t, chunk, logits);
      row.seconds = SecondsSince(t0);
      row.ok = std::all_of(logits.begin(), logits.end(), [](float v) { return std::isfinite(v); });
      if (!row.ok) row.note = "non-finite logits";
      emit(row);
    }
    if (!ttft) continue;
    GpuPrefillBenchRow row;
    row.kind = "ttft", row.chunk = chunk, row.prefix = o.ttft_prefix, row.tokens = o.ttft_new;
    // The prefix, untimed: random K/V values in every page (the same bytes and FLOPs as a
    // real prefix), or a real chunked prefill of prompt tokens.
    if (o.prefill_prefix) {
      const std::vector<int32_t> p = PromptTokens(o.ttft_prefix, vocab, o.seed + 2);
      ChunkedSteps(runner, 0, p, chunk, logits);
    } else {
      runner.FillKvRandom(o.seed + 2000);
    }
    const std::vector<int32_t> t = PromptTokens(o.ttft_new, vocab, o.seed + 3);
    const int64_t steps = (o.ttft_new + chunk - 1) / chunk;
    row.flops = PrefillFlops(shape, o.ttft_prefix, o.ttft_new, steps);
    row.floor_seconds = row.flops / report.gemm_flops_per_s;
    std::vector<double> times;
    int32_t first = -1;
    // Every run rewrites the same positions [prefix, prefix + new) of the slot.
    for (int rep = 0; rep <= o.ttft_reps; ++rep) {
      const auto t0 = Clock::now();
      ChunkedSteps(runner, o.ttft_prefix, t, chunk, logits);
      first = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
      const double s = SecondsSince(t0);
      if (rep > 0) times.push_back(s);  // rep 0: warm-up (the 800-row GEMM shapes)
      row.step_ms.push_back(s * 1e3);
    }
    std::sort(times.begin(), times.end());
    row.seconds = times[times.size() / 2];
    row.ok = first >= 0 && first < vocab && std::isfinite(logits[size_t(first)]);
    if (!row.ok) row.note = "non-finite logits";
    emit(row);
  }
  return report;
}

std::string FormatGpuPrefillHeader(const GpuPrefillBenchReport& r) {
  return fmt::format(
      "model: {}\nbf16 GEMM (cuBLASLt 8192^3) {:.1f} TFLOP/s; linear params per token {:.3f} G\n"
      "{:<7} {:>6} {:>7} {:>7} {:>10} {:>9} {:>10} {:>8} {:>9}  {}",
      r.model, r.gemm_flops_per_s / 1e12, r.linear_params_per_token / 1e9, "kind", "chunk",
      "prefix", "tokens", "ms", "TFLOP", "floor_ms", "floor/t", "tok/s", "steps (ms)");
}

std::string FormatGpuPrefillRow(const GpuPrefillBenchRow& w) {
  if (!w.ok && w.seconds == 0)
    return fmt::format("{:<7} {:>6} {:>7} {:>7}   skipped: {}", w.kind, w.chunk, w.prefix,
                       w.tokens, w.note);
  std::string steps;
  for (size_t i = 0; i < w.step_ms.size() && i < 8; ++i)
    steps += fmt::format("{}{:.1f}", i ? " " : "", w.step_ms[i]);
  if (w.step_ms.size() > 8) steps += " ...";
  return fmt::format("{:<7} {:>6} {:>7} {:>7} {:>10.1f} {:>9.1f} {:>10.1f} {:>7.1f}% {:>9.0f}  {}{}",
                     w.kind, w.chunk, w.prefix, w.tokens, w.seconds * 1e3, w.flops / 1e12,
                     w.floor_seconds * 1e3, 100.0 * w.ratio(), w.tokens_per_s(), steps,
                     w.ok ? "" : "  FAILED: " + w.note);
}

}  // namespace pg::runtime::cuda
