// Paged attention on the CPU, flash style: each task owns (sequence, kv head, block of up to
// kQueryBlock query tokens) and streams that sequence's keys in blocks of kKeyBlock,
// keeping a running max / denominator / output per (query, head) (online softmax), so no
// [q, kv] score matrix is ever materialised. The query heads sharing a kv head (GQA) are
// processed together so every K/V row loaded serves all of them. f32 cache only.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/online_softmax.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/kernel_util.h"

namespace pg::ops::cpu {
namespace {

constexpr int64_t kQueryBlock = 16;  // query tokens per task
constexpr int64_t kKeyBlock = 64;    // keys scored before one rescale of the accumulators

struct Task {
  int seq;
  int64_t q_begin, q_end;  // query index range within the sequence's new tokens
  int64_t kv_head;
};

struct TaskScratch {
  std::vector<float> m, l, acc, scores;       // per (query, head): running max, sum, output
  std::vector<const float*> krows, vrows;     // key block row pointers
};

PG_TARGET_AVX2 void RunTask(const AttentionParams& p, const Task& task, TaskScratch& ws) {
  const AttentionBatch& b = *p.batch;
  const int64_t d = p.q.dim(2), heads = p.q.dim(1);
  const int64_t kvh = p.cache.k_cache.dim(2), group = heads / kvh;
  const float scale = (p.scale > 0 ? p.scale : float(1.0 / std::sqrt(double(d)))) * p.cache.k_scale;
  const float cap = p.logit_softcap;
  const int s = task.seq;
  const int64_t kv_len = b.kv_len[size_t(s)], q_len = b.q_len[size_t(s)];
  const int64_t first_pos = kv_len - q_len;  // position of query index 0
  const int64_t nq = task.q_end - task.q_begin, rows = nq * group;

  ws.m.assign(size_t(rows), -INFINITY);
  ws.l.assign(size_t(rows), 0.0f);
  ws.acc.assign(size_t(rows * d), 0.0f);
  ws.scores.resize(size_t(kKeyBlock));
  ws.krows.resize(size_t(kKeyBlock));
  ws.vrows.resize(size_t(kKeyBlock));

  // Keys any query of this block may see: [lo_all, hi_all].
  const int64_t hi_all = first_pos + task.q_end - 1;
  const int64_t win = p.sliding_window;
  const int64_t lo_all = win > 0 ? std::max<int64_t>(0, first_pos + task.q_begin - win + 1) : 0;
  const float* kbase = p.cache.k_cache.as<float>();
  const float* vbase = p.cache.v_cache.as<float>();

  for (int64_t t0 = lo_all; t0 <= hi_all; t0 += kKeyBlock) {
    const int64_t nk = std::min(kKeyBlock, hi_all + 1 - t0);
    for (int64_t j = 0; j < nk; ++j) {
      const int64_t t = t0 + j;
      const int64_t off = detail::CacheOffset(p.cache.k_cache, detail::PageOf(b, s, t),
                                              t % b.page_size, task.kv_head);
      ws.krows[size_t(j)] = kbase + off;
      ws.vrows[size_t(j)] = vbase + off;
    }
    for (int64_t qi = 0; qi < nq; ++qi) {
      const int64_t pos = first_pos + task.q_begin + qi;
      // This query sees keys [lo, pos]; the block is [t0, t0 + nk).
      const int64_t lo = win > 0 ? std::max<int64_t>(0, pos - win + 1) : 0;
      const int64_t j_begin = std::max<int64_t>(0, lo - t0);
      const int64_t j_end = std::min<int64_t>(nk, pos + 1 - t0);
      if (j_begin >= j_end) continue;
      const int64_t row = b.q_start[size_t(s)] + task.q_begin + qi;
      for (int64_t hg = 0; hg < group; ++hg) {
        const int64_t h = task.kv_head * group + hg;
        const float* q = detail::RowF32(p.q, row) + h * d;
        const size_t r = size_t(qi * group + hg);
        float bmax = -INFINITY;
        for (int64_t j = j_begin; j < j_end; ++j) {
          float x = simd::Dot(q, ws.krows[size_t(j)], d) * scale;
          if (cap > 0) x = cap * std::tanh(x / cap);
          ws.scores[size_t(j)] = x;
          bmax = std::max(bmax, x);
        }
        FoldSoftmaxBlock(
            ws.scores.data(), j_begin, j_end, bmax,
            [&](int64_t jj) { return ws.vrows[size_t(jj)]; }, d, ws.m[r], ws.l[r],
            &ws.acc[r * size_t(d)]);
      }
    }
  }
  for (int64_t qi = 0; qi < nq; ++qi) {
    const int64_t row = b.q_start[size_t(s)] + task.q_begin + qi;
    for (int64_t hg = 0; hg < group; ++hg) {
      const int64_t h = task.kv_head * group + hg;
      const size_t r = size_t(qi * group + hg);
      const float inv = p.cache.v_scale / ws.l[r];
      float* o = detail::RowF32(p.out, row) + h * d;
      const float* acc = &ws.acc[r * size_t(d)];
      for (int64_t e = 0; e < d; ++e) o[e] = acc[e] * inv;
    }
  }
}

void CpuAttention(const AttentionParams& p) {
  const AttentionBatch& b = *p.batch;
  const int64_t kvh = p.cache.k_cache.dim(2);
  thread_local std::vector<Task> tasks;
  tasks.clear();
  for (int s = 0; s < b.num_seqs; ++s)
    for (int64_t q0 = 0; q0 < b.q_len[size_t(s)]; q0 += kQueryBlock)
      for (int64_t g = 0; g < kvh; ++g)
        tasks.push_back({s, q0, std::min<int64_t>(b.q_len[size_t(s)], q0 + kQueryBlock), g});
  const std::vector<Task>& all = tasks;
  ThreadPool::Default().ParallelFor(int64_t(all.size()), [&](int64_t i0, int64_t i1) {
    thread_local TaskScratch ws;
    for (int64_t i = i0; i < i1; ++i) RunTask(p, all[size_t(i)], ws);
  });
}

}  // namespace

void RegisterAttention(Registry& r) {
  if (!Features().avx2) return;  // registered only where it runs (RegisterElementwise)
  r.Register(KernelImpl<AttentionParams>{
      "cpu_avx2", Device::kCpu, kPriorityCpuAvx2,
      [](const AttentionParams& p) {
        return Features().avx2 && p.cache.k_cache.dtype == DType::kF32;
      },
      &CpuAttention});
}

}  // namespace pg::ops::cpu
