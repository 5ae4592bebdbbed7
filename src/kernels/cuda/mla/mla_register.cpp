// CUDA launchers and registry entries of the MLA ops (ops_moe.h): MlaCacheWrite and
// MlaAttention (absorbed and expanded). Every launch is asynchronous on the calling thread's
// current stream; with AttentionBatch::device set, nothing here synchronises or allocates after
// warm-up (CUDA-graph capturable).
//
// Capabilities: q / out / latent bf16 on the device; w_kv_b bf16; latent cache bf16 (scales 1)
// or fp8 e4m3 (per-tensor k_scale / v_scale). MlaAttention's tensor-core kernels serve
// kv_lora_rank 512 / rope_dim 64 (DeepSeek-V3, Kimi K2, DeepSeek-V2-Lite, Moonlight), expanded
// mode with a compiled (nope, rope, v) prefill shape (128/64/128, 64/64/64); other latent
// shapes (tiny test models) run a scalar absorbed kernel (mla_generic.cu), and expanded
// requests without a prefill kernel run the absorbed form.
//
// Absorbed:  q_lat[t, h] = [W_UK_h^T q_nope[t, h], q_pe[t, h]]   (cuBLASLt, batched over heads;
//                                                                  q_pe: MlaQPeKernel, with the
//                                                                  optional RoPE)
//            o_lat = softmax(q_lat · latents^T) · latents[:, :512]  (mla_decode.cu, split-K)
//            out[t, h] = W_UV_h · o_lat[t, h]                       (cuBLASLt, batched over heads)
//            At <= kMlaFoldMaxTokens tokens the first step (with the optional q_pe RoPE and
//            the op's cache write, MlaAttentionParams::write) is MlaQAbsorbKernel and the split
//            merge + last step MlaCombineApplyKernel (mla_fused.cu): with the decode kernel,
//            three PDL kernels for the whole attention block of a layer.
// MlaCacheWrite with its fused prologue (norm + k_pe RoPE) is MlaKvPrepKernel.
// Expanded:  latents of the history gathered (mla_cache.cu), kv = latents[:, :512] · w_kv_b^T
//            (one GEMM), then FlashAttention over [k_nope, k_pe] / v (mla_prefill.cu).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cuda/batch_plan.h"
#include "kernels/cuda/common/context.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/gemm/matmul_lt.h"
#include "kernels/cuda/mla/mla_params.h"
#include "kernels/ops_moe.h"
#include "kernels/registry.h"
#include "kernels/rope_freq.h"

namespace pg::ops {
namespace {

using cuda::bf16;

bool DevBf16(const TensorView& t) { return t.device == Device::kCuda && t.dtype == DType::kBF16; }
bf16* Bf(const TensorView& t) { return static_cast<bf16*>(t.data); }

// The latent cache dtypes the kernels read and write.
bool CacheOk(const KvCacheView& c) {
  if (c.k_cache.device != Device::kCuda || c.v_cache.device != Device::kCuda) return false;
  if (c.k_cache.dtype == DType::kF8E4M3 && c.v_cache.dtype == DType::kF8E4M3) return true;
  return c.k_cache.dtype == DType::kBF16 && c.v_cache.dtype == DType::kBF16;
}
cuda::MlaCacheType CacheType(const KvCacheView& c) {
  return c.k_cache.dtype == DType::kF8E4M3 ? cuda::MlaCacheType::kFP8 : cuda::MlaCacheType::kBF16;
}

// The batch on the device: the caller's plan, or a per-thread upload of the host spans (tests;
// not capturable). Same rule as the dense attention launchers (cuda_register.cpp).
const cuda::DeviceBatchView& DeviceBatch(const AttentionBatch& b, cudaStream_t stream) {
  if (b.device) return *b.device;
  PG_ENSURE(!cuda::IsCapturing(stream), kInvalidArgument,
            "CUDA MLA under graph capture needs AttentionBatch::device (a DeviceBatchPlan)");
  thread_local cuda::DeviceBatchPlan plan;
  plan.Upload(b, stream);
  return plan.view();
}

// Carves 256-byte aligned pieces out of the attention scratch slot.
class ScratchCarver {
 public:
  size_t Add(size_t bytes) {
    const size_t off = total_;
    total_ += (bytes + 255) / 256 * 256;
    return off;
  }
  char* Base() {
    return static_cast<char*>(cuda::Scratch(cuda::ScratchSlot::kAttentionPartials, std::max<size_t>(total_, 256)));
  }

 private:
  size_t total_ = 0;
};

// cuBLASLt, or (shapes it refuses) the GEMV kernel / the per-head scalar kernel.
void Gemm(const cuda::LtGemmArgs& g, cudaStream_t stream) {
  if (cuda::LtMatmul(g, stream)) return;
  if (g.batch == 1 && !g.w_km)
    cuda::LaunchGemv({g.x, g.w, g.out, nullptr, g.n, g.k, g.m, g.ldx, g.ldw, g.ldo, g.accumulate},
                     stream);
  else
    cuda::LaunchMlaHeadGemm({g.x, g.w, g.out, g.n, g.batch, g.k, g.m, g.ldx, g.stride_x, g.ldw,
                             g.stride_w, g.ldo, g.stride_o, g.w_km},
                            stream);
  PG_CUDA_CHECK_LAUNCH();
}

cuda::WeightType NormType(DType t) {
  return t == DType::kF32 ? cuda::WeightType::kF32
         : t == DType::kBF16 ? cuda::WeightType::kBF16 : cuda::WeightType::kF16;
}

// Fills neox / inv_freq of a fused RoPE over rope_dim values (validated: rotary_dim 0 or
// rope_dim).
template <typename A>
void FillRope(A& a, const RopeConfig& c, int rope_dim) {
  a.neox = c.neox;
  const std::vector<float> inv = RopeInvFreq(c, rope_dim);
  std::copy(inv.begin(), inv.end(), a.inv_freq);
}

// ---- MlaCacheWrite -------------------------------------------------------------------------
cuda::MlaCacheWriteArgs CacheWriteArgs(const MlaCacheWriteParams& p, cudaStream_t stream) {
  cuda::MlaCacheWriteArgs a{};
  a.latent = Bf(p.latent);
  a.k_cache = p.cache.k_cache.data;
  a.v_cache = p.cache.v_cache.data;
  a.batch = DeviceBatch(*p.batch, stream);
  a.latent_stride = p.latent.strides[0];
  a.latent_dim = int(p.latent.dim(1));
  a.half = int(p.cache.k_cache.dim(3));
  a.cache_type = CacheType(p.cache);
  a.inv_k_scale = 1.0f / p.cache.k_scale;
  a.inv_v_scale = 1.0f / p.cache.v_scale;
  return a;
}

// The write with its prologue (norm / RoPE; either may be absent: then a plain copy).
cuda::MlaKvPrepArgs KvPrepArgs(const MlaCacheWriteParams& p, cudaStream_t stream) {
  cuda::MlaKvPrepArgs f{};
  f.write = CacheWriteArgs(p, stream);
  f.norm_weight = p.norm_weight.data;
  f.norm_type = NormType(p.norm_weight.dtype);
  f.eps = p.eps;
  f.positions = p.positions.data ? p.positions.as<int32_t>() : nullptr;
  f.rank = p.kv_lora_rank;
  if (f.positions) FillRope(f, p.rope, f.write.latent_dim - p.kv_lora_rank);
  return f;
}

void RunMlaCacheWrite(const MlaCacheWriteParams& p) {
  cudaStream_t stream = cuda::CurrentStream();
  if (p.norm_weight.data || p.positions.data) cuda::LaunchMlaKvPrep(KvPrepArgs(p, stream), stream);
  else cuda::LaunchMlaCacheWrite(CacheWriteArgs(p, stream), stream);
  PG_CUDA_CHECK_LAUNCH();
}

bool SupportsMlaCacheWrite(const MlaCacheWriteParams& p) {
  return DevBf16(p.latent) && CacheOk(p.cache) &&
         (!p.norm_weight.data || p.norm_weight.device == Device::kCuda) &&
         (!p.positions.data || p.positions.device == Device::kCuda);
}

// ---- MlaAttention --------------------------------------------------------------------------
struct MlaShape {
  int64_t tokens, heads, qk, nope, rope, v, rank;
};
MlaShape ShapeOf(const MlaAttentionParams& p) {
  const int64_t qk = p.q.dim(2);
  return {p.q.dim(0), p.q.dim(1), qk, qk - p.rope_dim, p.rope_dim, p.out.dim(2), p.kv_lora_rank};
}
float SoftmaxScale(const MlaAttentionParams& p, const MlaShape& s) {
  return p.scale > 0 ? p.scale : 1.0f / std::sqrt(float(s.qk));
}

// The tensor-core kernels' latent shape (mla_params.h).
bool FastLatent(const MlaShape& s) { return s.rank == cuda::kMlaRank && s.rope == cuda::kMlaRope; }

// The optional q RoPE on its own: q[:, h, nope:] rotated in place (the Rope kernel on the
// [T, H, qk] view starting at nope, rotary_dim = rope).
void RotateQ(const MlaAttentionParams& p, const MlaShape& sh, cudaStream_t stream) {
  if (!p.positions.data || sh.tokens == 0) return;
  cuda::RopeArgs r{};
  r.x = Bf(p.q) + sh.nope;
  r.positions = p.positions.as<int32_t>();
  r.x_stride = p.q.strides[0];
  r.tokens = sh.tokens;
  r.heads = int(sh.heads);
  r.head_dim = int(sh.qk);
  r.rotary_dim = int(sh.rope);
  FillRope(r, p.rope, int(sh.rope));
  cuda::LaunchRope(r, stream);
  PG_CUDA_CHECK_LAUNCH();
}

void RunAbsorbed(const MlaAttentionParams& p, const MlaShape& sh, cudaStream_t stream) {
  const AttentionBatch& b = *p.batch;
  const int64_t T = sh.tokens, H = sh.heads, per_head = sh.nope + sh.v, L = sh.rank + sh.rope;
  if (T == 0) return;
  const bool fast = FastLatent(sh);
  int max_q = 1, max_kv = 1;
  for (int s = 0; s < b.num_seqs; ++s) {
    max_q = std::max(max_q, int(b.q_len[size_t(s)]));
    max_kv = std::max(max_kv, int(b.kv_len[size_t(s)]));
  }
  cuda::MlaDecodeArgs a{};
  if (fast) {
    const cuda::MlaDecodePlan plan =
        cuda::PlanMlaDecode(b.num_seqs, max_q, max_kv, int(H), cuda::MultiprocessorCount());
    a.row_groups = plan.row_groups;
    a.num_splits = plan.num_splits;
    a.min_chunk = plan.min_chunk;
  } else {
    a.num_splits = 1;
  }

  ScratchCarver sc;
  const size_t off_q = sc.Add(size_t(T * H * L) * 2);
  const size_t off_o = sc.Add(size_t(T * H * sh.rank) * 2);
  const size_t parts = size_t(T * H) * size_t(a.num_splits);
  const size_t off_acc = a.num_splits > 1 ? sc.Add(parts * cuda::kMlaRank * 4) : 0;
  const size_t off_ml = a.num_splits > 1 ? sc.Add(parts * 2 * 4) : 0;
  char* base = sc.Base();
  bf16* q_lat = reinterpret_cast<bf16*>(base + off_q);
  bf16* o_lat = reinterpret_cast<bf16*>(base + off_o);

  const bf16* w = Bf(p.w_kv_b);
  const int64_t ldw = p.w_kv_b.strides[0];
  const int32_t* positions = p.positions.data ? p.positions.as<int32_t>() : nullptr;
  // A few tokens: RoPE + fold + q_pe copy in one kernel (false: a shape it does not cover).
  cuda::MlaQAbsorbArgs qa{};
  qa.q = Bf(p.q), qa.w = w, qa.q_lat = q_lat, qa.positions = positions;
  qa.q_stride = p.q.strides[0], qa.ldw = ldw, qa.w_head = per_head;
  qa.tokens = int(T), qa.heads = int(H), qa.nope = int(sh.nope), qa.rope = int(sh.rope),
  qa.rank = int(sh.rank);
  if (positions) FillRope(qa, p.rope, int(sh.rope));
  // The op's cache write (p.write) rides in the same kernel (extra blocks), or runs first.
  qa.with_prep = p.write != nullptr;
  if (p.write) qa.prep = KvPrepArgs(*p.write, stream);
  const bool q_fused = T <= cuda::kMlaFoldMaxTokens && cuda::LaunchMlaQAbsorb(qa, stream);
  if (q_fused) PG_CUDA_CHECK_LAUNCH();
  if (!q_fused) {
    if (p.write) RunMlaCacheWrite(*p.write);
    // q_lat[:, h, :rank] = q_nope[:, h] · W_UK_h (W_UK_h: rows h*per_head .. +nope, [nope, rank]).
    cuda::LtGemmArgs fold{Bf(p.q), w, q_lat, T, sh.nope, sh.rank, p.q.strides[0], ldw, H * L, false};
    fold.batch = H, fold.stride_x = sh.qk, fold.stride_w = per_head * ldw, fold.stride_o = L,
    fold.w_km = true;
    Gemm(fold, stream);
    // q_lat[:, h, rank:] = q_pe, rotated first (in place in q) with positions: one kernel for
    // every token (q rows of any stride; a copy per token cost ~2.5 us each at batch 32).
    cuda::LaunchMlaQPe(qa, stream);
    PG_CUDA_CHECK_LAUNCH();
  }
  const cuda::DeviceBatchView& dev = DeviceBatch(b, stream);
  const float scale_log2 = SoftmaxScale(p, sh) * 1.4426950408889634f;
  if (!fast) {
    cuda::LaunchMlaGeneric({q_lat, p.cache.k_cache.data, p.cache.v_cache.data, o_lat, dev,
                            int(H), int(sh.rank), int(sh.rope), int(p.cache.k_cache.dim(3)),
                            scale_log2, CacheType(p.cache), p.cache.k_scale, p.cache.v_scale},
                           stream);
    PG_CUDA_CHECK_LAUNCH();
  } else {
    a.q_lat = q_lat;
    a.k_cache = p.cache.k_cache.data;
    a.v_cache = p.cache.v_cache.data;
    a.o_lat = o_lat;
    if (a.num_splits > 1) {
      a.partial_acc = reinterpret_cast<float*>(base + off_acc);
      a.partial_ml = reinterpret_cast<float*>(base + off_ml);
    }
    a.batch = dev;
    a.heads = int(H);
    a.logit_scale_log2 = scale_log2;
    a.cache_type = CacheType(p.cache);
    a.k_scale = p.cache.k_scale;
    a.v_scale = p.cache.v_scale;
    cuda::LaunchMlaDecode(a, stream);
    PG_CUDA_CHECK_LAUNCH();
    const cuda::MlaCombineArgs combine{a.partial_acc, a.partial_ml, o_lat, a.batch, a.heads,
                                       a.num_splits, a.min_chunk};
    // A few tokens: split merge + W_UV in one kernel (it reads o_lat when there is one split).
    cuda::MlaCombineApplyArgs ca{combine, w + sh.nope * ldw, Bf(p.out), ldw, per_head,
                                 p.out.strides[0], int(T), int(sh.v)};
    if (T <= cuda::kMlaFoldMaxTokens && cuda::LaunchMlaCombineApply(ca, stream)) {
      PG_CUDA_CHECK_LAUNCH();
      return;
    }
    if (a.num_splits > 1) {
      cuda::LaunchMlaCombine(combine, stream);
      PG_CUDA_CHECK_LAUNCH();
    }
  }
  // out[:, h] = o_lat[:, h] · W_UV_h^T (W_UV_h: rows h*per_head + nope .. +v, [v, rank]).
  cuda::LtGemmArgs apply{o_lat, w + sh.nope * ldw, Bf(p.out), T, sh.rank, sh.v,
                         H * sh.rank, ldw, p.out.strides[0], false};
  apply.batch = H, apply.stride_x = sh.rank, apply.stride_w = per_head * ldw,
  apply.stride_o = sh.v;
  Gemm(apply, stream);
}

void RunExpanded(const MlaAttentionParams& p, const MlaShape& sh, cudaStream_t stream) {
  const AttentionBatch& b = *p.batch;
  const int64_t H = sh.heads, per_head = sh.nope + sh.v;
  int64_t hist = 0;
  int max_q = 0, max_kv = 0;
  for (int s = 0; s < b.num_seqs; ++s) {
    hist += b.kv_len[size_t(s)];
    max_q = std::max(max_q, int(b.q_len[size_t(s)]));
    max_kv = std::max(max_kv, int(b.kv_len[size_t(s)]));
  }
  if (sh.tokens == 0 || hist == 0) return;
  ScratchCarver sc;
  const size_t off_hs = sc.Add(size_t(b.num_seqs) * 4);
  const size_t off_lat = sc.Add(size_t(hist) * cuda::kMlaLatent * 2);
  const size_t off_kv = sc.Add(size_t(hist * H * per_head) * 2);
  char* base = sc.Base();
  int32_t* hist_start = reinterpret_cast<int32_t*>(base + off_hs);
  bf16* lat = reinterpret_cast<bf16*>(base + off_lat);
  bf16* kv = reinterpret_cast<bf16*>(base + off_kv);
  const cuda::DeviceBatchView& dev = DeviceBatch(b, stream);

  cuda::LaunchMlaHistStart(dev, hist_start, stream);
  PG_CUDA_CHECK_LAUNCH();
  cuda::LaunchMlaGather({p.cache.k_cache.data, p.cache.v_cache.data, lat, hist_start, dev, max_kv,
                         CacheType(p.cache), p.cache.k_scale, p.cache.v_scale},
                        stream);
  PG_CUDA_CHECK_LAUNCH();
  // kv[t, h, :] = w_kv_b[h] · c_kv(t): one GEMM over the whole history.
  Gemm({lat, Bf(p.w_kv_b), kv, hist, sh.rank, H * per_head, cuda::kMlaLatent,
        p.w_kv_b.strides[0], H * per_head, false},
       stream);
  cuda::MlaPrefillArgs a{};
  a.q = Bf(p.q);
  a.kv = kv;
  a.rope = lat + sh.rank;
  a.out = Bf(p.out);
  a.hist_start = hist_start;
  a.batch = dev;
  a.q_stride = p.q.strides[0];
  a.rope_stride = cuda::kMlaLatent;
  a.out_stride = p.out.strides[0];
  a.heads = int(H);
  a.max_q_len = max_q;
  a.logit_scale_log2 = SoftmaxScale(p, sh) * 1.4426950408889634f;
  cuda::LaunchMlaPrefill(a, int(sh.nope), int(sh.rope), int(sh.v), stream);
  PG_CUDA_CHECK_LAUNCH();
}

void RunMlaAttention(const MlaAttentionParams& p) {
  cudaStream_t stream = cuda::CurrentStream();
  const MlaShape sh = ShapeOf(p);
  // Shapes without a compiled prefill kernel (or rows it cannot read: cp.async needs 16-byte
  // q rows, the output pairs 4-byte alignment) run the absorbed form (the same function).
  const bool aligned = reinterpret_cast<uintptr_t>(p.q.data) % 16 == 0 &&
                       p.q.strides[0] % 8 == 0 && p.out.strides[0] % 2 == 0;
  if (p.mode == MlaMode::kExpanded && FastLatent(sh) && aligned &&
      cuda::MlaPrefillSupports(int(sh.nope), int(sh.rope), int(sh.v))) {
    if (p.write) RunMlaCacheWrite(*p.write);
    RotateQ(p, sh, stream);
    RunExpanded(p, sh, stream);
  } else {
    RunAbsorbed(p, sh, stream);
  }
}

bool SupportsMlaAttention(const MlaAttentionParams& p) {
  if (!DevBf16(p.q) || !DevBf16(p.out) || !DevBf16(p.w_kv_b) || !CacheOk(p.cache)) return false;
  if (p.positions.data && p.positions.device != Device::kCuda) return false;
  if (p.write && !SupportsMlaCacheWrite(*p.write)) return false;
  if (p.cache.k_cache.dtype == DType::kBF16 && (p.cache.k_scale != 1.0f || p.cache.v_scale != 1.0f))
    return false;
  if (p.kv_lora_rank == cuda::kMlaRank && p.rope_dim == cuda::kMlaRope) return true;
  // Generic kernel: q row + per-warp output rows in shared memory.
  return size_t(p.kv_lora_rank + p.rope_dim + 4 * p.kv_lora_rank) * 4 <= 200 * 1024;
}

}  // namespace

void RegisterCudaMlaKernels(Registry& r) {
  if (cuda::DeviceCount() == 0) return;
  r.Register(KernelImpl<MlaCacheWriteParams>{
      "cuda", Device::kCuda, kPriorityCuda,
      &SupportsMlaCacheWrite,
      &RunMlaCacheWrite});
  r.Register(KernelImpl<MlaAttentionParams>{"cuda", Device::kCuda, kPriorityCuda,
                                            &SupportsMlaAttention, &RunMlaAttention});
}

}  // namespace pg::ops
