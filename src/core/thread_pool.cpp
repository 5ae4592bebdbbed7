#include "core/thread_pool.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PG_CPU_RELAX() _mm_pause()
#else
#define PG_CPU_RELAX() std::this_thread::yield()
#endif

namespace pg {
namespace {

std::atomic<int> g_default_threads{0};

// How long an idle worker spins before it sleeps, and how many chunks per thread a loop is
// cut into (more chunks: better balance when a thread is late; fewer: less claiming).
constexpr auto kSpinUs = std::chrono::microseconds(100);
constexpr int64_t kChunksPerThread = 4;
constexpr int kPollsPerYield = 256;
// The caller, waiting for the last chunks, yields the CPU after this many polls (so a
// descheduled worker gets to run on an oversubscribed machine).
constexpr int kPollsBeforeYield = 4096;

using Clock = std::chrono::steady_clock;

// Futex on the generation word (std::atomic<uint32_t> has the layout of uint32_t). Used
// directly: with libstdc++ 12, atomic::wait/notify_all left a worker asleep at shutdown.
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
}
void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
          nullptr, 0);
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  FutexWakeAll(&generation_);
  for (auto& t : workers_) t.join();
}

void ThreadPool::RunChunks() {
  for (;;) {
    const int64_t c = next_chunk_.value.fetch_add(1, std::memory_order_relaxed);
    if (c >= num_chunks_) return;
    const int64_t b = c * job_chunk_, e = std::min(job_n_, b + job_chunk_);
    (*job_)(b, e);
    chunks_done_.value.fetch_add(1, std::memory_order_release);
  }
}

void ThreadPool::WorkerLoop() {
  uint32_t seen = generation_.load();
  for (;;) {
    // Wait for a new generation: spin first, then sleep on the futex.
    // `seen` may already be the destructor's final bump (read after the job closed), so
    // stop_ is checked in the wait loop too; the destructor sets it before bumping.
    if (generation_.load(std::memory_order_acquire) == seen) {
      const auto deadline = Clock::now() + kSpinUs;
      int polls = 0;
      while (generation_.load(std::memory_order_acquire) == seen && !stop_.load()) {
        PG_CPU_RELAX();
        ++polls;
        // On a loaded machine an idle spinner would take the core from runnable threads
        // (often our own caller): offer it up now and then.
        if (polls % kPollsPerYield == 0) sched_yield();
        if (polls % 64 == 0 && Clock::now() > deadline) {
          sleepers_.fetch_add(1);
          FutexWait(&generation_, seen);  // returns at once if generation_ != seen
          sleepers_.fetch_sub(1);
        }
      }
    }
    if (stop_.load()) return;
    // Enter the job. Once active_ is raised the caller cannot close the job and rewrite its
    // fields until we leave; if it closed it before our increment we see open_ == false.
    active_.fetch_add(1);
    const uint32_t gen = generation_.load();
    if (open_.load()) RunChunks();
    active_.fetch_sub(1);
    seen = gen;
  }
}

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                             int64_t min_chunk) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(1, min_chunk);
  if (num_threads_ == 1 || n <= min_chunk || busy_.exchange(true)) {
    fn(0, n);
    return;
  }
  const int64_t chunk = std::max(min_chunk, (n + num_threads_ * kChunksPerThread - 1) /
                                                (num_threads_ * kChunksPerThread));
  // No worker is inside a job here (the previous call waited for active_ == 0 after
  // closing it), so the fields can be written plainly; open_/generation_ publish them.
  job_ = &fn;
  job_n_ = n;
  job_chunk_ = chunk;
  num_chunks_ = (n + chunk - 1) / chunk;
  next_chunk_.value.store(0, std::memory_order_relaxed);
  chunks_done_.value.store(0, std::memory_order_relaxed);
  open_.store(true);
  generation_.fetch_add(1);
  if (sleepers_.load() > 0) FutexWakeAll(&generation_);

  const int64_t total = num_chunks_;
  RunChunks();
  for (int polls = 0; chunks_done_.value.load(std::memory_order_acquire) < total;) {
    if (++polls < kPollsBeforeYield) PG_CPU_RELAX();
    else sched_yield();
  }
  open_.store(false);
  for (int polls = 0; active_.load() != 0;) {
    if (++polls < kPollsBeforeYield) PG_CPU_RELAX();
    else sched_yield();
  }
  job_ = nullptr;
  busy_.store(false, std::memory_order_release);
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
