// Reference Multi-head Latent Attention (ops_moe.h): the latent cache write, and attention
// in both forms, expanded (per-head K/V materialised from the latents) and absorbed (W_UK
// folded into the query, W_UV applied after attention). Double accumulation throughout.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/quant.h"
#include "kernels/kernel_util.h"
#include "kernels/ref/moe_kernels.h"

namespace pg::ops::ref {
namespace {

using detail::RowF32;

// Element i of the latent row in (page, slot): [0, half) lives in k_cache, the rest in v_cache
// (f32 / f16 / bf16, or fp8 e4m3 with per-tensor scales).
struct LatentCache {
  const KvCacheView& c;
  int64_t half;
  int64_t Offset(int64_t page, int64_t slot) const {
    return detail::CacheOffset(c.k_cache, page, slot, 0);
  }
  // Real value = stored * scale of the half; fp8 e4m3 stores saturate to +-448.
  static float Get(const TensorView& t, int64_t i) {
    if (t.dtype == DType::kF8E4M3) return F8E4M3ToF32(static_cast<const uint8_t*>(t.data)[i]);
    return detail::LoadScalar(t.dtype, t.data, i);
  }
  static void Put(const TensorView& t, int64_t i, float v) {
    if (t.dtype == DType::kF8E4M3) static_cast<uint8_t*>(t.data)[i] = F32ToF8E4M3(v);
    else detail::StoreScalar(t.dtype, t.data, i, v);
  }
  float Load(int64_t off, int64_t i) const {
    return i < half ? Get(c.k_cache, off + i) * c.k_scale : Get(c.v_cache, off + i - half) * c.v_scale;
  }
  void Store(int64_t off, int64_t i, float v) const {
    if (i < half) Put(c.k_cache, off + i, v / c.k_scale);
    else Put(c.v_cache, off + i - half, v / c.v_scale);
  }
};

// Latent rows [kv_len, latent_dim] of sequence s, as doubles.
std::vector<double> GatherLatents(const LatentCache& lc, const AttentionBatch& b, int s,
                                  int64_t kv_len, int64_t latent_dim) {
  std::vector<double> rows(size_t(kv_len * latent_dim));
  for (int64_t t = 0; t < kv_len; ++t) {
    const int64_t off = lc.Offset(detail::PageOf(b, s, t), t % b.page_size);
    for (int64_t i = 0; i < latent_dim; ++i) rows[size_t(t * latent_dim + i)] = lc.Load(off, i);
  }
  return rows;
}

// The reference backend's implementation of a base op (the fused prologues below are exactly
// these ops, run in order).
template <typename P>
void RunRef(const P& p) {
  Validate(p);
  Registry::Global().table<P>().Find("ref")->run(p);
}

// Rope on rope_dim values starting `offset` elements into each of `heads` heads of `head_dim`
// (rotary_dim = rope_dim): the [rows, heads, head_dim] view shifted by `offset`.
void RopeSlice(const TensorView& x, int64_t heads, int64_t head_dim, int64_t offset,
               int64_t rope_dim, const TensorView& positions, RopeConfig config) {
  TensorView v = x;
  v.data = static_cast<float*>(x.data) + offset;
  v.ndim = 3;
  v.shape = {x.dim(0), heads, head_dim};
  v.strides = {x.strides[0], head_dim, 1};
  config.rotary_dim = int(rope_dim);
  RunRef(RopeParams{.x = v, .positions = positions, .config = config});
}

// Softmax of `logits` in place (over all entries).
void Softmax(std::vector<double>& logits) {
  double mx = -INFINITY, sum = 0;
  for (double l : logits) mx = std::max(mx, l);
  for (double& l : logits) sum += (l = std::exp(l - mx));
  for (double& l : logits) l /= sum;
}

}  // namespace

void MlaCacheWrite(const MlaCacheWriteParams& p) {
  const AttentionBatch& b = *p.batch;
  const int64_t latent_dim = p.latent.dim(1), rank = p.kv_lora_rank;
  if (p.norm_weight.data) {  // RmsNorm of latent[:, :rank], in place
    TensorView c_kv = p.latent;
    c_kv.shape[1] = rank;
    RunRef(RmsNormParams{.x = c_kv, .weight = p.norm_weight, .out = c_kv, .eps = p.eps});
  }
  if (p.positions.data)  // Rope of latent[:, rank:] as one head, in place
    RopeSlice(p.latent, 1, latent_dim - rank, rank, latent_dim - rank, p.positions, p.rope);
  LatentCache lc{p.cache, (latent_dim + 1) / 2};
  for (int s = 0; s < b.num_seqs; ++s) {
    const int64_t first = b.kv_len[size_t(s)] - b.q_len[size_t(s)];
    for (int64_t i = 0; i < b.q_len[size_t(s)]; ++i) {
      const int64_t t = first + i;
      const int64_t off = lc.Offset(detail::PageOf(b, s, t), t % b.page_size);
      const float* row = RowF32(p.latent, b.q_start[size_t(s)] + i);
      for (int64_t e = 0; e < latent_dim; ++e) lc.Store(off, e, row[e]);
    }
  }
}

void MlaHeadWeightF32(const MlaAttentionParams& p, int64_t h, float* out) {
  const int64_t nope = p.q.dim(2) - p.rope_dim, vd = p.out.dim(2), rank = p.kv_lora_rank;
  if (p.w_kv_b.data) {
    for (int64_t r = 0; r < nope + vd; ++r)
      quant::DequantizeRow(p.w_kv_b.dtype, p.w_kv_b.row_ptr(h * (nope + vd) + r),
                           out + r * rank, rank);
    return;
  }
  std::vector<float> k_row(static_cast<size_t>(nope));
  for (int64_t c = 0; c < rank; ++c) {  // w_k_b[h][c][e] = W_UK_h[e, c]
    quant::DequantizeRow(p.w_k_b.dtype, detail::HeadRow(p.w_k_b, h, c), k_row.data(), nope);
    for (int64_t e = 0; e < nope; ++e) out[e * rank + c] = k_row[size_t(e)];
  }
  for (int64_t j = 0; j < vd; ++j)
    quant::DequantizeRow(p.w_v_b.dtype, detail::HeadRow(p.w_v_b, h, j), out + (nope + j) * rank,
                         rank);
}

void MlaAttention(const MlaAttentionParams& p) {
  const AttentionBatch& b = *p.batch;
  const int64_t heads = p.q.dim(1), qk = p.q.dim(2), rope = p.rope_dim, nope = qk - rope;
  const int64_t vd = p.out.dim(2), rank = p.kv_lora_rank, latent_dim = rank + rope;
  const int64_t per_head = nope + vd;
  const double scale = p.scale > 0 ? p.scale : 1.0 / std::sqrt(double(qk));
  if (p.write) ref::MlaCacheWrite(*p.write);  // the new tokens' latents first (ops_moe.h)
  LatentCache lc{p.cache, (latent_dim + 1) / 2};
  if (p.positions.data) RopeSlice(p.q, heads, qk, nope, rope, p.positions, p.rope);
  // w_kv_b (or its split form) as f32: [heads * (nope + vd), rank].
  std::vector<float> w(size_t(heads * per_head * rank));
  for (int64_t h = 0; h < heads; ++h) MlaHeadWeightF32(p, h, w.data() + h * per_head * rank);
  auto W = [&](int64_t h, int64_t row, int64_t c) {
    return double(w[size_t((h * per_head + row) * rank + c)]);
  };
  for (int s = 0; s < b.num_seqs; ++s) {
    const int64_t kv_len = b.kv_len[size_t(s)], q_len = b.q_len[size_t(s)];
    const std::vector<double> lat = GatherLatents(lc, b, s, kv_len, latent_dim);
    auto L = [&](int64_t t, int64_t i) { return lat[size_t(t * latent_dim + i)]; };
    if (p.mode == MlaMode::kExpanded) {
      // k_nope [kv_len, heads, nope], v [kv_len, heads, vd] from the latents.
      std::vector<double> kn(size_t(kv_len * heads * nope)), vv(size_t(kv_len * heads * vd));
      for (int64_t t = 0; t < kv_len; ++t)
        for (int64_t h = 0; h < heads; ++h) {
          for (int64_t d = 0; d < per_head; ++d) {
            double acc = 0;
            for (int64_t c = 0; c < rank; ++c) acc += W(h, d, c) * L(t, c);
            if (d < nope) kn[size_t((t * heads + h) * nope + d)] = acc;
            else vv[size_t((t * heads + h) * vd + d - nope)] = acc;
          }
        }
      for (int64_t i = 0; i < q_len; ++i) {
        const int64_t pos = kv_len - q_len + i, row = b.q_start[size_t(s)] + i;
        for (int64_t h = 0; h < heads; ++h) {
          const float* q = RowF32(p.q, row) + h * qk;
          std::vector<double> sc(size_t(pos + 1));
          for (int64_t t = 0; t <= pos; ++t) {
            double dot = 0;
            for (int64_t d = 0; d < nope; ++d) dot += double(q[d]) * kn[size_t((t * heads + h) * nope + d)];
            for (int64_t r = 0; r < rope; ++r) dot += double(q[nope + r]) * L(t, rank + r);
            sc[size_t(t)] = dot * scale;
          }
          Softmax(sc);
          float* o = RowF32(p.out, row) + h * vd;
          for (int64_t j = 0; j < vd; ++j) {
            double acc = 0;
            for (int64_t t = 0; t <= pos; ++t) acc += sc[size_t(t)] * vv[size_t((t * heads + h) * vd + j)];
            o[j] = float(acc);
          }
        }
      }
    } else {
      std::vector<double> q_abs(static_cast<size_t>(rank)), o_lat(static_cast<size_t>(rank));
      for (int64_t i = 0; i < q_len; ++i) {
        const int64_t pos = kv_len - q_len + i, row = b.q_start[size_t(s)] + i;
        for (int64_t h = 0; h < heads; ++h) {
          const float* q = RowF32(p.q, row) + h * qk;
          // q_abs = W_UK_h^T q_nope: the query in latent space.
          for (int64_t c = 0; c < rank; ++c) {
            double acc = 0;
            for (int64_t d = 0; d < nope; ++d) acc += double(q[d]) * W(h, d, c);
            q_abs[size_t(c)] = acc;
          }
          std::vector<double> sc(size_t(pos + 1));
          for (int64_t t = 0; t <= pos; ++t) {
            double dot = 0;
            for (int64_t c = 0; c < rank; ++c) dot += q_abs[size_t(c)] * L(t, c);
            for (int64_t r = 0; r < rope; ++r) dot += double(q[nope + r]) * L(t, rank + r);
            sc[size_t(t)] = dot * scale;
          }
          Softmax(sc);
          std::fill(o_lat.begin(), o_lat.end(), 0.0);
          for (int64_t t = 0; t <= pos; ++t)
            for (int64_t c = 0; c < rank; ++c) o_lat[size_t(c)] += sc[size_t(t)] * L(t, c);
          // out = W_UV_h · o_lat.
          float* o = RowF32(p.out, row) + h * vd;
          for (int64_t j = 0; j < vd; ++j) {
            double acc = 0;
            for (int64_t c = 0; c < rank; ++c) acc += W(h, nope + j, c) * o_lat[size_t(c)];
            o[j] = float(acc);
          }
        }
      }
    }
  }
}

}  // namespace pg::ops::ref
