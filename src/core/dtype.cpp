#include "core/dtype.h"

#include <array>
#include <cctype>
#include <cmath>
#include <limits>
#include <string>

namespace pg {
namespace {

constexpr std::array<DTypeInfo, size_t(DType::kCount)> kInfos = {{
    {"f32", 1, 4, true, false},      {"f16", 1, 2, true, false},
    {"bf16", 1, 2, true, false},     {"f64", 1, 8, true, false},
    {"f8_e4m3", 1, 1, true, false},  {"f8_e5m2", 1, 1, true, false},
    {"i8", 1, 1, false, false},      {"u8", 1, 1, false, false},
    {"i16", 1, 2, false, false},     {"i32", 1, 4, false, false},
    {"i64", 1, 8, false, false},     {"bool", 1, 1, false, false},
    {"q4_0", 32, 18, false, true},   {"q4_1", 32, 20, false, true},
    {"q5_0", 32, 22, false, true},   {"q5_1", 32, 24, false, true},
    {"q8_0", 32, 34, false, true},   {"q8_1", 32, 36, false, true},
    {"q2_k", 256, 84, false, true},  {"q3_k", 256, 110, false, true},
    {"q4_k", 256, 144, false, true}, {"q5_k", 256, 176, false, true},
    {"q6_k", 256, 210, false, true}, {"q8_k", 256, 292, false, true},
    {"iq2_xxs", 256, 66, false, true}, {"iq2_xs", 256, 74, false, true},
    {"iq3_xxs", 256, 98, false, true}, {"iq1_s", 256, 50, false, true},
    {"iq4_nl", 32, 18, false, true},   {"iq3_s", 256, 110, false, true},
    {"iq2_s", 256, 82, false, true},   {"iq4_xs", 256, 136, false, true},
    {"iq1_m", 256, 56, false, true},   {"tq1_0", 256, 54, false, true},
    {"tq2_0", 256, 66, false, true},   {"mxfp4", 32, 17, false, true},
    {"q4_0x4", 32, 18, false, true},   {"q4_1x4", 32, 20, false, true},
}};

struct GgmlMap { uint32_t id; DType t; };
constexpr GgmlMap kGgml[] = {
    {0, DType::kF32},      {1, DType::kF16},     {2, DType::kQ4_0},     {3, DType::kQ4_1},
    {6, DType::kQ5_0},     {7, DType::kQ5_1},    {8, DType::kQ8_0},     {9, DType::kQ8_1},
    {10, DType::kQ2_K},    {11, DType::kQ3_K},   {12, DType::kQ4_K},    {13, DType::kQ5_K},
    {14, DType::kQ6_K},    {15, DType::kQ8_K},   {16, DType::kIQ2_XXS}, {17, DType::kIQ2_XS},
    {18, DType::kIQ3_XXS}, {19, DType::kIQ1_S},  {20, DType::kIQ4_NL},  {21, DType::kIQ3_S},
    {22, DType::kIQ2_S},   {23, DType::kIQ4_XS}, {24, DType::kI8},      {25, DType::kI16},
    {26, DType::kI32},     {27, DType::kI64},    {28, DType::kF64},     {29, DType::kIQ1_M},
    {30, DType::kBF16},    {34, DType::kTQ1_0},  {35, DType::kTQ2_0},   {39, DType::kMXFP4},
};

}  // namespace

const DTypeInfo& Info(DType t) { return kInfos[size_t(t)]; }

std::optional<int64_t> BytesFor(DType t, int64_t num_elements) {
  const DTypeInfo& info = Info(t);
  if (num_elements < 0 || num_elements % info.block_size != 0) return std::nullopt;
  int64_t blocks = num_elements / info.block_size;
  if (blocks > std::numeric_limits<int64_t>::max() / info.block_bytes) return std::nullopt;
  return blocks * info.block_bytes;
}

std::optional<DType> FromGgmlType(uint32_t id) {
  for (const auto& m : kGgml)
    if (m.id == id) return m.t;
  return std::nullopt;
}

uint32_t ToGgmlType(DType t) {
  for (const auto& m : kGgml)
    if (m.t == t) return m.id;
  return UINT32_MAX;
}

std::optional<DType> FromSafetensorsName(std::string_view n) {
  if (n == "F32") return DType::kF32;
  if (n == "F16") return DType::kF16;
  if (n == "BF16") return DType::kBF16;
  if (n == "F64") return DType::kF64;
  if (n == "F8_E4M3") return DType::kF8E4M3;
  if (n == "F8_E5M2") return DType::kF8E5M2;
  if (n == "I8") return DType::kI8;
  if (n == "U8") return DType::kU8;
  if (n == "I16") return DType::kI16;
  if (n == "I32") return DType::kI32;
  if (n == "I64") return DType::kI64;
  if (n == "BOOL") return DType::kBool;
  return std::nullopt;
}

std::optional<DType> FromName(std::string_view name) {
  std::string lower(name);
  for (auto& c : lower) c = char(std::tolower((unsigned char)c));
  for (size_t i = 0; i < kInfos.size(); ++i)
    if (kInfos[i].name == lower) return DType(i);
  if (lower == "float32" || lower == "float") return DType::kF32;
  if (lower == "bfloat16") return DType::kBF16;
  if (lower == "float16" || lower == "half") return DType::kF16;
  if (lower == "fp8" || lower == "float8_e4m3fn") return DType::kF8E4M3;
  return std::nullopt;
}

float F16ToF32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do { ++e; man <<= 1; } while ((man & 0x400u) == 0);
      bits = sign | (uint32_t(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t F32ToF16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return uint16_t(sign | 0x7e00u);          // NaN
  if (absu >= 0x477ff000u) return uint16_t(sign | 0x7c00u);         // overflow -> inf
  if (absu < 0x38800000u) {                                          // subnormal / zero
    // value = absf; half subnormal unit is 2^-24.
    float a = std::bit_cast<float>(absu);
    uint32_t q = uint32_t(std::nearbyint(a * 16777216.0f));  // round-half-even (default mode)
    return uint16_t(sign | q);
  }
  uint32_t exp = ((absu >> 23) - 127 + 15);
  uint32_t man = absu & 0x7fffffu;
  uint32_t h = (exp << 10) | (man >> 13);
  uint32_t rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // carries into exp correctly
  return uint16_t(sign | h);
}

float F8E4M3ToF32(uint8_t v) {
  uint32_t sign = v >> 7;
  uint32_t exp = (v >> 3) & 0xfu;
  uint32_t man = v & 0x7u;
  float r;
  if (exp == 0xf && man == 0x7) {
    r = std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    r = std::ldexp(float(man), -9);  // subnormal: man/8 * 2^-6
  } else {
    r = std::ldexp(1.0f + float(man) / 8.0f, int(exp) - 7);
  }
  return sign ? -r : r;
}

uint8_t F32ToF8E4M3(float f) {
  if (std::isnan(f)) return 0x7f;
  uint8_t sign = std::signbit(f) ? 0x80 : 0;
  float a = std::fabs(f);
  if (a >= 448.0f) return sign | 0x7e;  // saturate to max finite
  // Enumerate: find nearest representable with ties-to-even on the mantissa.
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5,1)
  int exp_unbiased = e - 1;
  if (exp_unbiased < -6) exp_unbiased = -6;  // subnormal range uses 2^-6 scale
  float scale = std::ldexp(1.0f, exp_unbiased - 3);  // spacing of representable values
  float q = std::nearbyint(a / scale);                // ties to even
  float r = q * scale;
  if (r == 0.0f) return sign;
  int ee;
  std::frexp(r, &ee);
  int eu = ee - 1;
  if (eu < -6) {  // subnormal
    return sign | uint8_t(int(r / std::ldexp(1.0f, -9)));
  }
  uint32_t man = uint32_t(std::ldexp(r, -eu) * 8.0f) - 8u;
  return sign | uint8_t((uint32_t(eu + 7) << 3) | man);
}

float F8E5M2ToF32(uint8_t v) { return F16ToF32(uint16_t(v) << 8); }

}  // namespace pg
