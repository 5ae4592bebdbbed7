// A fixed pool of worker threads for data-parallel loops (CPU kernels).
//
// ParallelFor(n, fn) splits [0, n) into contiguous chunks, runs fn(begin, end) on the
// workers and the calling thread, and returns when all are done. Not re-entrant: a
// ParallelFor inside fn runs serially on the calling thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
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

  // fn(begin, end) over [0, n) in chunks of at least `min_chunk` items.
  void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                   int64_t min_chunk = 1);

  // Process-wide pool used by CPU kernels; sized by SetDefaultThreads or hardware threads.
  static ThreadPool& Default();
  static void SetDefaultThreads(int num_threads);  // call before first Default()

 private:
  void WorkerLoop(int worker_index);

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t job_chunk_ = 0;
  int num_chunks_ = 0;
  int next_chunk_ = 0;
  int chunks_done_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  bool busy_ = false;
};

}  // namespace pg
