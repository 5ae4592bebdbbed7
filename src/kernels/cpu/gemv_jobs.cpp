#include "kernels/cpu/gemv_jobs.h"

#include <algorithm>
#include <vector>

#include "core/thread_pool.h"

namespace pg::ops::cpu {

namespace {
// Row groups per parallel chunk: keeps small matrices on one thread (wake-up cost).
constexpr int64_t kMinGroupsPerChunk = 8;
}  // namespace

// A chunk [g0, g1) of the concatenated groups may span jobs (a prefix sum finds the first).
void RunGemvJobs(std::span<const MatmulParams> ps, const GemvFamily& family) {
  if (ps.empty()) return;
  thread_local std::vector<uint8_t> arena;
  thread_local std::vector<GemvJob> jobs;
  thread_local std::vector<int64_t> first;  // first[i] = groups before job i
  int64_t bytes = 0;
  for (const MatmulParams& p : ps) bytes += family.act_bytes(p);
  if (int64_t(arena.size()) < bytes + 64) arena.resize(size_t(bytes + 64));
  uint8_t* at = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(arena.data()) + 63) & ~uintptr_t(63));
  jobs.clear();
  first.clear();
  int64_t total = 0;
  for (const MatmulParams& p : ps) {
    jobs.push_back(family.prepare(p, at));
    at += family.act_bytes(p);
    first.push_back(total);
    total += jobs.back().groups;
  }
  const GemvJob* js = jobs.data();
  const int64_t* fs = first.data();
  const int64_t nj = int64_t(jobs.size());
  ThreadPool::Default().ParallelFor(total, [js, fs, nj](int64_t g0, int64_t g1) {
    int64_t i = int64_t(std::upper_bound(fs, fs + nj, g0) - fs) - 1;
    for (int64_t g = g0; g < g1; ++g) {
      while (i + 1 < nj && g >= fs[i + 1]) ++i;
      js[i].run(js[i], g - fs[i]);
    }
  }, kMinGroupsPerChunk);
}

}  // namespace pg::ops::cpu
