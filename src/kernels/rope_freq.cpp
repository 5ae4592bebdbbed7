#include "kernels/rope_freq.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace pg::ops {
namespace {

// HF: base ** (torch.arange(0, dim, 2).float() / dim), in float32.
std::vector<float> PosFreqs(float base, int dim) {
  std::vector<float> f(size_t(dim / 2));
  for (int i = 0; i < dim / 2; ++i) f[size_t(i)] = std::pow(base, float(2 * i) / float(dim));
  return f;
}

// YaRN helpers, in double as HF (python floats).
double CorrectionDim(double num_rotations, int dim, double base, double max_pos) {
  return (dim * std::log(max_pos / (num_rotations * 2 * std::numbers::pi))) /
         (2 * std::log(base));
}

double YarnMscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

}  // namespace

std::vector<float> RopeInvFreq(const RopeConfig& c, int dim) {
  std::vector<float> pos = PosFreqs(c.theta, dim);
  std::vector<float> inv(pos.size());
  for (size_t i = 0; i < pos.size(); ++i) inv[i] = 1.0f / pos[i];
  switch (c.scaling) {
    case RopeScaling::kNone:
      return inv;
    case RopeScaling::kLinear:
      for (float& f : inv) f /= c.factor;
      return inv;
    case RopeScaling::kLlama3: {
      // _compute_llama3_parameters: wavelengths longer than old_ctx/low are divided by
      // factor, shorter than old_ctx/high kept, in between smoothly interpolated.
      const float old_ctx = float(c.original_max_position);
      const float low_wavelen = old_ctx / c.low_freq_factor;
      const float high_wavelen = old_ctx / c.high_freq_factor;
      for (float& f : inv) {
        float wavelen = float(2 * std::numbers::pi) / f;
        float scaled = wavelen > low_wavelen ? f / c.factor : f;
        bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
        if (medium) {
          float smooth = (old_ctx / wavelen - c.low_freq_factor) /
                         (c.high_freq_factor - c.low_freq_factor);
          scaled = (1 - smooth) * scaled / c.factor + smooth * scaled;
        }
        f = scaled;
      }
      return inv;
    }
    case RopeScaling::kYarn: {
      // _compute_yarn_parameters with truncate=True; `factor` is the effective factor (HF
      // replaces it by max_position / original_max_position when the config has both).
      double low = std::floor(CorrectionDim(c.beta_fast, dim, c.theta, c.original_max_position));
      double high = std::ceil(CorrectionDim(c.beta_slow, dim, c.theta, c.original_max_position));
      low = std::max(low, 0.0);
      high = std::min(high, double(dim - 1));
      if (low == high) high += 0.001;
      for (size_t i = 0; i < inv.size(); ++i) {
        float extrap = 1.0f / pos[i];
        float interp = 1.0f / (c.factor * pos[i]);
        float ramp = (float(i) - float(low)) / float(high - low);
        ramp = std::clamp(ramp, 0.0f, 1.0f);
        float extrap_factor = 1.0f - ramp;
        inv[i] = interp * (1.0f - extrap_factor) + extrap * extrap_factor;
      }
      return inv;
    }
  }
  return inv;
}

float RopeAttentionFactor(const RopeConfig& c) {
  if (c.scaling != RopeScaling::kYarn) return 1.0f;
  if (c.mscale != 0.0f && c.mscale_all_dim != 0.0f)
    return float(YarnMscale(c.factor, c.mscale) / YarnMscale(c.factor, c.mscale_all_dim));
  return float(YarnMscale(c.factor, 1.0));
}

float RopeAttentionScale(const RopeConfig& c) {
  float f = RopeAttentionFactor(c);
  return f * f;
}

}  // namespace pg::ops
