// A one-line progress bar on stderr, redrawn at most every 100 ms from any worker thread.
// Drawn only when stderr is a terminal (or when forced), so logs and CI output stay clean.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace pg::bench {

class ProgressBar {
 public:
  // enabled=false draws nothing; force=true draws even when stderr is not a terminal.
  explicit ProgressBar(bool enabled, bool force = false);
  // Starts a phase of `total` units (turns) with a label such as "c=4".
  void Start(const std::string& label, int64_t total);
  // Marks `done` units finished, `failed` of which failed. Thread-safe.
  void Advance(int64_t done, int64_t failed = 0);
  // Ends the phase: draws the final state and a newline.
  void Finish();
  // The line as it would be drawn now (for tests); width is the bar's cell count.
  std::string Render(int width = 30) const;

 private:
  void DrawLocked(bool final_draw);
  std::string RenderLocked(int width) const;

  bool enabled_;
  mutable std::mutex mu_;
  std::string label_;
  int64_t total_ = 0, done_ = 0, failed_ = 0;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace pg::bench
