#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/quant.h"
#include "core/status.h"

namespace pg::quant {
namespace {

std::vector<float> RandomRow(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

TEST(Quant, Q4_0ExactBlock) {
  // Hand-built block: d = 0.5, nibbles 0..15 -> (q-8)*0.5.
  BlockQ4_0 b{};
  b.d = F32ToF16(0.5f);
  for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(j | ((15 - j) << 4));
  float y[32];
  DequantizeRow(DType::kQ4_0, &b, y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], (j - 8) * 0.5f);
    EXPECT_EQ(y[j + 16], (15 - j - 8) * 0.5f);
  }
}

TEST(Quant, Q4_1ExactBlock) {
  BlockQ4_1 b{};
  b.d = F32ToF16(0.25f);
  b.m = F32ToF16(-1.0f);
  for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(j | (j << 4));
  float y[32];
  DequantizeRow(DType::kQ4_1, &b, y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], j * 0.25f - 1.0f);
    EXPECT_EQ(y[j + 16], j * 0.25f - 1.0f);
  }
}

TEST(Quant, RoundTripErrorIsBounded) {
  const int64_t n = 32 * 37;
  auto x = RandomRow(n, 11);
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1}) {
    std::vector<uint8_t> buf(static_cast<size_t>(*BytesFor(t, n)));
    QuantizeRow(t, x.data(), buf.data(), n);
    std::vector<float> y(static_cast<size_t>(n));
    DequantizeRow(t, buf.data(), y.data(), n);
    // Per-block bound: half a quantization step of that block (plus f16 scale rounding).
    for (int64_t b = 0; b < n / 32; ++b) {
      float mn = 1e30f, mx = -1e30f, amax = 0;
      for (int j = 0; j < 32; ++j) {
        float v = x[size_t(b * 32 + j)];
        mn = std::min(mn, v); mx = std::max(mx, v); amax = std::max(amax, std::fabs(v));
      }
      float step = t == DType::kQ8_0 ? amax / 127 : t == DType::kQ4_0 ? amax / 8 : (mx - mn) / 15;
      for (int j = 0; j < 32; ++j) {
        size_t k = size_t(b * 32 + j);
        // Q4_0 clamps the far extreme to +7: up to one full step there.
        float bound = (t == DType::kQ4_0 ? step : step * 0.5f) + 0.01f * amax;
        EXPECT_LE(std::fabs(y[k] - x[k]), bound) << Name(t) << " " << k;
      }
    }
  }
}

TEST(Quant, Q6_KKnownLayout) {
  // Every quant value = 33 (=> q-32 = 1), scales = index+1, d = 2: y = 2 * scale.
  BlockQ6_K b{};
  for (auto& v : b.ql) v = 0x11;  // low nibbles 1
  for (auto& v : b.qh) v = 0xAA;  // each 2-bit field = 2 -> +32
  for (int i = 0; i < 16; ++i) b.scales[i] = int8_t(i + 1);
  b.d = F32ToF16(2.0f);
  float y[256];
  DequantizeRow(DType::kQ6_K, &b, y, 256);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(y[i], 2.0f * float(i / 16 + 1)) << i;
}

TEST(Quant, Q4_KKnownLayout) {
  // scales[j<4] = 6-bit d, scales[j+4] = 6-bit m; sub-block j: y = d*sc*q - dmin*m.
  BlockQ4_K b{};
  b.d = F32ToF16(1.0f);
  b.dmin = F32ToF16(0.5f);
  for (int j = 0; j < 4; ++j) { b.scales[j] = uint8_t(j + 1); b.scales[j + 4] = uint8_t(2); }
  for (int j = 8; j < 12; ++j) b.scales[j] = uint8_t((j - 3) | (1 << 4));  // sub-blocks 4..7
  for (auto& v : b.qs) v = 0x53;  // low 3, high 5
  float y[256];
  DequantizeRow(DType::kQ4_K, &b, y, 256);
  for (int sb = 0; sb < 8; ++sb) {
    float sc = sb < 4 ? float(sb + 1) : float(sb + 1);
    float m = sb < 4 ? 2.0f : 1.0f;
    float q = sb % 2 == 0 ? 3.0f : 5.0f;
    for (int l = 0; l < 32; ++l) EXPECT_EQ(y[sb * 32 + l], sc * q - 0.5f * m) << sb;
  }
}

TEST(Quant, UnsupportedTypeThrows) {
  uint8_t buf[66] = {};
  float y[256];
  EXPECT_THROW(DequantizeRow(DType::kIQ2_XXS, buf, y, 256), Error);
  EXPECT_FALSE(CanDequantize(DType::kIQ2_XXS));
}

}  // namespace
}  // namespace pg::quant
