// The kernel registry: one table per op (keyed by the op's params type). Each entry is an
// implementation registered with (backend name, device, priority, capability predicate).
//
// Dispatch (Registry::Run) validates the params (pg::Error kInvalidArgument with the shapes
// in the message), then runs the highest-priority implementation whose device matches the
// tensors' device and whose predicate accepts the params. Ties keep registration order.
//
// Registry::Global() holds the built-in kernels (ref/, cpu/, and cuda/ when compiled in); it
// is filled once, on first use, and read-only afterwards. Tests may build their own Registry
// to check dispatch, enumerate Global()'s entries, and force one entry with RunWith.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "core/status.h"
#include "kernels/ops.h"
#include "kernels/ops_fused.h"
#include "kernels/ops_fused_attention.h"
#include "kernels/ops_moe.h"
#include "kernels/ops_sample.h"

namespace pg::ops {

// Priorities of the built-in backends: higher wins among capable implementations.
inline constexpr int kPriorityRef = 0;        // reference: always capable on CPU, slow
inline constexpr int kPriorityCpuGeneric = 10;
inline constexpr int kPriorityCpuAvx2 = 20;
inline constexpr int kPriorityCpuAvx512 = 30;
inline constexpr int kPriorityCuda = 100;

// Process-wide cap on kernel priority, for tests and debugging: SetMaxKernelPriority(
// kPriorityRef) makes every op run its reference kernel. Default: no cap. Set it before
// running ops, not while other threads run them.
void SetMaxKernelPriority(int max_priority);
int MaxKernelPriority();

template <typename P>
struct KernelImpl {
  std::string backend;                      // "ref", "cpu_avx2", "cpu_vnni", "cuda", ...
  Device device = Device::kCpu;
  int priority = 0;
  std::function<bool(const P&)> supports;   // capability predicate; empty = always capable
  std::function<void(const P&)> run;        // called only with validated params
};

template <typename P>
class OpTable {
 public:
  void Register(KernelImpl<P> impl) { impls_.push_back(std::move(impl)); }
  const std::vector<KernelImpl<P>>& all() const { return impls_; }

  // Highest-priority capable implementation for `device`, or nullptr.
  const KernelImpl<P>* Select(const P& p, Device device) const {
    const KernelImpl<P>* best = nullptr;
    for (const auto& k : impls_) {
      if (k.device != device) continue;
      if (k.priority > MaxKernelPriority()) continue;
      if (best && k.priority <= best->priority) continue;
      if (k.supports && !k.supports(p)) continue;
      best = &k;
    }
    return best;
  }
  const KernelImpl<P>* Find(std::string_view backend) const {
    for (const auto& k : impls_)
      if (k.backend == backend) return &k;
    return nullptr;
  }

 private:
  std::vector<KernelImpl<P>> impls_;
};

// ---- validation (shared by every dispatch path) ----------------------------------------
// Each throws pg::Error(kInvalidArgument) naming the op and the offending shapes.
void Validate(const EmbeddingParams& p);
void Validate(const RmsNormParams& p);
void Validate(const RopeParams& p);
void Validate(const MatmulParams& p);
void Validate(const SwiGluParams& p);
void Validate(const AddParams& p);
void Validate(const KvWriteParams& p);
void Validate(const AttentionParams& p);
void Validate(const RopeKvWriteParams& p);

// The device the op runs on (that of its output / in-place tensor).
Device DeviceOf(const EmbeddingParams& p);
Device DeviceOf(const RmsNormParams& p);
Device DeviceOf(const RopeParams& p);
Device DeviceOf(const MatmulParams& p);
Device DeviceOf(const SwiGluParams& p);
Device DeviceOf(const AddParams& p);
Device DeviceOf(const KvWriteParams& p);
Device DeviceOf(const AttentionParams& p);
Device DeviceOf(const RopeKvWriteParams& p);

std::string_view OpName(const EmbeddingParams&);
std::string_view OpName(const RmsNormParams&);
std::string_view OpName(const RopeParams&);
std::string_view OpName(const MatmulParams&);
std::string_view OpName(const SwiGluParams&);
std::string_view OpName(const AddParams&);
std::string_view OpName(const KvWriteParams&);
std::string_view OpName(const AttentionParams&);
std::string_view OpName(const RopeKvWriteParams&);

// Throws kUnsupported: no implementation of `op` accepts these params on `device`.
[[noreturn]] void ThrowNoKernel(std::string_view op, Device device);
// Throws kInvalidArgument: a forced implementation cannot run these params.
[[noreturn]] void ThrowNotCapable(std::string_view op, std::string_view backend);

// Sees every op Registry::Run dispatches on this thread (profiling: timing events around
// each op's launches). Begin comes after validation and selection, right before the
// implementation runs; End right after it returns (its work may still be in flight).
class OpObserver {
 public:
  virtual ~OpObserver() = default;
  virtual void Begin(std::string_view op) = 0;
  virtual void End(std::string_view op) = 0;
  // Measurement only (`bench gpu-decode --skip-op`): true leaves the op out entirely (its
  // outputs keep whatever they held), so a captured step's time can be taken by difference.
  virtual bool Skip(std::string_view) { return false; }
};
// The calling thread's observer slot (null: none, the default). The setter owns nothing.
OpObserver*& CurrentOpObserver();

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;
  Registry(Registry&&) = default;

  // The built-in kernels; built once (thread-safe), never modified afterwards.
  static const Registry& Global();

  template <typename P>
  OpTable<P>& table() { return std::get<OpTable<P>>(tables_); }
  template <typename P>
  const OpTable<P>& table() const { return std::get<OpTable<P>>(tables_); }

  template <typename P>
  void Register(KernelImpl<P> impl) { table<P>().Register(std::move(impl)); }

  // Validate, select, run (between the calling thread's OpObserver's Begin and End, if set).
  template <typename P>
  void Run(const P& p) const {
    Validate(p);
    Device device = DeviceOf(p);
    const KernelImpl<P>* k = table<P>().Select(p, device);
    if (!k) ThrowNoKernel(OpName(p), device);
    if (OpObserver* o = CurrentOpObserver()) {
      if (o->Skip(OpName(p))) return;
      o->Begin(OpName(p));
      k->run(p);
      o->End(OpName(p));
      return;
    }
    k->run(p);
  }

  // The implementation Run would pick (nullptr if none); params are validated first.
  template <typename P>
  const KernelImpl<P>* Selected(const P& p) const {
    Validate(p);
    return table<P>().Select(p, DeviceOf(p));
  }

 private:
  std::tuple<OpTable<EmbeddingParams>, OpTable<RmsNormParams>, OpTable<RopeParams>,
             OpTable<MatmulParams>, OpTable<SwiGluParams>, OpTable<AddParams>,
             OpTable<KvWriteParams>, OpTable<AttentionParams>, OpTable<RopeKvWriteParams>,
             // ops_moe.h (validation and names declared there)
             OpTable<MoeRouterParams>, OpTable<MoeExpertsParams>, OpTable<MlaCacheWriteParams>,
             OpTable<MlaAttentionParams>,
             // ops_sample.h
             OpTable<SampleParams>,
             // ops_fused.h
             OpTable<FusedMatmulParams>,
             // ops_fused_attention.h
             OpTable<RopeKvWriteAttentionParams>>
      tables_;
};

// Runs one given implementation (tests, benchmarks): validates, checks its device and
// predicate (kInvalidArgument if it cannot run these params), then runs it.
template <typename P>
void RunWith(const KernelImpl<P>& k, const P& p) {
  Validate(p);
  if (k.device != DeviceOf(p) || (k.supports && !k.supports(p)))
    ThrowNotCapable(OpName(p), k.backend);
  k.run(p);
}

// Backend registration hooks, called once by Registry::Global().
void RegisterRefKernels(Registry& r);
void RegisterCpuKernels(Registry& r);
void RegisterMoeKernels(Registry& r);  // ops_moe.h: ref and cpu backends (ref/moe_register.cpp)
void RegisterSampleKernels(Registry& r);  // ops_sample.h: ref backend (ref/sample_ref.cpp)
void RegisterFusedKernels(Registry& r);  // ops_fused.h: ref and composed (fused_matmul.cpp)
void RegisterFusedAttentionKernels(Registry& r);  // ops_fused_attention.h (fused_attention.cpp)
#if defined(PEREGRINE_HAVE_CUDA)
void RegisterCudaKernels(Registry& r);  // defined under cuda/
void RegisterCudaMoeKernels(Registry& r);  // ops_moe.h MoE ops, fp8 block-scaled Matmul (cuda/moe/moe_register.cpp)
void RegisterCudaMlaKernels(Registry& r);  // ops_moe.h MLA ops (cuda/mla/mla_register.cpp)
void RegisterCudaSampleKernels(Registry& r);  // ops_sample.h (cuda/sampling/sample_register.cpp)
void RegisterCudaFp8MatmulKernels(Registry& r);  // fp8 per-tensor/channel (cuda/gemm/fp8_matmul.cpp)
void RegisterCudaFusedKernels(Registry& r);  // ops_fused.h (cuda/gemm/gemv_register.cpp)
void RegisterCudaFusedAttentionKernels(Registry& r);  // ops_fused_attention.h (cuda/cuda_register.cpp)
#endif

}  // namespace pg::ops
