// CUDA launchers and registry entries of the MoE ops (ops_moe.h MoeRouter, MoeExperts) and of
// the fp8 128x128 block-scaled dense Matmul (DeepSeek-V3's q_a/q_b/kv_a/o and shared experts).
//
// MoeExperts picks a path per call, from host-known sizes only (graph-capturable):
//   route-walking (moe_walk.cu) for small batches: every route streams its expert's rows;
//   expert-sorted (moe_permute.cu + grouped_gemm.cu) otherwise: routes sorted by expert on the
//   device, one fused gate/up grouped GEMM (+ SiLU), one down grouped GEMM, a weighted
//   un-permute; the GEMM grids are bounded on the host and surplus tiles exit.
// Device tables of expert pointers are built once per weight set (keyed by all the expert
// pointers) and cached; building one is refused while the stream captures a graph.
#include <cstring>
#include <optional>
#include <unordered_map>
#include <vector>

#include "core/env.h"
#include "core/status.h"
#include "kernels/cuda/common/context.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/moe/moe_params.h"
#include "kernels/cuda/moe/moe_tuning.h"
#include "kernels/registry.h"

namespace pg::cuda {
namespace {
// The process's initial tuning: defaults, with PEREGRINE_MOE_DOWN_ROWS (walk_down_rows: the
// walking down kernel's form), PEREGRINE_MOE_DOWN_PRELOAD (walk_down_preload),
// PEREGRINE_MOE_GU_ROUTES (walk_self_route), PEREGRINE_MOE_L2_AFTER_PCT (walk_l2_after_pct),
// PEREGRINE_MOE_ROUTER_L2_PCT (walk_router_l2_pct),
// PEREGRINE_MOE_FP8_WALK_MAX (walk_max_tokens_fp8), PEREGRINE_MOE_DOWN_WARPS / _GU_UNROLL /
// _WALK_WARPS / _GU_FLAT / _GU_FLAT_SM (walk_down_warps, walk_gu_unroll, walk_warps,
// walk_gu_flat, walk_gu_flat_per_sm), for A/B runs of whole models, read
// once. Diagnostics (wrong results, timings by difference in a whole step):
// PEREGRINE_MOE_WALK_PHASES (walk_phases), PEREGRINE_MOE_SKIP_ROUTE (walk_skip_route).
MoeTuning InitialTuning() {
  MoeTuning t;
  t.walk_down_rows = EnvInt("PEREGRINE_MOE_DOWN_ROWS", t.walk_down_rows);
  t.walk_down_preload = EnvFlag("PEREGRINE_MOE_DOWN_PRELOAD", t.walk_down_preload);
  t.walk_self_route = EnvFlag("PEREGRINE_MOE_GU_ROUTES", t.walk_self_route);
  t.walk_max_tokens_fp8 = EnvInt("PEREGRINE_MOE_FP8_WALK_MAX", t.walk_max_tokens_fp8);
  t.walk_down_warps = EnvInt("PEREGRINE_MOE_DOWN_WARPS", t.walk_down_warps);
  t.walk_gu_unroll = EnvInt("PEREGRINE_MOE_GU_UNROLL", t.walk_gu_unroll);
  t.walk_gu_flat = EnvInt("PEREGRINE_MOE_GU_FLAT", t.walk_gu_flat);
  t.walk_gu_flat_per_sm = EnvInt("PEREGRINE_MOE_GU_FLAT_SM", t.walk_gu_flat_per_sm);
  t.walk_warps = EnvInt("PEREGRINE_MOE_WALK_WARPS", t.walk_warps);
  t.walk_phases = EnvInt("PEREGRINE_MOE_WALK_PHASES", t.walk_phases);
  t.walk_skip_route = EnvInt("PEREGRINE_MOE_SKIP_ROUTE", t.walk_skip_route);
  t.walk_l2_after_pct = EnvInt("PEREGRINE_MOE_L2_AFTER_PCT", t.walk_l2_after_pct);
  t.walk_router_l2_pct = EnvInt("PEREGRINE_MOE_ROUTER_L2_PCT", t.walk_router_l2_pct);
  return t;
}
MoeTuning g_tuning = InitialTuning();
}  // namespace
void SetMoeTuning(const MoeTuning& t) { g_tuning = t; }
const MoeTuning& GetMoeTuning() { return g_tuning; }
}  // namespace pg::cuda

namespace pg::ops {
namespace {

using cuda::bf16;

bool On(const TensorView& t, DType d) { return t.device == Device::kCuda && t.dtype == d; }
bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

cuda::ScaleMode ScaleModeOf(const TensorView& s) {
  if (!s.data) return cuda::ScaleMode::kNone;
  if (s.ndim == 2) return cuda::ScaleMode::kBlock;
  return s.dim(0) == 1 ? cuda::ScaleMode::kTensor : cuda::ScaleMode::kChannel;
}

// ---- router ----------------------------------------------------------------------------------
bool RouterSupports(const MoeRouterParams& p) {
  const bool logits_ok = On(p.logits, DType::kBF16) || On(p.logits, DType::kF32);
  const bool norm_ok = !p.norm_weight.data ||
                       (On(p.norm_weight, DType::kF32) && On(p.normed, DType::kBF16) &&
                        p.normed.strides[1] == 1 &&
                        (!p.residual.data || (On(p.residual, DType::kBF16) && p.residual.strides[1] == 1)));
  const bool fused_ok = !p.x.data || (On(p.x, DType::kBF16) && On(p.router, DType::kBF16) &&
                                      On(p.logits, DType::kF32) && p.x.strides[1] == 1 && norm_ok);
  return logits_ok && fused_ok && On(p.topk_ids, DType::kI32) && On(p.topk_weights, DType::kF32) &&
         (!p.bias.data || p.bias.device == Device::kCuda) &&
         p.logits.dim(1) <= cuda::kRouterMaxExperts && p.topk_ids.dim(1) <= cuda::kRouterMaxTopK &&
         p.num_groups <= cuda::kRouterMaxGroups;
}

// The fused router's arrival counter of the current device (zeroed once; every launch leaves
// it at 0). One per thread and device: launches using it are ordered on the thread's stream.
unsigned* RouterCounter(cudaStream_t stream) {
  int dev = 0;
  PG_CUDA_CHECK(cudaGetDevice(&dev));
  thread_local std::unordered_map<int, unsigned*> counters;
  auto it = counters.find(dev);
  if (it != counters.end()) return it->second;
  PG_ENSURE(!cuda::IsCapturing(stream), kInternal,
            "MoeRouter (fused): first use under graph capture: run it once before capturing");
  unsigned* c = nullptr;
  PG_CUDA_CHECK(cudaMalloc(&c, sizeof(unsigned)));
  PG_CUDA_CHECK(cudaMemset(c, 0, sizeof(unsigned)));
  counters.emplace(dev, c);
  return c;
}

// The kernel arguments of p. defer_route: the fused form stops after the logits (and normed
// rows); the walking gate/up kernel routes (no arrival counter is needed then).
cuda::MoeRouterArgs RouterArgsOf(const MoeRouterParams& p, cudaStream_t stream, bool defer_route) {
  cuda::MoeRouterArgs a{};
  a.logits = p.logits.data;
  a.logits_bf16 = p.logits.dtype == DType::kBF16;
  a.bias = p.bias.data ? p.bias.as<float>() : nullptr;
  a.topk_ids = p.topk_ids.as<int32_t>();
  a.topk_weights = p.topk_weights.as<float>();
  a.logits_stride = p.logits.strides[0];
  a.weights_stride = p.topk_weights.strides[0];
  a.num_tokens = p.logits.dim(0);
  a.num_experts = int(p.logits.dim(1));
  a.top_k = int(p.topk_ids.dim(1));
  a.num_groups = p.num_groups;
  a.topk_groups = p.topk_groups;
  a.sigmoid = p.scoring == MoeScoring::kSigmoid;
  a.renormalize = p.renormalize;
  a.scaling = p.scaling;
  if (p.x.data) {
    a.x = static_cast<const bf16*>(p.x.data);
    a.router_w = static_cast<const bf16*>(p.router.data);
    a.ldx = p.x.strides[0];
    a.ld_router = p.router.strides[0];
    a.hidden = int(p.x.dim(1));
    a.counter = defer_route ? nullptr : RouterCounter(stream);
    a.defer_route = defer_route;
    if (p.norm_weight.data) {
      a.norm_w = p.norm_weight.as<float>();
      a.normed = static_cast<bf16*>(p.normed.data);
      a.ld_normed = p.normed.strides[0];
      a.residual = p.residual.data ? static_cast<bf16*>(p.residual.data) : nullptr;
      a.ld_res = p.residual.data ? p.residual.strides[0] : 0;
      a.eps = p.norm_eps;
    }
  }
  return a;
}

void RunRouter(const MoeRouterParams& p) {
  cudaStream_t stream = cuda::CurrentStream();
  cuda::LaunchMoeRouter(RouterArgsOf(p, stream, /*defer_route=*/false), stream);
  PG_CUDA_CHECK_LAUNCH();
}

// ---- experts -----------------------------------------------------------------------------------
// The layout shared by every expert, or nullopt when the experts differ in dtype, strides or
// scale kind, or are not bf16 / fp8 e4m3 matrices on the device.
std::optional<cuda::MoeWeightLayout> LayoutOf(std::span<const MoeExpertWeights> ex) {
  if (ex.empty()) return std::nullopt;
  const MoeExpertWeights& w0 = ex[0];
  const DType dt = w0.gate.dtype;
  if (dt != DType::kBF16 && dt != DType::kF8E4M3) return std::nullopt;
  cuda::MoeWeightLayout L{};
  L.fp8 = dt == DType::kF8E4M3;
  L.scale_mode = ScaleModeOf(w0.gate_scale);
  if (L.fp8 == (L.scale_mode == cuda::ScaleMode::kNone)) return std::nullopt;
  L.ld_gate = w0.gate.strides[0];
  L.ld_up = w0.up.strides[0];
  L.ld_down = w0.down.strides[0];
  L.scale_ld_gu = L.scale_mode == cuda::ScaleMode::kBlock ? int(w0.gate_scale.dim(1)) : 0;
  L.scale_ld_down = L.scale_mode == cuda::ScaleMode::kBlock ? int(w0.down_scale.dim(1)) : 0;
  L.aligned16 = true;
  for (const MoeExpertWeights& w : ex) {
    for (const TensorView* m : {&w.gate, &w.up, &w.down})
      if (!On(*m, dt)) return std::nullopt;
    if (w.gate.strides[0] != L.ld_gate || w.up.strides[0] != L.ld_up ||
        w.down.strides[0] != L.ld_down)
      return std::nullopt;
    for (const TensorView* s : {&w.gate_scale, &w.up_scale, &w.down_scale}) {
      if (ScaleModeOf(*s) != L.scale_mode) return std::nullopt;
      if (s->data && s->device != Device::kCuda) return std::nullopt;
    }
    L.aligned16 = L.aligned16 && Aligned16(w.gate.data) && Aligned16(w.up.data) &&
                  Aligned16(w.down.data);
  }
  return L;
}

// The device table of expert pointers for this weight set (cached per thread).
const cuda::MoeExpertPtrs* ExpertTable(std::span<const MoeExpertWeights> ex, cudaStream_t stream) {
  std::vector<cuda::MoeExpertPtrs> host(ex.size());
  for (size_t e = 0; e < ex.size(); ++e) {
    const MoeExpertWeights& w = ex[e];
    auto sp = [](const TensorView& s) { return s.data ? s.as<float>() : nullptr; };
    host[e] = {w.gate.data, w.up.data, w.down.data, sp(w.gate_scale), sp(w.up_scale),
               sp(w.down_scale)};
  }
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the pointers
  const auto* bytes = reinterpret_cast<const unsigned char*>(host.data());
  for (size_t i = 0; i < host.size() * sizeof(cuda::MoeExpertPtrs); ++i)
    h = (h ^ bytes[i]) * 1099511628211ull;
  struct Table {
    std::vector<cuda::MoeExpertPtrs> host;
    cuda::MoeExpertPtrs* device = nullptr;
  };
  thread_local std::unordered_map<uint64_t, Table> cache;
  auto it = cache.find(h);
  if (it != cache.end() && it->second.host.size() == host.size() &&
      std::memcmp(it->second.host.data(), host.data(), host.size() * sizeof(host[0])) == 0)
    return it->second.device;
  PG_ENSURE(!cuda::IsCapturing(stream), kInternal,
            "MoeExperts: a new expert weight set under graph capture: run it once before capturing");
  Table t;
  t.host = host;
  PG_CUDA_CHECK(cudaMalloc(&t.device, host.size() * sizeof(host[0])));
  PG_CUDA_CHECK(cudaMemcpy(t.device, host.data(), host.size() * sizeof(host[0]),
                           cudaMemcpyHostToDevice));
  if (it != cache.end()) {  // hash collision with another set: replace it (the old one leaks)
    it->second = std::move(t);
    return it->second.device;
  }
  return cache.emplace(h, std::move(t)).first->second.device;
}

// The shared expert as walk slots (moe_params.h MoeWalkArgs), or nullopt when it cannot run
// there: another dtype / scale kind than the routed experts, unaligned, more than 32 slots per
// token, or block scales that a slot's column range would split.
struct SharedSlots {
  cuda::MoeExpertPtrs ptrs{};
  int num = 0;
  int64_t ld_gate = 0, ld_up = 0, ld_down = 0;
  int scale_ld_gu = 0, scale_ld_down = 0;
};
std::optional<SharedSlots> SharedOf(const MoeExpertsParams& p, const cuda::MoeWeightLayout& L) {
  const MoeExpertWeights& w = p.shared;
  SharedSlots s;
  if (!w.gate.data) return s;
  const DType dt = L.fp8 ? DType::kF8E4M3 : DType::kBF16;
  const int64_t inter = p.experts[0].gate.dim(0), si = w.gate.dim(0);
  for (const TensorView* m : {&w.gate, &w.up, &w.down})
    if (!On(*m, dt) || !Aligned16(m->data)) return std::nullopt;
  for (const TensorView* sc : {&w.gate_scale, &w.up_scale, &w.down_scale})
    if (ScaleModeOf(*sc) != L.scale_mode || (sc->data && sc->device != Device::kCuda))
      return std::nullopt;
  if (si % inter != 0) return std::nullopt;
  s.num = int(si / inter);
  if (p.topk_ids.dim(1) + s.num > 32) return std::nullopt;
  if (L.scale_mode == cuda::ScaleMode::kBlock && s.num > 1 && inter % 128 != 0) return std::nullopt;
  auto sp = [](const TensorView& t) { return t.data ? t.as<float>() : nullptr; };
  s.ptrs = {w.gate.data, w.up.data, w.down.data, sp(w.gate_scale), sp(w.up_scale), sp(w.down_scale)};
  s.ld_gate = w.gate.strides[0];
  s.ld_up = w.up.strides[0];
  s.ld_down = w.down.strides[0];
  if (L.scale_mode == cuda::ScaleMode::kBlock) {
    s.scale_ld_gu = int(w.gate_scale.dim(1));
    s.scale_ld_down = int(w.down_scale.dim(1));
  }
  return s;
}

bool ExpertsSupport(const MoeExpertsParams& p) {
  if (!(On(p.x, DType::kBF16) && On(p.out, DType::kBF16) && On(p.topk_ids, DType::kI32) &&
        On(p.topk_weights, DType::kF32) && p.topk_weights.strides[1] == 1 &&
        p.topk_ids.dim(1) <= 32 && p.experts.size() <= 1024))
    return false;
  if (p.route && !RouterSupports(*p.route)) return false;
  const std::optional<cuda::MoeWeightLayout> L = LayoutOf(p.experts);
  return L.has_value() && SharedOf(p, *L).has_value();
}

// Whether the walking gate/up kernel can route for itself (MoeExpertsParams::route): register
// routing's expert count, no residual in a fused norm (moe_params.h defer_route), the knob.
bool SelfRouteOk(const MoeExpertsParams& p) {
  const MoeRouterParams& r = *p.route;
  return cuda::GetMoeTuning().walk_self_route && r.logits.dim(1) <= cuda::kRouteRegMaxExperts &&
         !r.residual.data;
}

// Bump allocator over one scratch slot (first pass with base == nullptr measures).
struct Carve {
  char* base = nullptr;
  size_t off = 0;
  template <typename T>
  T* Take(size_t n) {
    off = (off + 255) / 256 * 256;
    T* p = reinterpret_cast<T*>(base + off);
    off += n * sizeof(T);
    return p;
  }
};

int AutoTileRows(int64_t routes, int64_t experts) {
  const int64_t touched = std::max<int64_t>(1, std::min(routes, experts));
  const int64_t rows = (routes + touched - 1) / touched;  // routes per touched expert
  return rows <= 16 ? 16 : rows <= 32 ? 32 : rows <= 64 ? 64 : 128;
}

// Route-walking launch of `slots_k` routed slots per token (0: only the shared ones) plus the
// shared slots of `sh`; act: scratch [n * (slots_k + sh.num), inter] f32.
// route: self-routing (MoeWalkArgs::self_route) from these router arguments, or null.
void LaunchWalk(const MoeExpertsParams& p, const cuda::MoeWeightLayout& L,
                const cuda::MoeExpertPtrs* table, const SharedSlots& sh, int slots_k, float* act,
                bool accumulate, cudaStream_t stream, const cuda::MoeRouterArgs* route = nullptr) {
  const cuda::MoeTuning& tune = cuda::GetMoeTuning();
  const int64_t n = p.x.dim(0), h = p.x.dim(1), inter = p.experts[0].gate.dim(0);
  cuda::MoeWalkArgs a{};
  a.x = static_cast<const bf16*>(p.x.data);
  a.ids = p.topk_ids.as<int32_t>();
  a.weights = p.topk_weights.as<float>();
  a.experts = table;
  a.layout = L;
  a.shared = sh.ptrs;
  a.num_shared = sh.num;
  a.shared_ld_gate = sh.ld_gate;
  a.shared_ld_up = sh.ld_up;
  a.shared_ld_down = sh.ld_down;
  a.shared_scale_ld_gu = sh.scale_ld_gu;
  a.shared_scale_ld_down = sh.scale_ld_down;
  a.act = act;
  a.out = static_cast<bf16*>(p.out.data);
  a.ldx = p.x.strides[0];
  a.ldo = p.out.strides[0];
  a.ldw_route = p.topk_weights.strides[0];
  a.num_tokens = n;
  a.top_k = slots_k;
  a.num_experts = int(p.experts.size());
  a.hidden = int(h);
  a.inter = int(inter);
  a.accumulate = accumulate;
  a.gu_unroll = tune.walk_gu_unroll;  // 0: auto (moe_walk.cu GateUpUnroll)
  a.down_unroll = tune.walk_down_unroll ? tune.walk_down_unroll : (n * h <= 2048 ? 8 : 4);
  a.warps = tune.walk_warps ? tune.walk_warps : (!L.fp8 && n == 1 ? 8 : 4);
  a.gu_flat = tune.walk_gu_flat;
  a.gu_flat_per_sm = tune.walk_gu_flat_per_sm;
  a.phases = tune.walk_phases;
  a.down_rows = tune.walk_down_rows ? tune.walk_down_rows : (L.fp8 ? 8 : 4);
  a.down_warps = tune.walk_down_warps;
  // Preloading with self-routing makes every down block route too: one wave of blocks at one
  // token, several above (measured slower at 4 tokens on the H200).
  a.down_preload = tune.walk_down_preload && tune.walk_phases == 3 && (route == nullptr || n == 1);
  if (route) {
    a.self_route = true;
    a.route = *route;
  }
  // The hint at one token (the tiled down kernel's blocks ask for their shares).
  if (n == 1 && p.l2_after.data != nullptr)
    a.l2_after = cuda::MakeL2After(p.l2_after.data, p.l2_after.nbytes(), tune.walk_l2_after_pct);
  // Down rows the routed slots may touch (an upper bound: distinct experts are not known here).
  const int64_t esz = L.fp8 ? 1 : 2;
  const double down_bytes = double(n) * double(slots_k) * double(h) * double(L.ld_down) * double(esz) +
                            double(h) * double(sh.ld_down) * double(esz);
  a.prefetch_down = tune.walk_prefetch_bytes > 0 && down_bytes <= double(tune.walk_prefetch_bytes);
  cuda::LaunchMoeWalk(a, stream);
  PG_CUDA_CHECK_LAUNCH();
}

// The walk's gate/up activations: scratch [n * (k + shared slots), inter] f32.
float* MoeAct(int64_t n, int64_t k, int64_t shared_slots, int64_t inter) {
  return static_cast<float*>(cuda::Scratch(cuda::ScratchSlot::kMoe,
                                           size_t(n * (k + shared_slots) * inter) * sizeof(float)));
}

void RunExperts(const MoeExpertsParams& p) {
  cudaStream_t stream = cuda::CurrentStream();
  const cuda::MoeWeightLayout L = *LayoutOf(p.experts);
  const SharedSlots sh = *SharedOf(p, L);
  const int64_t n = p.x.dim(0), h = p.x.dim(1), k = p.topk_ids.dim(1);
  const int64_t inter = p.experts[0].gate.dim(0), E = int64_t(p.experts.size());
  const int64_t routes = n * k;
  if (n == 0) return;
  const cuda::MoeExpertPtrs* table = ExpertTable(p.experts, stream);
  const cuda::MoeTuning& tune = cuda::GetMoeTuning();
  const int64_t vec = L.fp8 ? 16 : 8;  // elements per 16 bytes
  const bool sorted_ok = h % 64 == 0 && inter % 64 == 0 && L.aligned16 && p.x.strides[0] % 8 == 0 &&
                         Aligned16(p.x.data) && L.ld_gate % vec == 0 && L.ld_up % vec == 0 &&
                         L.ld_down % vec == 0;
  const bool sorted = sorted_ok && (tune.path == cuda::MoePath::kSorted ||
                                    (tune.path == cuda::MoePath::kAuto &&
                                     n > (L.fp8 ? tune.walk_max_tokens_fp8 : tune.walk_max_tokens)));
  // The hint for the deferred-routing NormLogits kernel (MoeRouterArgs::l2_after; one token).
  auto router_hint = [&](cuda::MoeRouterArgs& ra) {
    if (n == 1 && p.l2_after.data != nullptr)
      ra.l2_after = cuda::MakeL2After(p.l2_after.data, p.l2_after.nbytes(), tune.walk_router_l2_pct);
  };
  if (p.route) {
    if (!sorted && SelfRouteOk(p)) {
      // The router kernel (fused form) computes only the logits and normed rows; the gate/up
      // kernel routes.
      cuda::MoeRouterArgs ra = RouterArgsOf(*p.route, stream, /*defer_route=*/true);
      router_hint(ra);
      if (ra.x) {
        cuda::LaunchMoeRouter(ra, stream);
        PG_CUDA_CHECK_LAUNCH();
      }
      LaunchWalk(p, L, table, sh, int(k), MoeAct(n, k, sh.num, inter), p.accumulate, stream, &ra);
      return;
    }
    if (!sorted && p.route->x.data && !p.route->residual.data) {
      // The fused router kernel stops after the logits and normed rows (no counter); the
      // router kernel routes from the logits; the walk reads the routes.
      cuda::MoeRouterArgs ra = RouterArgsOf(*p.route, stream, /*defer_route=*/true);
      router_hint(ra);
      if (!(tune.walk_skip_route & 2)) {  // diagnostics only
        cuda::LaunchMoeRouter(ra, stream);
        PG_CUDA_CHECK_LAUNCH();
      }
      ra.x = nullptr;  // (the logits-form router kernel reads no hint)
      ra.defer_route = false;
      if (!(tune.walk_skip_route & 1)) {  // diagnostics only
        cuda::LaunchMoeRouter(ra, stream);
        PG_CUDA_CHECK_LAUNCH();
      }
    } else {
      RunRouter(*p.route);
    }
  }
  if (!sorted) {
    LaunchWalk(p, L, table, sh, int(k), MoeAct(n, k, sh.num, inter), p.accumulate, stream);
    return;
  }
  const int bm = tune.tile_rows ? tune.tile_rows : AutoTileRows(routes, E);
  const int64_t max_tiles = (routes + bm - 1) / bm + std::min(E, routes);
  Carve c;
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) {
      c.base = static_cast<char*>(cuda::Scratch(cuda::ScratchSlot::kMoe, c.off));
      c.off = 0;
    }
    int32_t* offsets = c.Take<int32_t>(size_t(E + 1));
    int32_t* sorted_route = c.Take<int32_t>(size_t(routes));
    int32_t* route_pos = c.Take<int32_t>(size_t(routes));
    int32_t* tiles = c.Take<int32_t>(size_t(3 * max_tiles));
    int32_t* num_tiles = c.Take<int32_t>(1);
    bf16* act = c.Take<bf16>(size_t(routes * inter));
    float* y = c.Take<float>(size_t(routes * h));
    float* shared_act = c.Take<float>(size_t(n * sh.num * inter));
    if (pass == 0) continue;

    // The shared expert (if any) by the walking kernels, then the routed sum onto it.
    if (sh.num > 0) LaunchWalk(p, L, table, sh, 0, shared_act, p.accumulate, stream);
    const bool accumulate = p.accumulate || sh.num > 0;

    cuda::MoePermuteArgs pa{p.topk_ids.as<int32_t>(), offsets, sorted_route, route_pos, tiles,
                            num_tiles, routes, int(E), bm, int(max_tiles)};
    cuda::LaunchMoePermute(pa, stream);
    PG_CUDA_CHECK_LAUNCH();

    cuda::GroupedGemmArgs g{};
    g.experts = table;
    g.layout = L;
    g.tiles = tiles;
    g.num_tiles = num_tiles;
    g.max_tiles = int(max_tiles);
    g.tile_rows = bm;
    // gate/up: act[p] = silu(x[token(p)] gate^T) * (x[token(p)] up^T)
    g.a = static_cast<const bf16*>(p.x.data);
    g.lda = p.x.strides[0];
    g.a_rows = sorted_route;
    g.a_row_div = int(k);
    g.which = 0;
    g.ld_b = L.ld_gate;
    g.ld_b1 = L.ld_up;
    g.scale_ld = L.scale_ld_gu;
    g.out = act;
    g.out_f32 = false;
    g.ldo = inter;
    g.K = int(h);
    g.N = int(inter);
    g.mode = cuda::GemmMode::kGateUp;
    cuda::LaunchGroupedGemm(g, stream);
    PG_CUDA_CHECK_LAUNCH();
    // down: y[p] = act[p] down^T
    g.a = act;
    g.lda = inter;
    g.a_rows = nullptr;
    g.a_row_div = 1;
    g.which = 2;
    g.ld_b = L.ld_down;
    g.ld_b1 = 0;
    g.scale_ld = L.scale_ld_down;
    g.out = y;
    g.out_f32 = true;
    g.ldo = h;
    g.K = int(inter);
    g.N = int(h);
    g.mode = cuda::GemmMode::kPlain;
    cuda::LaunchGroupedGemm(g, stream);
    PG_CUDA_CHECK_LAUNCH();

    cuda::MoeCombineArgs ca{y, route_pos, p.topk_weights.as<float>(), static_cast<bf16*>(p.out.data),
                            p.out.strides[0], p.topk_weights.strides[0], n, int(k), int(h),
                            accumulate};
    cuda::LaunchMoeCombine(ca, stream);
    PG_CUDA_CHECK_LAUNCH();
  }
}

// ---- fp8 block-scaled dense Matmul -----------------------------------------------------------
// Batches of at most this many rows use the fp8 GEMV (memory bound); larger ones the grouped
// GEMM kernel in dense mode (when the shapes allow: k, m multiples of 64, aligned rows).
constexpr int64_t kFp8GemvMaxRows = 16;

bool Fp8MatmulSupports(const MatmulParams& p) {
  return On(p.x, DType::kBF16) && On(p.out, DType::kBF16) && On(p.w, DType::kF8E4M3) &&
         On(p.w_scale, DType::kF32) && p.w_scale.ndim == 2 &&
         (!p.bias.data || p.bias.device == Device::kCuda);
}

void RunFp8Matmul(const MatmulParams& p) {
  cudaStream_t stream = cuda::CurrentStream();
  const int64_t n = p.x.dim(0), k = p.x.dim(1), m = p.w.dim(0);
  const float* bias = p.bias.data ? p.bias.as<float>() : nullptr;
  const bool gemm_ok = k % 64 == 0 && m % 64 == 0 && p.w.strides[0] % 16 == 0 &&
                       p.x.strides[0] % 8 == 0 && p.out.strides[0] % 2 == 0 &&
                       Aligned16(p.x.data) && Aligned16(p.w.data);
  if (n <= kFp8GemvMaxRows || !gemm_ok) {
    cuda::Fp8GemvArgs a{};
    a.x = static_cast<const bf16*>(p.x.data);
    a.w = static_cast<const uint8_t*>(p.w.data);
    a.scale = p.w_scale.as<float>();
    a.scale_mode = cuda::ScaleMode::kBlock;
    a.scale_ld = int(p.w_scale.dim(1));
    a.out = static_cast<bf16*>(p.out.data);
    a.bias = bias;
    a.n = n, a.k = k, a.m = m;
    a.ldx = p.x.strides[0], a.ldw = p.w.strides[0], a.ldo = p.out.strides[0];
    a.accumulate = p.accumulate;
    cuda::LaunchFp8Gemv(a, stream);
    PG_CUDA_CHECK_LAUNCH();
    return;
  }
  cuda::GroupedGemmArgs g{};
  g.a = static_cast<const bf16*>(p.x.data);
  g.lda = p.x.strides[0];
  g.a_row_div = 1;
  g.dense_b0 = p.w.data;
  g.dense_s0 = p.w_scale.as<float>();
  g.layout.fp8 = true;
  g.layout.scale_mode = cuda::ScaleMode::kBlock;
  g.layout.aligned16 = true;
  g.ld_b = p.w.strides[0];
  g.scale_ld = int(p.w_scale.dim(1));
  g.dense_rows = n;
  g.out = p.out.data;
  g.out_f32 = false;
  g.ldo = p.out.strides[0];
  g.bias = bias;
  g.accumulate = p.accumulate;
  g.K = int(k);
  g.N = int(m);
  g.mode = cuda::GemmMode::kPlain;
  g.tile_rows = n >= 512 ? 128 : n >= 64 ? 64 : 32;
  cuda::LaunchGroupedGemm(g, stream);
  PG_CUDA_CHECK_LAUNCH();
}

}  // namespace

void RegisterCudaMoeKernels(Registry& r) {
  if (cuda::DeviceCount() == 0) return;  // as RegisterCudaKernels: nothing to run them on
  r.Register(KernelImpl<MoeRouterParams>{"cuda", Device::kCuda, kPriorityCuda, &RouterSupports,
                                         &RunRouter});
  r.Register(KernelImpl<MoeExpertsParams>{"cuda", Device::kCuda, kPriorityCuda, &ExpertsSupport,
                                          &RunExperts});
  r.Register(KernelImpl<MatmulParams>{"cuda_fp8_block", Device::kCuda, kPriorityCuda,
                                      &Fp8MatmulSupports, &RunFp8Matmul});
}

}  // namespace pg::ops
