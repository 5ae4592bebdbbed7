#include "runtime/cuda/gpu_decode_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/log.h"
#include "core/status.h"
#include "kernels/cuda/ceilings.h"
#include "kernels/cuda/common/block_trace.h"
#include "kernels/cuda/common/cuda_check.h"
#include "models/config.h"
#include "models/loader.h"
#include "models/moe_config.h"
#include "models/moe_loader.h"
#include "runtime/cuda/device_memory.h"
#include "runtime/cuda/gpu_runner.h"
#include "runtime/cuda/stream.h"

namespace pg::runtime::cuda {
namespace {

using Clock = std::chrono::steady_clock;

// GpuDecodeBenchOptions::skip_ops: this thread's op observer for a scope, leaving the named
// ops out (an inner observer, if any, is replaced for the scope: --profile runs outside it).
class SkipOps final : public ops::OpObserver {
 public:
  // names: one --skip-op set, split at '+'.
  explicit SkipOps(const std::string& set) : prev_(ops::CurrentOpObserver()) {
    for (size_t b = 0; b <= set.size();) {
      const size_t e = std::min(set.find('+', b), set.size());
      if (e > b) names_.push_back(set.substr(b, e - b));
      b = e + 1;
    }
    if (!names_.empty()) ops::CurrentOpObserver() = this;
  }
  ~SkipOps() override {
    if (!names_.empty()) ops::CurrentOpObserver() = prev_;
  }
  SkipOps(const SkipOps&) = delete;
  SkipOps& operator=(const SkipOps&) = delete;
  void Begin(std::string_view) override {}
  void End(std::string_view) override {}
  bool Skip(std::string_view op) override {
    return std::find(names_.begin(), names_.end(), op) != names_.end();
  }

 private:
  std::vector<std::string> names_;
  ops::OpObserver* prev_;
};

double UsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

nlohmann::json ReadHfJson(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p = fs::is_directory(path) ? fs::path(path) / "config.json" : fs::path(path);
  std::ifstream in(p);
  PG_ENSURE(in.good(), kNotFound, "cannot open {}", p.string());
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    Throw(ErrorCode::kMalformed, "{}: invalid JSON: {}", p.string(), e.what());
  }
  return j;
}

std::string DummyName(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p = fs::is_directory(path) ? fs::path(path) / "config.json" : fs::path(path);
  return p.parent_path().filename().string() + " (dummy weights)";
}

}  // namespace

std::unique_ptr<models::Model> CreateDummyOnDevice(const std::string& path,
                                                   models::DeviceMemory& mem,
                                                   const models::DevicePlacement& placement,
                                                   uint64_t seed) {
  const nlohmann::json j = ReadHfJson(path);
  if (j.contains("model_type") && j["model_type"].is_string() &&
      models::IsMoeModelType(j["model_type"].get<std::string>())) {
    models::MoeModelConfig c = models::MoeConfigFromHf(j);
    c.base.name = DummyName(path);
    const bool fp8 = models::DeclaresFp8Weights(j);
    if (fp8) c.base.name += " fp8";
    return models::CreateDummyMoeModelOnDevice(c, mem, placement, seed, fp8);
  }
  models::ModelConfig c = models::ConfigFromHf(j);
  c.name = DummyName(path);
  return models::CreateDummyModelOnDevice(c, mem, placement, seed);
}

BenchModel PlaceBenchModel(const std::string& path, bool dummy, const GpuRunnerOptions& options,
                           uint64_t seed, DType weight_dtype) {
  BenchModel bm;
  bm.runner = std::make_unique<GpuRunner>(options);
  const models::DevicePlacement placement{.max_batch_tokens = options.max_batch_tokens,
                                          .weight_dtype = weight_dtype};
  if (dummy) {
    bm.model = CreateDummyOnDevice(path, bm.runner->memory(), placement, seed);
  } else {
    bm.model = models::LoadModel({.path = path});
    bm.model->PlaceOnDevice(bm.runner->memory(), placement);
  }
  PG_CUDA_CHECK(cudaStreamSynchronize(bm.runner->stream()));
  bm.runner->Attach(*bm.model);
  return bm;
}

GpuDecodeBenchReport RunGpuDecodeBench(const GpuDecodeBenchOptions& o,
                                       const std::function<void(const GpuDecodeBenchRow&)>& on_row) {
  PG_ENSURE(!o.batches.empty() && !o.contexts.empty() && o.iters > 0, kInvalidArgument,
            "gpu-decode: need batch sizes, contexts and iters > 0");
  for (int b : o.batches) PG_ENSURE(b > 0, kInvalidArgument, "batch size {} must be > 0", b);
  for (int c : o.contexts) PG_ENSURE(c > 0, kInvalidArgument, "context {} must be > 0", c);
  GpuDecodeBenchReport report;
  report.hbm_bytes_per_s = pg::cuda::MeasureHbmBytesPerS();

  const int max_batch = *std::max_element(o.batches.begin(), o.batches.end());
  BenchModel bm = PlaceBenchModel(o.model, o.dummy,
                                  {.gpu_memory_utilization = o.gpu_memory_utilization,
                                   .max_batch_tokens = max_batch, .page_size = o.page_size,
                                   .kv_dtype = o.kv_dtype},
                                  o.seed, o.weight_dtype);
  GpuRunner& runner = *bm.runner;
  const std::unique_ptr<models::Model>& model = bm.model;
  report.model = model->config().Summary();
  report.streamed_weight_bytes = model->streamed_weight_bytes();
  report.kv_bytes_per_token = runner.kv_bytes_per_token();
  const int vocab = model->config().vocab_size;

  for (int ctx : o.contexts) {
    for (int batch : o.batches) {
      GpuDecodeBenchRow row;
      row.batch = batch, row.context = ctx;
      // Refined after the step ran (MoE models: the experts its routes touched).
      auto set_floor = [&](double weight_bytes) {
        row.weight_bytes = weight_bytes;
        row.bytes_per_step =
            weight_bytes + double(batch) * double(ctx) * double(report.kv_bytes_per_token);
        row.floor_us = row.bytes_per_step / report.hbm_bytes_per_s * 1e6;
      };
      set_floor(double(report.streamed_weight_bytes));
      try {
        runner.ConfigureKv(batch, std::max(ctx, o.capture_context));
      } catch (const Error& e) {
        row.note = e.what();
        if (on_row) on_row(row);
        report.rows.push_back(row);
        continue;
      }
      row.fits = true;
      runner.FillKvRandom(o.seed + 1000);
      // Every sequence decodes one token at position ctx - 1 (it has ctx - 1 cached tokens).
      std::vector<int32_t> tokens(static_cast<size_t>(batch));
      for (int s = 0; s < batch; ++s) tokens[size_t(s)] = int32_t((s * 7919 + 13) % vocab);
      std::vector<StepSeq> seqs;
      for (int s = 0; s < batch; ++s)
        seqs.push_back({s, ctx - 1, std::span<const int32_t>(&tokens[size_t(s)], 1)});
      // Eager: the same step launched op by op.
      runner.Step(seqs, {});
      PG_CUDA_CHECK(cudaStreamSynchronize(runner.stream()));
      const int eager_iters = 3;
      auto t0 = Clock::now();
      for (int i = 0; i < eager_iters; ++i) runner.Step(seqs, {});
      PG_CUDA_CHECK(cudaStreamSynchronize(runner.stream()));
      row.eager_step_us = UsSince(t0) / eager_iters;
      // Graph: captured for this batch and context.
      const int sizes[] = {batch};
      const int cap = std::max(ctx, o.capture_context);
      auto capture = [&] {
        if (o.capture_context > 0) runner.CaptureDecode(sizes, cap, o.kv_buckets);
        else runner.CaptureDecode(sizes, ctx);
      };
      capture();
      for (int i = 0; i < 3; ++i) runner.Decode(seqs, {});
      for (int len : runner.decode_kv_buckets())
        if (len >= ctx) {
          row.graph_kv_len = len;
          break;
        }
      PG_CUDA_CHECK(cudaStreamSynchronize(runner.stream()));
      Event e0, e1;
      e0.Record(runner.stream());
      for (int i = 0; i < o.iters; ++i) runner.ReplayStaged(batch);
      e1.Record(runner.stream());
      e1.Synchronize();
      row.graph_step_us = double(e1.ElapsedMsSince(e0)) * 1e3 / o.iters;
      // Diagnostic build (-DPEREGRINE_BLOCK_TRACE=ON): a block timeline of three back-to-back
      // replays into $PEREGRINE_BLOCK_TRACE_OUT/trace_b<batch>_c<context>.csv.
      if (const char* dir = std::getenv("PEREGRINE_BLOCK_TRACE_OUT");
          dir != nullptr && pg::cuda::BlockTraceCompiled()) {
        pg::cuda::BlockTraceStart(1u << 21);
        for (int i = 0; i < 3; ++i) runner.ReplayStaged(batch);
        std::filesystem::create_directories(dir);
        pg::cuda::BlockTraceWriteCsv(pg::cuda::BlockTraceCollect(),
                                 fmt::format("{}/trace_b{}_c{}.csv", dir, batch, ctx));
      }
      // Every replay is the same step (same tokens, positions, routes).
      set_floor(double(model->last_forward_weight_bytes()));
      // The serving loop: stage, replay, sample on the device, read back the tokens only.
      std::vector<ops::SampleRow> sample_rows(static_cast<size_t>(batch));
      for (int s = 0; s < batch; ++s) {
        ops::SampleRow& r = sample_rows[size_t(s)];
        r.temperature = 0.8f, r.top_p = 0.9f, r.seed_lo = uint32_t(s);
      }
      std::vector<int32_t> sampled(static_cast<size_t>(batch));
      t0 = Clock::now();
      for (int i = 0; i < o.iters; ++i) {
        for (ops::SampleRow& r : sample_rows) r.step = uint32_t(i);
        runner.Decode(seqs, {});
        runner.Sample(sample_rows, sampled);
      }
      row.loop_step_us = UsSince(t0) / o.iters;
      for (int32_t t : sampled)
        PG_CHECK(t >= 0 && t < vocab, "sampled token {} outside the vocab", t);
      if (o.profile) {
        // One eager step with events around every op, queued behind a spin kernel (so the
        // events time the GPU's back-to-back execution, as in the graph).
        OpProfiler prof;
        {
          OpProfiler::Scope scope(prof);
          runner.Step(seqs, {});
        }
        PG_CUDA_CHECK(cudaStreamSynchronize(runner.stream()));
        row.profile = prof.ByOp();
        row.profile_calls = prof.Calls();
        if (row.profile_calls.size() > 48) row.profile_calls.resize(48);
      }
      for (const std::string& set : o.skip_ops) {  // after everything else: recaptures
        {
          SkipOps skip(set);
          capture();
        }
        runner.Decode(seqs, {});  // stages the bench's batch again (capture staged its own)
        Event s0, s1;
        s0.Record(runner.stream());
        for (int i = 0; i < o.iters; ++i) runner.ReplayStaged(batch);
        s1.Record(runner.stream());
        s1.Synchronize();
        row.skip_graph_us.emplace_back(set, double(s1.ElapsedMsSince(s0)) * 1e3 / o.iters);
      }
      if (on_row) on_row(row);
      report.rows.push_back(row);
    }
  }
  return report;
}

std::string FormatGpuDecodeHeader(const GpuDecodeBenchReport& r) {
  return fmt::format(
      "model: {}\nHBM (D2D copy, read+write) {:.0f} GB/s; weights streamed per step {:.3f} GB; "
      "KV {} B/token\n{:>5} {:>7} {:>11} {:>11} {:>11} {:>11} {:>8} {:>10} {:>9}",
      r.model, r.hbm_bytes_per_s / 1e9, double(r.streamed_weight_bytes) / 1e9,
      r.kv_bytes_per_token, "batch", "context", "graph_us", "loop_us", "eager_us", "floor_us",
      "floor/t", "tok/s", "w_GB");
}

std::string FormatGpuDecodeProfile(const GpuDecodeBenchRow& w) {
  if (w.profile.empty()) return {};
  double total = 0;
  for (const OpTime& t : w.profile) total += t.us;
  std::string s = fmt::format("  profile (batch {}, context {}): ops sum {:.1f} us, graph {:.1f} us\n",
                              w.batch, w.context, total, w.graph_step_us);
  for (const OpTime& t : w.profile)
    s += fmt::format("    {:<14} {:>5} calls {:>10.1f} us {:>6.1f}%  {:>7.2f} us/call\n", t.op,
                     t.calls, t.us, 100.0 * t.us / total, t.us / t.calls);
  s += "  first ops in order (us):";
  for (size_t i = 0; i < w.profile_calls.size(); ++i)
    s += fmt::format("{}{} {:.1f}", i % 8 ? ", " : "\n    ", w.profile_calls[i].op,
                     w.profile_calls[i].us);
  return s;
}

namespace {
// --skip-op rows: each set's graph time and what leaving it out saved.
std::string FormatSkips(const GpuDecodeBenchRow& w) {
  std::string s;
  for (const auto& [set, us] : w.skip_graph_us)
    s += fmt::format("\n      without {}: graph {:.1f} us ({:+.1f} us, measurement only)", set, us,
                     us - w.graph_step_us);
  return s;
}
}  // namespace

std::string FormatGpuDecodeRow(const GpuDecodeBenchRow& w) {
  if (!w.fits)
    return fmt::format("{:>5} {:>7}   skipped: {}", w.batch, w.context, w.note);
  return fmt::format(
      "{:>5} {:>7} {:>11.1f} {:>11.1f} {:>11.1f} {:>11.1f} {:>7.1f}% {:>10.0f} {:>9.3f}", w.batch,
      w.context, w.graph_step_us, w.loop_step_us, w.eager_step_us, w.floor_us,
      100.0 * w.ratio(), w.batch * 1e6 / w.graph_step_us, w.weight_bytes / 1e9) +
         (w.graph_kv_len != w.context ? fmt::format("  (graph set of kv length {})", w.graph_kv_len) : "") +
         FormatSkips(w);
}

}  // namespace pg::runtime::cuda
