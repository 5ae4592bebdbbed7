// GGUF block layouts and reference (de)quantization. Layouts match ggml's on-disk format
// byte for byte; all multi-byte fields are little-endian.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace pg::quant {

inline constexpr int kQK = 32;     // elements per block of the legacy types
inline constexpr int kQK_K = 256;  // elements per K-quant super-block

struct BlockQ4_0 { uint16_t d; uint8_t qs[kQK / 2]; };              // x = (q - 8) * d
struct BlockQ4_1 { uint16_t d, m; uint8_t qs[kQK / 2]; };           // x = q * d + m
struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[kQK / 2]; };
struct BlockQ5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[kQK / 2]; };
struct BlockQ8_0 { uint16_t d; int8_t qs[kQK]; };                   // x = q * d
struct BlockQ4_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[kQK_K / 2]; };
struct BlockQ5_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[kQK_K / 8]; uint8_t qs[kQK_K / 2]; };
struct BlockQ6_K { uint8_t ql[kQK_K / 2]; uint8_t qh[kQK_K / 4]; int8_t scales[kQK_K / 16]; uint16_t d; };
struct BlockQ8_K { float d; int8_t qs[kQK_K]; int16_t bsums[kQK_K / 16]; };

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 &&
              sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292);

// True if DequantizeRow supports `t`.
bool CanDequantize(DType t);

// Converts `n` logical elements starting at `src` (n a multiple of the block size) to fp32.
// Throws pg::Error(kUnsupported) for a type it does not handle.
void DequantizeRow(DType t, const void* src, float* dst, int64_t n);

// Reference quantizers (round-to-nearest, as ggml's reference versions). n % 32 == 0.
void QuantizeRowQ8_0(const float* src, BlockQ8_0* dst, int64_t n);
void QuantizeRowQ4_0(const float* src, BlockQ4_0* dst, int64_t n);
void QuantizeRowQ4_1(const float* src, BlockQ4_1* dst, int64_t n);
// Converts fp32 to a scalar float type (f32, f16, bf16, f8_e4m3) or one of the quantizers above.
void QuantizeRow(DType t, const float* src, void* dst, int64_t n);

}  // namespace pg::quant
