// Element types: plain scalars (fp32, bf16, fp16, fp8 e4m3, ints) and GGUF block-quantized
// types. A block type stores `block_size` logical elements in `block_bytes` bytes.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace pg {

enum class DType : uint8_t {
  kF32, kF16, kBF16, kF64, kF8E4M3, kF8E5M2,
  kI8, kU8, kI16, kI32, kI64, kBool,
  // GGUF block types (ggml names).
  kQ4_0, kQ4_1, kQ5_0, kQ5_1, kQ8_0, kQ8_1,
  kQ2_K, kQ3_K, kQ4_K, kQ5_K, kQ6_K, kQ8_K,
  kIQ2_XXS, kIQ2_XS, kIQ3_XXS, kIQ1_S, kIQ4_NL, kIQ3_S, kIQ2_S, kIQ4_XS, kIQ1_M,
  kTQ1_0, kTQ2_0, kMXFP4,
  // CPU-only layouts of Q4_0 / Q4_1 made at load (never in files, never on a device): groups of
  // 4 rows interleaved per pair of blocks (kernels/cpu/cpu_kernels.h, RepackRows4). Same
  // bytes per row as the source type; a row is not addressable on its own.
  kQ4_0x4, kQ4_1x4,
  kCount,
};

struct DTypeInfo {
  std::string_view name;
  int64_t block_size;   // logical elements per block (1 for scalar types)
  int64_t block_bytes;  // bytes per block
  bool is_float;        // a scalar floating type
  bool is_quantized;    // a GGUF block type
};

const DTypeInfo& Info(DType t);
// The CPU-only interleaved layouts (kQ4_0x4, kQ4_1x4): only the int8 GEMVs (cpu_vnni_q8,
// cpu_avx2_q8) read them.
inline bool IsRows4(DType t) { return t == DType::kQ4_0x4 || t == DType::kQ4_1x4; }
inline std::string_view Name(DType t) { return Info(t).name; }

// Bytes for `num_elements` elements; num_elements must be a multiple of the block size
// (returns nullopt otherwise, or on overflow).
std::optional<int64_t> BytesFor(DType t, int64_t num_elements);

// GGUF's ggml_type ids <-> DType. Unknown ids give nullopt.
std::optional<DType> FromGgmlType(uint32_t ggml_type);
uint32_t ToGgmlType(DType t);
// safetensors dtype strings ("F32", "BF16", "F8_E4M3", ...).
std::optional<DType> FromSafetensorsName(std::string_view name);
// Our own names ("f32", "bf16", "q4_1", ...), case-insensitive.
std::optional<DType> FromName(std::string_view name);

// ---- scalar conversions (bit-exact, round-to-nearest-even where narrowing) ----

inline float Bf16ToF32(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }
inline uint16_t F32ToBf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);
float F8E4M3ToF32(uint8_t v);
uint8_t F32ToF8E4M3(float f);  // saturates to ±448, NaN stays NaN
float F8E5M2ToF32(uint8_t v);

}  // namespace pg
