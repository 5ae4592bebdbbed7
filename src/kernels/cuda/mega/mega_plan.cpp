// ops_mega.h MakeMegaPlan on CUDA: validates the steps, uploads their descriptors
// (mega_params.h MegaStep) and the step counters once, and launches ranges of them.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/env.h"
#include "kernels/cuda/common/context.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/mega/mega_params.h"
#include "kernels/ops_mega.h"
#include "kernels/rope_freq.h"

namespace pg::cuda {
int MegaMaxBlocks();
int MegaWarpMaxBlocks();
cudaError_t LaunchMegaWarp(const MegaArgs& a, int blocks, bool cooperative, bool pdl,
                           cudaStream_t stream);
cudaError_t LaunchMega(const MegaArgs& a, int blocks, bool cooperative, bool pdl,
                       cudaStream_t stream);
}  // namespace pg::cuda

namespace pg::ops {
void CountMegaLaunch();  // mega_plan.cpp (kernels/)

namespace {

using cuda::MegaKind;
using cuda::MegaStep;

bool DevBf16(const TensorView& t) { return t.device == Device::kCuda && t.dtype == DType::kBF16; }

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

cuda::WeightType NormType(DType t) {
  return t == DType::kBF16 ? cuda::WeightType::kBF16
                           : (t == DType::kF16 ? cuda::WeightType::kF16 : cuda::WeightType::kF32);
}

// An attention step's descriptor (its buffers are filled in by the plan), or why not.
std::string DescribeAttention(const MegaStepParams& p, MegaStep& s) {
  const int64_t hd = p.head_dim, row = int64_t(p.heads + 2 * p.kv_heads) * hd;
  if (!DevBf16(p.x) || !DevBf16(p.out)) return "x, out must be CUDA bf16";
  if (hd != cuda::kMegaHeadDim) return fmt::format("head_dim {} (the kernel takes 128)", hd);
  if (p.kv_heads <= 0 || p.heads % p.kv_heads != 0 || p.heads / p.kv_heads > cuda::kMegaMaxGroup)
    return fmt::format("{} heads over {} kv heads (groups of <= {})", p.heads, p.kv_heads,
                       cuda::kMegaMaxGroup);
  if (p.x.numel() != row || !p.x.is_contiguous()) return fmt::format("x must be [1, {}]", row);
  if (p.out.numel() != p.heads * hd || !p.out.is_contiguous()) return "out must be [1, heads * 128]";
  if (!p.rope.neox || RotaryDim(p.rope, int(hd)) != hd) return "RoPE: neox pairs over all of head_dim";
  if (p.layer < 0 || p.layer >= cuda::kMegaMaxLayers) return "layer index out of range";
  s = MegaStep{};
  s.kind = MegaKind::kAttention;
  s.x = static_cast<const cuda::bf16*>(p.x.data);
  s.out = static_cast<cuda::bf16*>(p.out.data);
  s.layer = p.layer;
  s.heads = p.heads;
  s.kv_heads = p.kv_heads;
  s.scale = p.scale != 0.0f ? p.scale : 1.0f / std::sqrt(float(hd));
  s.num_tiles = 0;  // no weights
  return {};
}

// The step's descriptor, or why the kernel cannot take it.
std::string Describe(const MegaStepParams& p, MegaStep& s) {
  if (p.kind == MegaStepKind::kAttention) return DescribeAttention(p, s);
  const bool norm = p.kind != MegaStepKind::kAccumulate;
  if (!DevBf16(p.x) || !DevBf16(p.w) || !DevBf16(p.out)) return "x, w, out must be CUDA bf16";
  if (p.w.ndim != 2 || p.w.strides[1] != 1) return "w must be [m, k] with unit inner stride";
  const int64_t rows = p.w.dim(0), k = p.w.dim(1);
  const int64_t m = p.kind == MegaStepKind::kNormSwiGlu ? rows / 2 : rows;
  if (p.x.numel() != k || !p.x.is_contiguous()) return fmt::format("x must be [1, {}]", k);
  if (p.out.numel() != m || !p.out.is_contiguous()) return fmt::format("out must be [1, {}]", m);
  if (p.kind == MegaStepKind::kNormSwiGlu && rows % 2 != 0) return "swiglu needs an even m";
  if (k % 8 != 0 || k > cuda::kMegaMaxK || p.w.strides[0] % 8 != 0 || !Aligned16(p.w.data) ||
      !Aligned16(p.x.data))
    return fmt::format("k {} / ldw {} outside the kernel's 16-byte rows (k <= {})", k,
                       p.w.strides[0], cuda::kMegaMaxK);
  if (p.out.data == p.x.data) return "out aliases x";
  if (norm && (!p.norm_weight.data || p.norm_weight.device != Device::kCuda ||
               p.norm_weight.numel() != k))
    return "norm kinds need a [k] CUDA norm weight";
  if (p.bias.data && (p.kind != MegaStepKind::kNormProject || p.bias.dtype != DType::kF32 ||
                      p.bias.device != Device::kCuda || p.bias.numel() != m))
    return "bias: f32 [m] on CUDA, kNormProject only";
  s = MegaStep{};
  s.kind = MegaKind(int(p.kind));
  s.k = int32_t(k);
  s.m = int32_t(m);
  const int tile_outputs = p.kind == MegaStepKind::kNormSwiGlu ? cuda::kMegaTileRows / 2
                                                                : cuda::kMegaTileRows;
  s.num_tiles = int32_t((m + tile_outputs - 1) / tile_outputs);
  // Row mode's rows per slot: the most of 8, 4, 2, 1 whole rows that fit a slot, with pieces
  // of k / (8 / rows) columns a multiple of 8 (swiglu: an even count); 0: tiles only.
  s.stage_rows = 0;
  if (p.w.strides[0] == k)
    for (int r : {8, 4, 2, 1}) {
      const int64_t per_row = cuda::kMegaConsumerWarps / r;
      if (r * k * 2 <= cuda::kMegaRowSlotBytes && k % (8 * per_row) == 0 &&
          (p.kind != MegaStepKind::kNormSwiGlu || r >= 2)) {
        s.stage_rows = r;
        break;
      }
    }
  s.ldw = p.w.strides[0];
  s.w = static_cast<const cuda::bf16*>(p.w.data);
  s.x = static_cast<const cuda::bf16*>(p.x.data);
  s.out = static_cast<cuda::bf16*>(p.out.data);
  s.bias = p.bias.data ? p.bias.as<float>() : nullptr;
  s.norm_weight = norm ? p.norm_weight.data : nullptr;
  s.norm_type = NormType(p.norm_weight.dtype);
  s.eps = p.eps;
  return {};
}

class CudaMegaPlan final : public MegaPlan {
 public:
  // steps: descriptors (attention steps get their RoPE table, partials and counters here).
  CudaMegaPlan(std::vector<MegaStep> steps, std::span<const MegaStepParams> params, int blocks)
      : num_steps_(int(steps.size())), blocks_(blocks) {
    // Warp mode (mega_warp.cu; the fastest mode measured, GPU request 5) unless
    // PEREGRINE_MEGA_WARP=0, when every swiglu step has its projection scratch and feeds the
    // next step: no attention inside its launches.
    warp_mode_ = EnvFlag("PEREGRINE_MEGA_WARP", true) && cuda::MegaWarpMaxBlocks() > 0 &&
                 std::any_of(steps.begin(), steps.end(),
                             [](const MegaStep& s) { return s.kind != MegaKind::kAttention; });
    for (size_t i = 0; warp_mode_ && i < steps.size(); ++i)
      if (steps[i].kind == MegaKind::kNormSwiGlu &&
          (!params[i].projected.data || params[i].projected.numel() != 2 * int64_t(steps[i].m) ||
           i + 1 >= steps.size() || steps[i + 1].kind != MegaKind::kAccumulate ||
           steps[i + 1].x != steps[i].out))
        warp_mode_ = false;
    if (warp_mode_) {
      for (size_t i = 0; i < steps.size(); ++i)
        if (steps[i].kind == MegaKind::kNormSwiGlu) {
          steps[i].out = static_cast<cuda::bf16*>(params[i].projected.data);
          steps[i + 1].swiglu_in = steps[i].out;
        }
      blocks_ = std::min(blocks_, cuda::MegaWarpMaxBlocks());
    }
    // Row mode (mega_params.h) when every GEMV step takes it, unless PEREGRINE_MEGA_TILES=1
    // (the tile mode: bitwise the fused GEMV ops' sums).
    row_mode_ = !EnvFlag("PEREGRINE_MEGA_TILES", false);
    for (const MegaStep& s : steps)
      if (s.kind != MegaKind::kAttention && s.stage_rows == 0) row_mode_ = false;
    if (row_mode_)
      for (MegaStep& s : steps)
        if (s.kind != MegaKind::kAttention) {
          const int per = s.kind == MegaKind::kNormSwiGlu ? s.stage_rows / 2 : s.stage_rows;
          s.num_tiles = (s.m + per - 1) / per;
        }
    int max_heads = 0, max_kv = 0;
    for (const MegaStep& s : steps)
      if (s.kind == MegaKind::kAttention) {
        max_heads = std::max(max_heads, int(s.heads));
        max_kv = std::max(max_kv, int(s.kv_heads));
        max_layer_ = std::max(max_layer_, int(s.layer));
      }
    if (max_heads > 0) {
      const int max_splits = blocks;  // a kv head never gets more splits than the grid
      PG_CUDA_CHECK(cudaMalloc(&partial_, size_t(max_heads) * max_splits *
                                              (cuda::kMegaHeadDim + 2) * sizeof(float)));
      PG_CUDA_CHECK(cudaMalloc(&group_counters_, size_t(max_kv) * sizeof(uint32_t)));
      PG_CUDA_CHECK(cudaMemset(group_counters_, 0, size_t(max_kv) * sizeof(uint32_t)));
      const size_t pairs = cuda::kMegaHeadDim / 2;
      PG_CUDA_CHECK(cudaMalloc(&inv_freq_, steps.size() * pairs * sizeof(float)));
      for (size_t i = 0; i < steps.size(); ++i) {
        MegaStep& s = steps[i];
        if (s.kind != MegaKind::kAttention) continue;
        const std::vector<float> f = RopeInvFreq(params[i].rope, cuda::kMegaHeadDim);
        PG_CUDA_CHECK(cudaMemcpy(inv_freq_ + i * pairs, f.data(), pairs * sizeof(float),
                                 cudaMemcpyHostToDevice));
        s.inv_freq = inv_freq_ + i * pairs;
        s.partial = partial_;
        s.group_counters = group_counters_;
        s.max_splits = max_splits;
      }
    }
    for (const MegaStep& s : steps) kinds_host_.push_back(int(s.kind));
    PG_CUDA_CHECK(cudaMalloc(&steps_, steps.size() * sizeof(MegaStep)));
    PG_CUDA_CHECK(cudaMemcpy(steps_, steps.data(), steps.size() * sizeof(MegaStep),
                             cudaMemcpyHostToDevice));
    if (EnvFlag("PEREGRINE_MEGA_TRACE", false)) {
      PG_CUDA_CHECK(cudaMalloc(&trace_, steps.size() * size_t(blocks) * 4 * sizeof(uint64_t)));
      for (const MegaStep& s : steps) kinds_.push_back(int(s.kind));
    }
    PG_CUDA_CHECK(cudaMalloc(&counters_, (steps.size() + 1) * sizeof(uint32_t)));
    PG_CUDA_CHECK(cudaMemset(counters_, 0, (steps.size() + 1) * sizeof(uint32_t)));
  }
  ~CudaMegaPlan() override {
    cudaFree(steps_);
    cudaFree(counters_);
    cudaFree(partial_);
    cudaFree(group_counters_);
    cudaFree(inv_freq_);
    cudaFree(trace_);
  }
  int num_steps() const override { return num_steps_; }
  void Run(int begin, int end, const MegaRunInputs& in) const override {
    PG_CHECK(0 <= begin && begin <= end && end <= num_steps_, "mega steps [{}, {}) of {}", begin,
             end, num_steps_);
    if (begin == end) return;
    CountMegaLaunch();
    cuda::MegaArgs a{};
    a.steps = steps_;
    a.begin = begin;
    a.end = end;
    a.num_steps = num_steps_;
    a.counters = counters_;
    a.trace = trace_;
    a.row_mode = row_mode_ ? 1 : 0;
    if (trace_) last_run_ = {begin, end};
    if (max_layer_ >= 0 && in.batch != nullptr) {
      // Attention steps may be in the range: their inputs must fit (the caller checked
      // MegaAttentionFits; a range without attention steps ignores them).
      PG_CHECK(MegaAttentionFits(in) && int(in.caches.size()) > max_layer_,
               "mega attention inputs do not fit");
      a.batch = *in.batch->device;
      // A/B knob (read once): keys per attention task prefetched into L2 by the producer.
      static const int prefetch = EnvInt("PEREGRINE_MEGA_KV_PREFETCH", 0);
      a.kv_prefetch_keys = prefetch;
      static const int unroll = EnvInt("PEREGRINE_MEGA_ATTN_UNROLL", 8);
      a.attn_unroll = unroll;
      for (size_t l = 0; l < in.caches.size() && l < size_t(cuda::kMegaMaxLayers); ++l) {
        a.k_cache[l] = static_cast<cuda::bf16*>(in.caches[l].k_cache.data);
        a.v_cache[l] = static_cast<cuda::bf16*>(in.caches[l].v_cache.data);
      }
    }
    // A/B knobs (read once): PEREGRINE_MEGA_COOP=0 launches without the cooperative
    // attribute (the grid still fits one block per SM); PEREGRINE_MEGA_PDL=1 lets the
    // weight stream start while the previous kernel drains (also needs PDL on).
    static const bool coop = EnvFlag("PEREGRINE_MEGA_COOP", true);
    static const bool pdl = EnvFlag("PEREGRINE_MEGA_PDL", false) && cuda::PdlEnabled();
    if (warp_mode_) {
      PG_CHECK(kinds_host_.size() == size_t(num_steps_));
      for (int si = begin; si < end; ++si)
        PG_CHECK(kinds_host_[size_t(si)] != int(MegaKind::kAttention),
                 "mega warp mode runs no attention step");
      PG_CUDA_CHECK(cuda::LaunchMegaWarp(a, blocks_, coop, pdl, cuda::CurrentStream()));
      return;
    }
    PG_CUDA_CHECK(cuda::LaunchMega(a, blocks_, coop, pdl, cuda::CurrentStream()));
  }

 private:
  int num_steps_, blocks_;
  int max_layer_ = -1;  // the largest layer index of an attention step (-1: none)
  bool row_mode_ = false;
  bool warp_mode_ = false;
  std::vector<int> kinds_host_;
  MegaStep* steps_ = nullptr;
  uint32_t* counters_ = nullptr;
  float* partial_ = nullptr;
  uint32_t* group_counters_ = nullptr;
  float* inv_freq_ = nullptr;
  uint64_t* trace_ = nullptr;
  std::vector<int> kinds_;
  mutable std::pair<int, int> last_run_{0, 0};

 public:
  std::string TraceReport() const override {
    if (!trace_ || last_run_.second <= last_run_.first) return {};
    const auto [begin, end] = last_run_;
    const int nb = blocks_;
    std::vector<uint64_t> t(size_t(num_steps_) * nb * 4);
    PG_CUDA_CHECK(cudaDeviceSynchronize());
    PG_CUDA_CHECK(cudaMemcpy(t.data(), trace_, t.size() * 8, cudaMemcpyDeviceToHost));
    auto at = [&](int s, int b, int k) { return double(t[(size_t(s) * nb + b) * 4 + k]); };
    auto mx = [&](int s, int k) { double v = 0; for (int b = 0; b < nb; ++b) v = std::max(v, at(s, b, k)); return v; };
    auto mn = [&](int s, int k) { double v = 1e300; for (int b = 0; b < nb; ++b) v = std::min(v, at(s, b, k)); return v; };
    const double t0 = mn(begin, 0);
    static const char* kNames[] = {"norm_proj", "accumulate", "norm_swiglu", "attention"};
    // Per kind, summed over the steps of the run (us): barrier = last block done with the
    // previous step -> last block past this step's wait; stage = past wait -> staged (max
    // over blocks); tiles = staged -> done (max); spread = first -> last block done;
    // lead = how far the producer reached the step before the consumers (median-free: min).
    double sum[4][5] = {};
    int cnt[4] = {};
    std::string out = fmt::format("mega trace: steps [{}, {}), {} blocks, total {:.1f} us\n",
                                  begin, end, nb, (mx(end - 1, 3) - t0) / 1e3);
    for (int s = begin; s < end; ++s) {
      const int k = kinds_[size_t(s)];
      const double prev_done = s > begin ? mx(s - 1, 3) : t0;
      const double v[5] = {mx(s, 1) - prev_done, mx(s, 2) - mx(s, 1), mx(s, 3) - mx(s, 2),
                           mx(s, 3) - mn(s, 3), mx(s, 1) - mn(s, 0)};
      for (int i = 0; i < 5; ++i) sum[k][i] += v[i] / 1e3;
      ++cnt[k];
      if (s < begin + 12)
        out += fmt::format("  step {:3d} {:<11} barrier {:6.2f} stage {:6.2f} work {:7.2f} "
                           "spread {:6.2f} producer lead {:7.2f} us\n", s, kNames[k],
                           v[0] / 1e3, v[1] / 1e3, v[2] / 1e3, v[3] / 1e3, v[4] / 1e3);
    }
    for (int k = 0; k < 4; ++k)
      if (cnt[k])
        out += fmt::format("  {:<11} x{:3d}: barrier {:8.1f} stage {:8.1f} work {:8.1f} spread "
                           "{:8.1f} lead {:8.1f} us (sums)\n", kNames[k], cnt[k], sum[k][0],
                           sum[k][1], sum[k][2], sum[k][3], sum[k][4]);
    return out;
  }

 private:
};

}  // namespace

std::unique_ptr<MegaPlan> MakeMegaPlan(std::span<const MegaStepParams> steps,
                                       std::string* why_not) {
  auto refuse = [&](std::string why) -> std::unique_ptr<MegaPlan> {
    if (why_not) *why_not = std::move(why);
    return nullptr;
  };
  if (cuda::DeviceCount() == 0) return refuse("no CUDA device");
  if (steps.empty()) return refuse("no steps");
  std::vector<MegaStep> desc(steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    std::string why = Describe(steps[i], desc[i]);
    if (!why.empty()) return refuse(fmt::format("step {}: {}", i, why));
  }
  int blocks = cuda::MegaMaxBlocks();
  if (blocks == 0) return refuse("the kernel does not fit one block per SM");
  // PEREGRINE_MEGA_BLOCKS caps the grid (an A/B knob: fewer blocks than SMs).
  static const int cap = EnvInt("PEREGRINE_MEGA_BLOCKS", 0);
  if (cap > 0 && cap < blocks) blocks = cap;
  return std::make_unique<CudaMegaPlan>(std::move(desc), steps, blocks);
}

}  // namespace pg::ops
