#include "core/thread_pool.h"

#include <algorithm>
#include <atomic>

namespace pg {
namespace {
std::atomic<int> g_default_threads{0};
}

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::WorkerLoop(int) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    while (next_chunk_ < num_chunks_) {
      int c = next_chunk_++;
      const auto* job = job_;
      int64_t b = c * job_chunk_, e = std::min(job_n_, b + job_chunk_);
      lock.unlock();
      (*job)(b, e);
      lock.lock();
      if (++chunks_done_ == num_chunks_) done_cv_.notify_all();
    }
  }
}

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                             int64_t min_chunk) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(1, min_chunk);
  std::unique_lock<std::mutex> lock(mu_);
  if (busy_ || num_threads_ == 1 || n <= min_chunk) {
    lock.unlock();
    fn(0, n);
    return;
  }
  busy_ = true;
  int64_t chunk = std::max(min_chunk, (n + num_threads_ - 1) / num_threads_);
  job_ = &fn;
  job_n_ = n;
  job_chunk_ = chunk;
  num_chunks_ = int((n + chunk - 1) / chunk);
  next_chunk_ = 0;
  chunks_done_ = 0;
  ++generation_;
  work_cv_.notify_all();
  while (next_chunk_ < num_chunks_) {
    int c = next_chunk_++;
    int64_t b = c * chunk, e = std::min(n, b + chunk);
    lock.unlock();
    fn(b, e);
    lock.lock();
    ++chunks_done_;
  }
  done_cv_.wait(lock, [&] { return chunks_done_ == num_chunks_; });
  job_ = nullptr;
  busy_ = false;
}

void ThreadPool::SetDefaultThreads(int num_threads) { g_default_threads = num_threads; }

ThreadPool& ThreadPool::Default() {
  static ThreadPool pool([] {
    int n = g_default_threads.load();
    if (n <= 0) n = int(std::max(1u, std::thread::hardware_concurrency()));
    return n;
  }());
  return pool;
}

}  // namespace pg
