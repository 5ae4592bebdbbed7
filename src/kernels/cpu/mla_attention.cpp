// Multi-head Latent Attention on the CPU (ops_moe.h MlaAttention, both modes), AVX2 with f32
// accumulation; the reference (ref/moe_mla_ref.cpp, double accumulation) is its oracle
// (tests/ops/mla_ops_test.cpp runs every backend against it).
//   * Latents: each sequence's history is read from the cache once per call into f32 rows
//     [kv_len, rank + rope] (cache scales applied), shared by every head and task.
//   * kAbsorbed (decode): a task = (sequence, block of query rows, group of heads). Per (row,
//     head): q_abs = W_UK_hᵀ q_nope [rank]; the keys then go by in blocks of kKeyBlock from
//     key 0, each block scored by every (row, head) of the task before the next one (so the
//     latents come from memory once for the whole group), online softmax into
//     o_lat [rank]; out = W_UV_h o_lat / l.
//   * kExpanded (prefill): a task = (sequence, head): that head's keys and values for the
//     whole history, kv [kv_len, nope + v] = latents[:, :rank] · W_hᵀ (thread scratch), then
//     flash attention of the sequence's query rows (blocks of kQueryBlock) over them.
// The weight: dense f32 w_kv_b is read as it is; the split form (ops_moe.h) with both halves
// Q8_0 is read as stored by the absorbed form (mla_q8.h: the same bits as over its f32
// dequantization); anything else becomes f32 on each call (KvBF32).
// Batch invariance: a row's output depends only on its q, its sequence's latents and w_kv_b.
// Every dot product has one summation order (DotRows, online_softmax.h), key blocks start at
// key 0 whatever the split, and the task splits (head groups, query blocks) only schedule.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/quant.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/mla_q8.h"
#include "kernels/cpu/online_softmax.h"
#include "kernels/kernel_util.h"
#include "kernels/ops.h"
#include "kernels/ref/moe_kernels.h"

namespace pg::ops::cpu {
namespace {

constexpr int64_t kKeyBlock = 64;    // keys per online-softmax step (latents: 64 x 576 f32)
constexpr int64_t kQueryBlock = 16;  // query rows per expanded block / absorbed task

// The op's sizes.
struct Dims {
  int64_t heads, qk, rope, nope, vd, rank, latent, per_head;  // per_head = nope + vd
  float scale;
  explicit Dims(const MlaAttentionParams& p)
      : heads(p.q.dim(1)),
        qk(p.q.dim(2)),
        rope(p.rope_dim),
        nope(qk - rope),
        vd(p.out.dim(2)),
        rank(p.kv_lora_rank),
        latent(rank + rope),
        per_head(nope + vd),
        scale(p.scale > 0 ? p.scale : float(1.0 / std::sqrt(double(qk)))) {}
};

// One query row of a flash pass: its query parts (content qc, rope qr), position (it sees
// keys [0, pos]) and running softmax state over `acc`.
struct FlashRow {
  const float* qc;
  const float* qr;
  int64_t pos;
  float m, l;
  float* acc;
};

// Keys t of a flash pass: content part content + t * content_stride (content_dim values),
// rope part rope + t * latent (rope_dim), value value + t * value_stride (value_dim).
struct FlashKeys {
  const float* content;
  int64_t content_stride, content_dim;
  const float* rope;
  int64_t latent, rope_dim;
  const float* value;
  int64_t value_stride, value_dim;
};

// Attends every row over its keys [0, pos], key block by key block (each block's keys are
// scored by all rows before the next block): afterwards row.acc / row.l is the output.
PG_TARGET_AVX2 void Flash(const FlashKeys& k, std::vector<FlashRow>& rows, float scale) {
  float scores[kKeyBlock], rope_part[kKeyBlock];
  int64_t hi = 0;
  for (const FlashRow& r : rows) hi = std::max(hi, r.pos);
  for (int64_t t0 = 0; t0 <= hi; t0 += kKeyBlock) {
    const int64_t nk = std::min(kKeyBlock, hi + 1 - t0);
    for (FlashRow& r : rows) {
      const int64_t j_end = std::min(nk, r.pos + 1 - t0);
      if (j_end <= 0) continue;
      DotMany(
          r.qc, [&](int64_t j) { return k.content + (t0 + j) * k.content_stride; }, j_end,
          k.content_dim, scores);
      DotMany(
          r.qr, [&](int64_t j) { return k.rope + (t0 + j) * k.latent; }, j_end, k.rope_dim,
          rope_part);
      float bmax = -INFINITY;
      for (int64_t j = 0; j < j_end; ++j) {
        scores[j] = (scores[j] + rope_part[j]) * scale;
        bmax = std::max(bmax, scores[j]);
      }
      FoldSoftmaxBlock(
          scores, 0, j_end, bmax, [&](int64_t j) { return k.value + (t0 + j) * k.value_stride; },
          k.value_dim, r.m, r.l, r.acc);
    }
  }
}

// Whether the absorbed form reads the weight as stored Q8_0 (the split form, both halves).
bool SplitQ8(const MlaAttentionParams& p) {
  return !p.w_kv_b.data && p.w_k_b.dtype == DType::kQ8_0 && p.w_v_b.dtype == DType::kQ8_0;
}

// The weight as f32 rows [heads * per_head, rank]: w_kv_b's own data when f32 and dense (the
// models' host forwards pass it so: CpuPackedWeights::AddDenseF32), else dequantized into
// `scratch` (heads in parallel, ref::MlaHeadWeightF32) on this call.
const float* KvBF32(const MlaAttentionParams& p, const Dims& d, std::vector<float>& scratch) {
  const TensorView& w = p.w_kv_b;
  if (w.data && w.dtype == DType::kF32 && w.strides[0] == d.rank) return w.as<float>();
  scratch.resize(size_t(d.heads * d.per_head * d.rank));
  ThreadPool::Default().ParallelFor(d.heads, [&](int64_t h0, int64_t h1) {
    for (int64_t h = h0; h < h1; ++h)
      ref::MlaHeadWeightF32(p, h, scratch.data() + h * d.per_head * d.rank);
  });
  return scratch.data();
}

// Every sequence's latent rows, f32 [kv_len, latent] each at base[s] in `out`. Element i of
// a row lives in k_cache for i < half, else in v_cache (ops_moe.h), times that half's scale.
void GatherLatents(const MlaAttentionParams& p, int64_t latent, std::vector<float>& out,
                   std::vector<int64_t>& base) {
  const AttentionBatch& b = *p.batch;
  const KvCacheView& c = p.cache;
  const int64_t half = (latent + 1) / 2;
  base.assign(size_t(b.num_seqs) + 1, 0);
  for (int s = 0; s < b.num_seqs; ++s) base[size_t(s) + 1] = base[size_t(s)] + b.kv_len[size_t(s)];
  out.resize(size_t(base.back() * latent));
  ThreadPool::Default().ParallelFor(
      base.back(),
      [&](int64_t i0, int64_t i1) {
        int s = 0;
        for (int64_t i = i0; i < i1; ++i) {
          while (base[size_t(s) + 1] <= i) ++s;
          const int64_t t = i - base[size_t(s)];
          const int64_t off =
              detail::CacheOffset(c.k_cache, detail::PageOf(b, s, t), t % b.page_size, 0);
          float* row = out.data() + i * latent;
          for (int64_t e = 0; e < half; ++e)
            row[e] = detail::LoadScalar(c.k_cache.dtype, c.k_cache.data, off + e) * c.k_scale;
          for (int64_t e = half; e < latent; ++e)
            row[e] =
                detail::LoadScalar(c.v_cache.dtype, c.v_cache.data, off + e - half) * c.v_scale;
        }
      },
      16);
}

// The shared inputs of one call's tasks.
struct Call {
  const MlaAttentionParams& p;
  Dims d;
  const float* w;       // w_kv_b f32 [heads * per_head, rank]; null: SplitQ8 (absorbed only)
  const float* lat;     // GatherLatents rows
  const int64_t* base;  // sequence s's rows start at lat + base[s] * latent
  const float* WRow(int64_t h, int64_t r) const { return w + (h * d.per_head + r) * d.rank; }
  // SplitQ8: row r of w_k_b[h] (nope values) / w_v_b[h] (rank values) as stored.
  const quant::BlockQ8_0* KbRow(int64_t h, int64_t c) const {
    return reinterpret_cast<const quant::BlockQ8_0*>(detail::HeadRow(p.w_k_b, h, c));
  }
  const quant::BlockQ8_0* VbRow(int64_t h, int64_t j) const {
    return reinterpret_cast<const quant::BlockQ8_0*>(detail::HeadRow(p.w_v_b, h, j));
  }
  const float* Q(int64_t row, int64_t h) const {
    return detail::RowF32(p.q, row) + h * p.q.strides[1];
  }
  float* Out(int64_t row, int64_t h) const {
    return detail::RowF32(p.out, row) + h * p.out.strides[1];
  }
};

struct Task {
  int seq;
  int64_t q_begin, q_end, h_begin, h_end;  // query indices within the sequence, heads
};

struct Scratch {
  std::vector<float> q_abs, acc, kv;
  std::vector<FlashRow> rows;
  std::vector<const float*> q;  // SplitQ8: one head's queries and their q_abs rows
  std::vector<float*> q_abs_rows;
};

// kAbsorbed: the rows (query, head) of the task attend over the latents themselves.
PG_TARGET_AVX2 void RunAbsorbed(const Call& c, const Task& task, Scratch& ws) {
  const AttentionBatch& b = *c.p.batch;
  const Dims& d = c.d;
  const int64_t first = b.kv_len[size_t(task.seq)] - b.q_len[size_t(task.seq)];
  const int64_t heads = task.h_end - task.h_begin, n = (task.q_end - task.q_begin) * heads;
  ws.q_abs.assign(size_t(n * d.rank), 0.0f);
  ws.acc.assign(size_t(n * d.rank), 0.0f);
  ws.rows.clear();
  for (int64_t qi = task.q_begin; qi < task.q_end; ++qi)
    for (int64_t h = task.h_begin; h < task.h_end; ++h) {
      const float* q = c.Q(b.q_start[size_t(task.seq)] + qi, h);
      float* q_abs = ws.q_abs.data() + int64_t(ws.rows.size()) * d.rank;
      if (c.w)
        for (int64_t e = 0; e < d.nope; ++e)  // q_abs = Σ_e q[e] W_UK_h[e, :]
          simd::ScaleAxpy(q_abs, 1.0f, q[e], c.WRow(h, e), d.rank);
      ws.rows.push_back({q_abs, q + d.nope, first + qi, -INFINITY, 0.0f,
                         ws.acc.data() + int64_t(ws.rows.size()) * d.rank});
    }
  if (!c.w)  // the same sums from the stored Q8_0 W_UK_hᵀ, each head's queries together
    for (int64_t h = task.h_begin; h < task.h_end; ++h) {
      ws.q.clear();
      ws.q_abs_rows.clear();
      for (int64_t qi = task.q_begin; qi < task.q_end; ++qi) {  // row (qi, h) of ws.rows
        ws.q.push_back(c.Q(b.q_start[size_t(task.seq)] + qi, h));
        const int64_t i = (qi - task.q_begin) * heads + (h - task.h_begin);
        ws.q_abs_rows.push_back(ws.q_abs.data() + i * d.rank);
      }
      AbsorbQueriesQ8({c.KbRow(h, 0), d.nope, d.rank, ws.q.data(), ws.q_abs_rows.data(),
                       int64_t(ws.q.size())});
    }
  const float* lat = c.lat + c.base[task.seq] * d.latent;
  Flash({lat, d.latent, d.rank, lat + d.rank, d.latent, d.rope, lat, d.latent, d.rank}, ws.rows,
        d.scale);
  size_t r = 0;
  for (int64_t qi = task.q_begin; qi < task.q_end; ++qi)
    for (int64_t h = task.h_begin; h < task.h_end; ++h, ++r) {
      FlashRow& row = ws.rows[r];
      const float inv = 1.0f / row.l;
      for (int64_t e = 0; e < d.rank; ++e) row.acc[e] *= inv;
      float* out = c.Out(b.q_start[size_t(task.seq)] + qi, h);  // out = W_UV_h o_lat
      if (c.w)
        DotMany(row.acc, [&](int64_t j) { return c.WRow(h, d.nope + j); }, d.vd, d.rank, out);
      else
        DotManyQ8(row.acc, [&](int64_t j) { return c.VbRow(h, j); }, d.vd, d.rank, out);
    }
}

// kExpanded: the head's keys / values for the sequence's history, then its query rows.
PG_TARGET_AVX2 void RunExpanded(const Call& c, const Task& task, Scratch& ws) {
  const AttentionBatch& b = *c.p.batch;
  const Dims& d = c.d;
  const int s = task.seq;
  const int64_t kv_len = b.kv_len[size_t(s)], q_len = b.q_len[size_t(s)], h = task.h_begin;
  const float* lat = c.lat + c.base[s] * d.latent;
  ws.kv.resize(size_t(kv_len * d.per_head));
  std::vector<float> col(4);
  // kv[t, r] = W_h[r, :] · latent_t[:rank], four tokens per weight row (DotRows).
  for (int64_t t = 0; t < kv_len; t += 4) {
    const int64_t nt = std::min<int64_t>(4, kv_len - t);
    for (int64_t r = 0; r < d.per_head; ++r) {
      DotMany(
          c.WRow(h, r), [&](int64_t i) { return lat + (t + i) * d.latent; }, nt, d.rank,
          col.data());
      for (int64_t i = 0; i < nt; ++i) ws.kv[size_t((t + i) * d.per_head + r)] = col[size_t(i)];
    }
  }
  const FlashKeys keys{ws.kv.data(),          d.per_head, d.nope, lat + d.rank, d.latent, d.rope,
                       ws.kv.data() + d.nope, d.per_head, d.vd};
  for (int64_t q0 = 0; q0 < q_len; q0 += kQueryBlock) {
    const int64_t q1 = std::min(q_len, q0 + kQueryBlock);
    ws.acc.assign(size_t((q1 - q0) * d.vd), 0.0f);
    ws.rows.clear();
    for (int64_t qi = q0; qi < q1; ++qi) {
      const float* q = c.Q(b.q_start[size_t(s)] + qi, h);
      ws.rows.push_back(
          {q, q + d.nope, kv_len - q_len + qi, -INFINITY, 0.0f, ws.acc.data() + (qi - q0) * d.vd});
    }
    Flash(keys, ws.rows, d.scale);
    for (int64_t qi = q0; qi < q1; ++qi) {
      const FlashRow& row = ws.rows[size_t(qi - q0)];
      float* o = c.Out(b.q_start[size_t(s)] + qi, h);
      const float inv = 1.0f / row.l;
      for (int64_t e = 0; e < d.vd; ++e) o[e] = row.acc[e] * inv;
    }
  }
}

// Absorbed tasks: per sequence, query blocks x head groups, the groups sized so the pool has
// about two tasks a thread (a group's latents are read once for all its heads).
void AbsorbedTasks(const AttentionBatch& b, int64_t heads, std::vector<Task>& tasks) {
  int64_t qblocks = 0;
  for (int s = 0; s < b.num_seqs; ++s)
    qblocks += (b.q_len[size_t(s)] + kQueryBlock - 1) / kQueryBlock;
  const int64_t want = 2 * int64_t(ThreadPool::Default().num_threads());
  const int64_t groups =
      std::clamp<int64_t>((want + qblocks - 1) / std::max<int64_t>(qblocks, 1), 1, heads);
  const int64_t per = (heads + groups - 1) / groups;
  for (int s = 0; s < b.num_seqs; ++s)
    for (int64_t q0 = 0; q0 < b.q_len[size_t(s)]; q0 += kQueryBlock)
      for (int64_t h0 = 0; h0 < heads; h0 += per)
        tasks.push_back({s, q0, std::min<int64_t>(b.q_len[size_t(s)], q0 + kQueryBlock), h0,
                         std::min(heads, h0 + per)});
}

void CpuMlaAttention(const MlaAttentionParams& p) {
  if (p.write) ops::MlaCacheWrite(*p.write);  // the new tokens' latents first (ops_moe.h)
  const Dims d(p);
  if (p.positions.data) {  // q's rope dims rotated in place: Rope on the shifted view
    TensorView v = p.q;
    v.data = p.q.as<float>() + d.nope;
    RopeConfig cfg = p.rope;
    cfg.rotary_dim = int(d.rope);
    ops::Rope({.x = v, .positions = p.positions, .config = cfg});
  }
  const AttentionBatch& b = *p.batch;
  thread_local std::vector<float> w_scratch, lat;
  thread_local std::vector<int64_t> base;
  thread_local std::vector<Task> tasks;
  GatherLatents(p, d.latent, lat, base);
  const bool absorbed = p.mode == MlaMode::kAbsorbed;
  const Call c{p, d, absorbed && SplitQ8(p) ? nullptr : KvBF32(p, d, w_scratch), lat.data(),
               base.data()};
  tasks.clear();
  if (absorbed)
    AbsorbedTasks(b, d.heads, tasks);
  else
    for (int s = 0; s < b.num_seqs; ++s)
      for (int64_t h = 0; h < d.heads; ++h)
        if (b.q_len[size_t(s)] > 0) tasks.push_back({s, 0, b.q_len[size_t(s)], h, h + 1});
  const std::vector<Task>& all = tasks;
  ThreadPool::Default().ParallelFor(int64_t(all.size()), [&](int64_t i0, int64_t i1) {
    thread_local Scratch ws;
    for (int64_t i = i0; i < i1; ++i) {
      if (absorbed)
        RunAbsorbed(c, all[size_t(i)], ws);
      else
        RunExpanded(c, all[size_t(i)], ws);
    }
  });
}

bool Supports(const MlaAttentionParams& p) {
  const bool weight = p.w_kv_b.data ? quant::CanDequantize(p.w_kv_b.dtype)
                                    : quant::CanDequantize(p.w_k_b.dtype) &&
                                          quant::CanDequantize(p.w_v_b.dtype);
  return Features().avx2 && weight && p.q.strides[2] == 1 && p.out.strides[2] == 1;
}

}  // namespace

void RegisterMla(Registry& r) {
  if (!Features().avx2) return;  // registered only where it runs (RegisterElementwise)
  r.Register(KernelImpl<MlaAttentionParams>{"cpu_avx2", Device::kCpu, kPriorityCpuAvx2,
                                            &Supports, &CpuMlaAttention});
}

}  // namespace pg::ops::cpu
