// The reference backend: plain loops, double accumulation, no threads, no SIMD. It is the
// ground truth every other backend is tested against (tests/ops), so clarity beats speed.
#include <cmath>
#include <vector>

#include "core/quant.h"
#include "kernels/kernel_util.h"
#include "kernels/registry.h"
#include "kernels/rope_freq.h"

namespace pg::ops {
namespace {

using detail::RowF32;

void RefEmbedding(const EmbeddingParams& p) {
  const int64_t hidden = p.table.dim(1);
  detail::CheckIds(p.ids, p.table.dim(0));
  for (int64_t t = 0; t < p.ids.dim(0); ++t) {
    int64_t id = p.ids.as<int32_t>()[t];
    quant::DequantizeRow(p.table.dtype, p.table.row_ptr(id), RowF32(p.out, t), hidden);
  }
}

void RefRmsNorm(const RmsNormParams& p) {
  const int64_t hidden = p.x.dim(1);
  std::vector<float> v(static_cast<size_t>(hidden));
  for (int64_t r = 0; r < p.x.dim(0); ++r) {
    const float* x = RowF32(p.x, r);
    for (int64_t i = 0; i < hidden; ++i) v[size_t(i)] = x[i];
    if (p.residual.data) {
      float* res = RowF32(p.residual, r);
      for (int64_t i = 0; i < hidden; ++i) v[size_t(i)] = res[i] = res[i] + x[i];
    }
    double ss = 0;
    for (float e : v) ss += double(e) * e;
    double inv = 1.0 / std::sqrt(ss / double(hidden) + double(p.eps));
    float* out = RowF32(p.out, r);
    for (int64_t i = 0; i < hidden; ++i)
      out[i] = float(double(v[size_t(i)]) * inv *
                     double(detail::LoadScalar(p.weight.dtype, p.weight.data, i)));
  }
}

void RefRope(const RopeParams& p) {
  const int64_t heads = p.x.dim(1), head_dim = p.x.dim(2);
  const int rd = RotaryDim(p.config, int(head_dim));
  const int half = rd / 2;
  std::vector<float> inv = RopeInvFreq(p.config, rd);
  for (int64_t t = 0; t < p.x.dim(0); ++t) {
    float pos = float(p.positions.as<int32_t>()[t]);
    float* row = RowF32(p.x, t);
    for (int64_t h = 0; h < heads; ++h) {
      float* x = row + h * head_dim;
      for (int i = 0; i < half; ++i) {
        double angle = double(inv[size_t(i)] * pos);  // float32 product, as HF
        double c = std::cos(angle), s = std::sin(angle);
        int i0 = p.config.neox ? i : 2 * i;
        int i1 = p.config.neox ? i + half : 2 * i + 1;
        double x0 = x[i0], x1 = x[i1];
        x[i0] = float(x0 * c - x1 * s);
        x[i1] = float(x1 * c + x0 * s);
      }
    }
  }
}

void RefMatmul(const MatmulParams& p) {
  const int64_t n = p.x.dim(0), k = p.x.dim(1), m = p.w.dim(0);
  std::vector<float> wrow(static_cast<size_t>(k));
  for (int64_t j = 0; j < m; ++j) {
    quant::DequantizeRow(p.w.dtype, p.w.row_ptr(j), wrow.data(), k);
    if (p.w_scale.data) detail::ScaleWeightRow(p.w_scale, j, wrow.data(), k);
    double b = p.bias.data ? double(p.bias.as<float>()[j]) : 0.0;
    for (int64_t r = 0; r < n; ++r) {
      const float* x = RowF32(p.x, r);
      double acc = b;
      for (int64_t i = 0; i < k; ++i) acc += double(x[i]) * double(wrow[size_t(i)]);
      float& o = RowF32(p.out, r)[j];
      o = p.accumulate ? float(double(o) + acc) : float(acc);
    }
  }
}

double Silu(double g) { return g / (1.0 + std::exp(-g)); }

void RefSwiGlu(const SwiGluParams& p) {
  const int64_t inter = p.out.dim(1);
  for (int64_t r = 0; r < p.out.dim(0); ++r) {
    const float* g = RowF32(p.gate, r);
    const float* u = p.up.data ? RowF32(p.up, r) : g + inter;
    float* o = RowF32(p.out, r);
    for (int64_t i = 0; i < inter; ++i) o[i] = float(Silu(g[i]) * double(u[i]));
  }
}

void RefAdd(const AddParams& p) {
  const float* a = p.a.as<float>();
  const float* b = p.b.as<float>();
  float* o = p.out.as<float>();
  for (int64_t i = 0; i < p.out.numel(); ++i) o[i] = a[i] + b[i];
}

void RefKvWrite(const KvWriteParams& p) {
  const AttentionBatch& b = *p.batch;
  const int64_t kvh = p.k.dim(1), d = p.k.dim(2);
  const TensorView& kc = p.cache.k_cache;
  const TensorView& vc = p.cache.v_cache;
  for (int s = 0; s < b.num_seqs; ++s) {
    const int64_t first = b.kv_len[size_t(s)] - b.q_len[size_t(s)];
    for (int64_t i = 0; i < b.q_len[size_t(s)]; ++i) {
      const int64_t t = first + i, row = b.q_start[size_t(s)] + i;
      const int64_t page = detail::PageOf(b, s, t), slot = t % b.page_size;
      for (int64_t h = 0; h < kvh; ++h) {
        const int64_t off = detail::CacheOffset(kc, page, slot, h);
        for (int64_t e = 0; e < d; ++e) {
          detail::StoreScalar(kc.dtype, kc.data, off + e,
                              RowF32(p.k, row)[h * d + e] / p.cache.k_scale);
          detail::StoreScalar(vc.dtype, vc.data, off + e,
                              RowF32(p.v, row)[h * d + e] / p.cache.v_scale);
        }
      }
    }
  }
}

void RefAttention(const AttentionParams& p) {
  const AttentionBatch& b = *p.batch;
  const int64_t heads = p.q.dim(1), d = p.q.dim(2);
  const TensorView& kc = p.cache.k_cache;
  const TensorView& vc = p.cache.v_cache;
  const int64_t kvh = kc.dim(2), group = heads / kvh;
  const double scale = p.scale > 0 ? p.scale : 1.0 / std::sqrt(double(d));
  std::vector<double> scores, acc(static_cast<size_t>(d));
  for (int s = 0; s < b.num_seqs; ++s) {
    const int64_t kv_len = b.kv_len[size_t(s)], q_len = b.q_len[size_t(s)];
    for (int64_t i = 0; i < q_len; ++i) {
      const int64_t pos = kv_len - q_len + i;  // causal: attends to [lo, pos]
      const int64_t lo = p.sliding_window > 0 ? std::max<int64_t>(0, pos - p.sliding_window + 1) : 0;
      const int64_t row = b.q_start[size_t(s)] + i;
      for (int64_t h = 0; h < heads; ++h) {
        const float* q = RowF32(p.q, row) + h * d;
        const int64_t g = h / group;
        scores.assign(size_t(pos - lo + 1), 0.0);
        double mx = -INFINITY;
        for (int64_t t = lo; t <= pos; ++t) {
          const int64_t off = detail::CacheOffset(kc, detail::PageOf(b, s, t), t % b.page_size, g);
          double dot = 0;
          for (int64_t e = 0; e < d; ++e)
            dot += double(q[e]) * detail::LoadScalar(kc.dtype, kc.data, off + e) * p.cache.k_scale;
          double logit = dot * scale;
          if (p.logit_softcap > 0) logit = p.logit_softcap * std::tanh(logit / p.logit_softcap);
          scores[size_t(t - lo)] = logit;
          mx = std::max(mx, logit);
        }
        double denom = 0;
        for (double& sc : scores) denom += (sc = std::exp(sc - mx));
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t t = lo; t <= pos; ++t) {
          const int64_t off = detail::CacheOffset(vc, detail::PageOf(b, s, t), t % b.page_size, g);
          const double w = scores[size_t(t - lo)] / denom;
          for (int64_t e = 0; e < d; ++e)
            acc[size_t(e)] += w * detail::LoadScalar(vc.dtype, vc.data, off + e) * p.cache.v_scale;
        }
        float* o = RowF32(p.out, row) + h * d;
        for (int64_t e = 0; e < d; ++e) o[e] = float(acc[size_t(e)]);
      }
    }
  }
}

// RmsNorm over each head of every token row of x ([tokens, heads, head_dim], rows of packed
// heads at x's row stride).
void RefNormHeads(const TensorView& x, const TensorView& weight, float eps) {
  for (int64_t t = 0; t < x.dim(0); ++t) {
    TensorView heads = TensorView::Contiguous(RowF32(x, t), DType::kF32, {x.dim(1), x.dim(2)});
    RefRmsNorm({.x = heads, .weight = weight, .out = heads, .eps = eps});
  }
}

// (Per-head RmsNorm of q and k,) Rope on q and k, then KvWrite: the fused op's definition
// (ops.h).
void RefRopeKvWrite(const RopeKvWriteParams& p) {
  if (p.q_norm.data) {
    RefNormHeads(p.q, p.q_norm, p.norm_eps);
    RefNormHeads(p.k, p.k_norm, p.norm_eps);
  }
  RefRope({p.q, p.positions, p.config});
  RefRope({p.k, p.positions, p.config});
  RefKvWrite({p.k, p.v, p.cache, p.batch});
}

template <typename P>
KernelImpl<P> Ref(void (*fn)(const P&)) {
  return KernelImpl<P>{"ref", Device::kCpu, kPriorityRef, {}, fn};
}

}  // namespace

void RegisterRefKernels(Registry& r) {
  r.Register(Ref(&RefEmbedding));
  r.Register(Ref(&RefRmsNorm));
  r.Register(Ref(&RefRope));
  // The interleaved CPU layouts have no reference of their own: Matmul on them must give the
  // bits of their source Q4_0 / Q4_1 matrix (tests/ops/batch_invariance_test.cpp).
  r.Register(KernelImpl<MatmulParams>{"ref", Device::kCpu, kPriorityRef,
                                      [](const MatmulParams& p) { return !IsRows4(p.w.dtype); },
                                      &RefMatmul});
  r.Register(Ref(&RefSwiGlu));
  r.Register(Ref(&RefAdd));
  r.Register(Ref(&RefKvWrite));
  r.Register(Ref(&RefAttention));
  r.Register(Ref(&RefRopeKvWrite));
}

}  // namespace pg::ops
