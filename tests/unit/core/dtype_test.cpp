#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/dtype.h"

namespace pg {
namespace {

TEST(DType, BlockSizes) {
  EXPECT_EQ(*BytesFor(DType::kQ4_1, 64), 40);
  EXPECT_EQ(*BytesFor(DType::kQ6_K, 512), 420);
  EXPECT_EQ(*BytesFor(DType::kBF16, 3), 6);
  EXPECT_FALSE(BytesFor(DType::kQ4_0, 33).has_value());
  EXPECT_FALSE(BytesFor(DType::kF32, INT64_MAX / 2).has_value());
}

TEST(DType, GgmlRoundTrip) {
  for (uint32_t id = 0; id < 64; ++id) {
    auto t = FromGgmlType(id);
    if (t) { EXPECT_EQ(ToGgmlType(*t), id); }
  }
  EXPECT_EQ(*FromGgmlType(3), DType::kQ4_1);
  EXPECT_EQ(*FromGgmlType(30), DType::kBF16);
  EXPECT_FALSE(FromGgmlType(4).has_value());
  EXPECT_FALSE(FromGgmlType(1000).has_value());
}

TEST(DType, HalfExhaustiveRoundTrip) {
  // Every finite f16 converts to f32 and back to the same bits.
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = F16ToF32(uint16_t(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(F32ToF16(f), h) << h;
  }
  EXPECT_EQ(F16ToF32(0x3c00), 1.0f);
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);  // rounds to inf
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie -> even
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(F32ToBf16(1.0f), 0x3f80);
  EXPECT_EQ(Bf16ToF32(0x3f80), 1.0f);
  EXPECT_EQ(F32ToBf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(F32ToBf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(NAN))));
}

TEST(DType, Fp8E4M3ExhaustiveRoundTrip) {
  for (int v = 0; v < 256; ++v) {
    float f = F8E4M3ToF32(uint8_t(v));
    if (std::isnan(f)) continue;
    if (f == 0.0f) continue;  // ±0 both fine
    EXPECT_EQ(F32ToF8E4M3(f), v) << v << " " << f;
  }
  EXPECT_EQ(F8E4M3ToF32(0x7e), 448.0f);
  EXPECT_EQ(F32ToF8E4M3(1000.0f), 0x7e);
  EXPECT_EQ(F32ToF8E4M3(-1000.0f), 0xfe);
  EXPECT_EQ(F8E4M3ToF32(0x01), std::ldexp(1.0f, -9));
}

TEST(DType, Fp8E4M3RoundingIsNearest) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-500.f, 500.f);
  for (int i = 0; i < 20000; ++i) {
    float x = dist(rng) * std::ldexp(1.0f, int(rng() % 12) - 8);
    float q = F8E4M3ToF32(F32ToF8E4M3(x));
    if (std::fabs(x) >= 448.f) continue;
    // Nearest: no representable value is strictly closer.
    for (int v = 0; v < 256; ++v) {
      float c = F8E4M3ToF32(uint8_t(v));
      if (!std::isnan(c)) { ASSERT_LE(std::fabs(q - x), std::fabs(c - x) + 0.0f) << x; }
    }
  }
}

TEST(DType, Names) {
  EXPECT_EQ(*FromName("Q4_1"), DType::kQ4_1);
  EXPECT_EQ(*FromName("bfloat16"), DType::kBF16);
  EXPECT_EQ(*FromSafetensorsName("F8_E4M3"), DType::kF8E4M3);
  EXPECT_FALSE(FromSafetensorsName("F4").has_value());
}

}  // namespace
}  // namespace pg
