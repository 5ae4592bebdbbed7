#include "bench/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace pg::bench {

ProgressBar::ProgressBar(bool enabled, bool force)
    : enabled_(enabled && (force || isatty(STDERR_FILENO) == 1)) {}

void ProgressBar::Start(const std::string& label, int64_t total) {
  std::lock_guard lock(mu_);
  label_ = label;
  total_ = total;
  done_ = failed_ = 0;
  start_ = std::chrono::steady_clock::now();
  last_draw_ = {};
  DrawLocked(false);
}

void ProgressBar::Advance(int64_t done, int64_t failed) {
  std::lock_guard lock(mu_);
  done_ += done;
  failed_ += failed;
  DrawLocked(false);
}

void ProgressBar::Finish() {
  std::lock_guard lock(mu_);
  DrawLocked(true);
}

std::string ProgressBar::Render(int width) const {
  std::lock_guard lock(mu_);
  return RenderLocked(width);
}

std::string ProgressBar::RenderLocked(int width) const {
  const double frac =
      total_ > 0 ? std::clamp(static_cast<double>(done_) / static_cast<double>(total_), 0.0, 1.0)
                 : 0.0;
  const int filled = static_cast<int>(frac * width + 0.5);
  const double elapsed_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  // Remaining time at the average pace so far; negative means unknown (nothing done yet).
  double eta_s = -1.0;
  if (done_ >= total_) eta_s = 0.0;
  else if (done_ > 0) eta_s = elapsed_s / static_cast<double>(done_) * static_cast<double>(total_ - done_);
  const std::string eta = eta_s < 0 ? std::string("?") : fmt::format("{:.0f}s", eta_s);
  return fmt::format("{:<6} [{}{}] {}/{} turns  {} failed  {:.1f}s elapsed  eta {}", label_,
                     std::string(static_cast<size_t>(filled), '#'),
                     std::string(static_cast<size_t>(width - filled), '.'), done_, total_, failed_,
                     elapsed_s, eta);
}

void ProgressBar::DrawLocked(bool final_draw) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (!final_draw && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  const std::string line = RenderLocked(30);
  std::fprintf(stderr, "\r%s\033[K%s", line.c_str(), final_draw ? "\n" : "");
  std::fflush(stderr);
}

}  // namespace pg::bench
