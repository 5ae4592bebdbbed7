// A fixed pool of worker threads for data-parallel loops (CPU kernels).
//
// ParallelFor(n, fn) splits [0, n) into contiguous chunks, runs fn(begin, end) on the
// workers and the calling thread, and returns when all are done. Not re-entrant: a
// ParallelFor inside fn (or one issued from another thread while the pool is busy) runs
// serially on the calling thread.
//
// Latency: decode issues a few hundred small loops per token (~10-100 µs each), so waking
// workers through a condition variable (~10-20 µs) would dominate. Workers therefore spin
// on an atomic job counter for kSpinUs after their last job (so back-to-back loops start in
// well under a microsecond), then sleep on a futex until the next job.
// Chunks are claimed dynamically (atomic counter), so a worker that is late or descheduled
// on a busy machine does not hold the loop up: the caller takes its chunks.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace pg {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);  // total threads including the caller; >= 1
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // fn(begin, end) over [0, n) in chunks of at least `min_chunk` items (the last one may be
  // shorter). Returns after every chunk has run; fn may run on any pool thread.
  void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                   int64_t min_chunk = 1);

  // Process-wide pool used by CPU kernels; sized by SetDefaultThreads or hardware threads.
  static ThreadPool& Default();
  static void SetDefaultThreads(int num_threads);  // call before first Default()

 private:
  void WorkerLoop();
  // Claims and runs chunks of the open job until none is left.
  void RunChunks();

  // Cache-line separated hot atomics: claimed by every thread per chunk.
  struct alignas(64) Counter {
    std::atomic<int64_t> value{0};
  };

  int num_threads_;
  std::vector<std::thread> workers_;

  // The job. Written by the caller only while no worker is inside it (active_ == 0 and
  // open_ == false), read by workers only between active_++ and active_-- while open_.
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t job_chunk_ = 0;
  int64_t num_chunks_ = 0;

  Counter next_chunk_;   // next chunk index to claim
  Counter chunks_done_;  // chunks finished
  alignas(64) std::atomic<uint32_t> generation_{0};  // bumped per job; futex word
  std::atomic<bool> open_{false};                     // a job is being worked on
  std::atomic<int> active_{0};                        // workers inside the open job
  std::atomic<int> sleepers_{0};                      // workers asleep on the generation_ futex
  std::atomic<bool> busy_{false};                     // a ParallelFor is in progress
  std::atomic<bool> stop_{false};
};

}  // namespace pg
