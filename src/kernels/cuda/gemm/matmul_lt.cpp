#include "kernels/cuda/gemm/matmul_lt.h"

#include <algorithm>
#include <fmt/format.h>

#include <map>
#include <string>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>

#include "kernels/cuda/common/context.h"
#include "kernels/cuda/common/cuda_check.h"

namespace pg::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;

int Alignment(const void* p) {  // largest power of two <= 256 dividing the address
  const uintptr_t u = reinterpret_cast<uintptr_t>(p);
  int a = 256;
  while (a > 1 && (u % uintptr_t(a)) != 0) a /= 2;
  return a;
}

using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, int, int, int,
                       int64_t, int64_t, int64_t, int64_t, bool>;

// One cached shape: descriptors and the chosen algorithm (usable = false: no algorithm).
struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool usable = false;
  ~Plan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

struct Cache {
  std::mutex mu;
  cublasLtHandle_t handle = nullptr;
  std::map<Key, std::unique_ptr<Plan>> plans;  // node-based: Plan addresses are stable
  // fp8: (n, k, m, ldx, ldw, ldo, accumulate, per_channel, alignments x, w, o)
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, int, int, int>,
           std::unique_ptr<Plan>>
      fp8_plans;
};

Cache& TheCache() {
  static Cache* cache = new Cache;  // leaked on purpose: lives until process exit
  return *cache;
}

int ChooseAlgo(cublasLtHandle_t h, Plan& plan, int align_x, int align_w, int align_o,
               bool alignment_prefs = true);

std::unique_ptr<Plan> MakePlan(cublasLtHandle_t h, const LtGemmArgs& g, int align_x, int align_w,
                               int align_o) {
  auto p = std::make_unique<Plan>();
  PG_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = g.w_km ? CUBLAS_OP_N : CUBLAS_OP_T, tb = CUBLAS_OP_N;
  PG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  PG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  if (g.w_km)
    PG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, uint64_t(g.m), uint64_t(g.k), g.ldw));
  else
    PG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, uint64_t(g.k), uint64_t(g.m), g.ldw));
  PG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, uint64_t(g.k), uint64_t(g.n), g.ldx));
  PG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->d, CUDA_R_16BF, uint64_t(g.m), uint64_t(g.n), g.ldo));
  if (g.batch > 1) {
    const int32_t count = int32_t(g.batch);
    const std::pair<cublasLtMatrixLayout_t, int64_t> layouts[] = {
        {p->a, g.stride_w}, {p->b, g.stride_x}, {p->d, g.stride_o}};
    for (const auto& [layout, stride] : layouts) {
      PG_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                       &count, sizeof count));
      PG_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
          layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
    }
  }
  ChooseAlgo(h, *p, align_x, align_w, align_o);
  return p;
}

// Asks the heuristic for the plan's algorithm (p.usable = false when there is none). Returns
// the heuristic's status, or -1 when it succeeded without an algorithm (diagnostics).
int ChooseAlgo(cublasLtHandle_t h, Plan& plan, int align_x, int align_w, int align_o,
               bool alignment_prefs) {
  Plan* p = &plan;
  cublasLtMatmulPreference_t pref = nullptr;
  PG_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = kWorkspaceBytes;
  const uint32_t ax = uint32_t(align_x), aw = uint32_t(align_w), ao = uint32_t(align_o);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  if (alignment_prefs) {
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aw, sizeof aw);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ax, sizeof ax);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ao, sizeof ao);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ao, sizeof ao);
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, p->op, p->a, p->b, p->d, p->d, pref,
                                                           1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
    p->algo = result.algo;
    p->usable = true;
  }
  return st != CUBLAS_STATUS_SUCCESS ? int(st) : (found > 0 ? 0 : -1);
}

std::string& Fp8Diagnostics() {  // guarded by the cache's mutex
  static std::string* d = new std::string;
  return *d;
}

// Tries, in order, until the heuristic offers an algorithm: as documented (scale pointers set,
// alignment preferences), without alignment preferences, with fast accumulation. Each
// attempt's heuristic status goes to Fp8Diagnostics().
std::unique_ptr<Plan> MakeFp8Plan(cublasLtHandle_t h, const LtFp8Args& g, int align_x,
                                  int align_w, int align_o) {
  std::unique_ptr<Plan> p;
  std::string tried;
  for (int variant = 0; variant < 3; ++variant) {
    p = std::make_unique<Plan>();
    PG_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    PG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    PG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (g.w_per_channel) {
      const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
      const cublasStatus_t st = cublasLtMatmulDescSetAttribute(
          p->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode);
      if (st != CUBLAS_STATUS_SUCCESS) {
        tried += fmt::format(" outer-vec scale mode: status {}", int(st));
        break;
      }
    }
    PG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                   &g.w_scale, sizeof g.w_scale));
    PG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                   &g.x_scale, sizeof g.x_scale));
    if (variant == 2) {
      const int8_t fast = 1;
      PG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast,
                                                     sizeof fast));
    }
    PG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_8F_E4M3, uint64_t(g.k), uint64_t(g.m), g.ldw));
    PG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_8F_E4M3, uint64_t(g.k), uint64_t(g.n), g.ldx));
    PG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->d, CUDA_R_16BF, uint64_t(g.m), uint64_t(g.n), g.ldo));
    const int st = ChooseAlgo(h, *p, align_x, align_w, align_o, /*alignment_prefs=*/variant == 0);
    tried += fmt::format(" v{}:{}", variant, st);
    if (p->usable) break;
  }
  Fp8Diagnostics() += fmt::format("fp8 n={} k={} m={} per_channel={}:{} -> {}\n", g.n, g.k, g.m,
                                  g.w_per_channel, tried, p->usable ? "algorithm" : "none");
  return p;
}

}  // namespace

bool LtMatmul(const LtGemmArgs& g, cudaStream_t stream) {
  if (g.n == 0 || g.m == 0) return true;
  // Batched: every batch's pointer must meet the alignment promised to cuBLASLt.
  auto align = [&](const void* p, int64_t stride) {
    const int a = Alignment(p);
    if (g.batch <= 1) return a;
    return std::min(a, Alignment(reinterpret_cast<const void*>(uintptr_t(stride * 2))));
  };
  const int ax = align(g.x, g.stride_x), aw = align(g.w, g.stride_w), ao = align(g.out, g.stride_o);
  Cache& c = TheCache();
  Plan* plan = nullptr;
  cublasLtHandle_t handle = nullptr;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (!c.handle) PG_CUBLAS_CHECK(cublasLtCreate(&c.handle));
    handle = c.handle;
    const Key key{g.n,       g.k,        g.m,        g.ldx,      g.ldw,   g.ldo,
                  g.accumulate, ax,     aw,         ao,         g.batch, g.stride_x,
                  g.stride_w,   g.stride_o, g.w_km};
    auto it = c.plans.find(key);
    if (it == c.plans.end()) it = c.plans.emplace(key, MakePlan(c.handle, g, ax, aw, ao)).first;
    plan = it->second.get();
  }
  if (!plan->usable) return false;
  void* ws = Scratch(ScratchSlot::kLtWorkspace, kWorkspaceBytes);
  const float alpha = 1.0f, beta = g.accumulate ? 1.0f : 0.0f;
  const cublasStatus_t st =
      cublasLtMatmul(handle, plan->op, &alpha, g.w, plan->a, g.x, plan->b, &beta, g.out, plan->d,
                     g.out, plan->d, &plan->algo, ws, kWorkspaceBytes, stream);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) {
    std::lock_guard<std::mutex> lock(c.mu);
    plan->usable = false;  // remember: fall back for this shape from now on
    return false;
  }
  PG_CUBLAS_CHECK(st);
  return true;
}

namespace {
// The cached fp8 plan of g's shape (made on first use). Caller holds c.mu.
Plan* Fp8PlanLocked(Cache& c, const LtFp8Args& g) {
  const int ax = Alignment(g.x), aw = Alignment(g.w), ao = Alignment(g.out);
  if (!c.handle) PG_CUBLAS_CHECK(cublasLtCreate(&c.handle));
  const auto key = std::make_tuple(g.n, g.k, g.m, g.ldx, g.ldw, g.ldo, g.accumulate,
                                   g.w_per_channel, ax, aw, ao);
  auto it = c.fp8_plans.find(key);
  if (it == c.fp8_plans.end())
    it = c.fp8_plans.emplace(key, MakeFp8Plan(c.handle, g, ax, aw, ao)).first;
  return it->second.get();
}
}  // namespace

bool LtFp8Available(const LtFp8Args& g) {
  Cache& c = TheCache();
  std::lock_guard<std::mutex> lock(c.mu);
  return Fp8PlanLocked(c, g)->usable;
}

bool LtMatmulFp8(const LtFp8Args& g, cudaStream_t stream) {
  if (g.n == 0 || g.m == 0) return true;
  Cache& c = TheCache();
  std::lock_guard<std::mutex> lock(c.mu);  // the plan's scale pointers are set per launch
  Plan* plan = Fp8PlanLocked(c, g);
  if (!plan->usable) return false;
  PG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                 &g.w_scale, sizeof g.w_scale));
  PG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                 &g.x_scale, sizeof g.x_scale));
  void* ws = Scratch(ScratchSlot::kLtWorkspace, kWorkspaceBytes);
  const float alpha = 1.0f, beta = g.accumulate ? 1.0f : 0.0f;
  const cublasStatus_t st =
      cublasLtMatmul(c.handle, plan->op, &alpha, g.w, plan->a, g.x, plan->b, &beta, g.out,
                     plan->d, g.out, plan->d, &plan->algo, ws, kWorkspaceBytes, stream);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) {
    plan->usable = false;
    Fp8Diagnostics() += fmt::format(
        "fp8 n={} k={} m={}: launch refused (status {}); scale pointer alignments x {} w {}\n",
        g.n, g.k, g.m, int(st), Alignment(g.x_scale), Alignment(g.w_scale));
    return false;
  }
  PG_CUBLAS_CHECK(st);
  return true;
}

std::string LtFp8Diagnostics() {
  Cache& c = TheCache();
  std::lock_guard<std::mutex> lock(c.mu);
  return Fp8Diagnostics();
}

size_t LtCachedShapes() {
  Cache& c = TheCache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.plans.size();
}

}  // namespace pg::cuda
