#include "core/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/status.h"

namespace pg::quant {
namespace {

inline float H(uint16_t h) { return F16ToF32(h); }

void ScaleMinK4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

void DeqQ4_0(const BlockQ4_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    float d = H(b[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = float((b[i].qs[j] & 0xF) - 8) * d;
      y[j + kQK / 2] = float((b[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void DeqQ4_1(const BlockQ4_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    float d = H(b[i].d), m = H(b[i].m);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = float(b[i].qs[j] & 0xF) * d + m;
      y[j + kQK / 2] = float(b[i].qs[j] >> 4) * d + m;
    }
  }
}

template <typename B, bool kHasMin>
void DeqQ5(const B* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    float d = H(b[i].d);
    float m = 0;
    if constexpr (kHasMin) m = H(b[i].m);
    uint32_t qh;
    std::memcpy(&qh, b[i].qh, 4);
    for (int j = 0; j < kQK / 2; ++j) {
      int xh0 = int(((qh >> j) << 4) & 0x10);
      int xh1 = int((qh >> (j + 12)) & 0x10);
      int x0 = (b[i].qs[j] & 0xF) | xh0;
      int x1 = (b[i].qs[j] >> 4) | xh1;
      if constexpr (kHasMin) {
        y[j] = float(x0) * d + m;
        y[j + kQK / 2] = float(x1) * d + m;
      } else {
        y[j] = float(x0 - 16) * d;
        y[j + kQK / 2] = float(x1 - 16) * d;
      }
    }
  }
}

void DeqQ8_0(const BlockQ8_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    float d = H(b[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = float(b[i].qs[j]) * d;
  }
}

void DeqQ4_K(const BlockQ4_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    float d = H(b[i].d), dmin = H(b[i].dmin);
    const uint8_t* q = b[i].qs;
    int is = 0;
    for (int j = 0; j < kQK_K; j += 64) {
      uint8_t sc, m;
      ScaleMinK4(is + 0, b[i].scales, &sc, &m);
      float d1 = d * sc, m1 = dmin * m;
      ScaleMinK4(is + 1, b[i].scales, &sc, &m);
      float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * float(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float(q[l] >> 4) - m2;
      q += 32;
      is += 2;
    }
  }
}

void DeqQ5_K(const BlockQ5_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    float d = H(b[i].d), dmin = H(b[i].dmin);
    const uint8_t* ql = b[i].qs;
    const uint8_t* qh = b[i].qh;
    int is = 0;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < kQK_K; j += 64) {
      uint8_t sc, m;
      ScaleMinK4(is + 0, b[i].scales, &sc, &m);
      float d1 = d * sc, m1 = dmin * m;
      ScaleMinK4(is + 1, b[i].scales, &sc, &m);
      float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * float((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      ql += 32;
      is += 2;
      u1 = uint8_t(u1 << 2);
      u2 = uint8_t(u2 << 2);
    }
  }
}

void DeqQ6_K(const BlockQ6_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    float d = H(b[i].d);
    const uint8_t* ql = b[i].ql;
    const uint8_t* qh = b[i].qh;
    const int8_t* sc = b[i].scales;
    for (int n = 0; n < kQK_K; n += 128) {
      for (int l = 0; l < 32; ++l) {
        int is = l / 16;
        int q1 = int((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        int q2 = int((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        int q3 = int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        int q4 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * float(sc[is + 0]) * float(q1);
        y[l + 32] = d * float(sc[is + 2]) * float(q2);
        y[l + 64] = d * float(sc[is + 4]) * float(q3);
        y[l + 96] = d * float(sc[is + 6]) * float(q4);
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

void DeqQ8_K(const BlockQ8_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i)
    for (int j = 0; j < kQK_K; ++j) *y++ = b[i].d * float(b[i].qs[j]);
}

}  // namespace

bool CanDequantize(DType t) {
  switch (t) {
    case DType::kF32: case DType::kF16: case DType::kBF16: case DType::kF64:
    case DType::kF8E4M3: case DType::kF8E5M2:
    case DType::kQ4_0: case DType::kQ4_1: case DType::kQ5_0: case DType::kQ5_1:
    case DType::kQ8_0: case DType::kQ4_K: case DType::kQ5_K: case DType::kQ6_K:
    case DType::kQ8_K:
      return true;
    default:
      return false;
  }
}

void DequantizeRow(DType t, const void* src, float* dst, int64_t n) {
  const DTypeInfo& info = Info(t);
  PG_CHECK(n % info.block_size == 0, "{} elements not a multiple of {} block {}", n, info.name,
           info.block_size);
  int64_t nb = n / info.block_size;
  switch (t) {
    case DType::kF32: std::memcpy(dst, src, size_t(n) * 4); return;
    case DType::kF64: {
      const double* s = static_cast<const double*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = float(s[i]);
      return;
    }
    case DType::kF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = F16ToF32(s[i]);
      return;
    }
    case DType::kBF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToF32(s[i]);
      return;
    }
    case DType::kF8E4M3: {
      const uint8_t* s = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = F8E4M3ToF32(s[i]);
      return;
    }
    case DType::kF8E5M2: {
      const uint8_t* s = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = F8E5M2ToF32(s[i]);
      return;
    }
    case DType::kQ4_0: return DeqQ4_0(static_cast<const BlockQ4_0*>(src), dst, nb);
    case DType::kQ4_1: return DeqQ4_1(static_cast<const BlockQ4_1*>(src), dst, nb);
    case DType::kQ5_0: return DeqQ5<BlockQ5_0, false>(static_cast<const BlockQ5_0*>(src), dst, nb);
    case DType::kQ5_1: return DeqQ5<BlockQ5_1, true>(static_cast<const BlockQ5_1*>(src), dst, nb);
    case DType::kQ8_0: return DeqQ8_0(static_cast<const BlockQ8_0*>(src), dst, nb);
    case DType::kQ4_K: return DeqQ4_K(static_cast<const BlockQ4_K*>(src), dst, nb);
    case DType::kQ5_K: return DeqQ5_K(static_cast<const BlockQ5_K*>(src), dst, nb);
    case DType::kQ6_K: return DeqQ6_K(static_cast<const BlockQ6_K*>(src), dst, nb);
    case DType::kQ8_K: return DeqQ8_K(static_cast<const BlockQ8_K*>(src), dst, nb);
    default:
      Throw(ErrorCode::kUnsupported, "dequantization of {} is not supported", info.name);
  }
}

void QuantizeRowQ8_0(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float amax = 0;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    float d = amax / 127.0f;
    float id = d ? 1.0f / d : 0.0f;
    y[i].d = F32ToF16(d);
    for (int j = 0; j < kQK; ++j) y[i].qs[j] = int8_t(std::lround(x[j] * id));
  }
}

void QuantizeRowQ4_0(const float* x, BlockQ4_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float amax = 0, max = 0;
    for (int j = 0; j < kQK; ++j)
      if (std::fabs(x[j]) > amax) { amax = std::fabs(x[j]); max = x[j]; }
    float d = max / -8.0f;
    float id = d ? 1.0f / d : 0.0f;
    y[i].d = F32ToF16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      int a = std::min(15, int(x[j] * id + 8.5f));
      int b = std::min(15, int(x[j + kQK / 2] * id + 8.5f));
      y[i].qs[j] = uint8_t(a | (b << 4));
    }
  }
}

void QuantizeRowQ4_1(const float* x, BlockQ4_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float mn = x[0], mx = x[0];
    for (int j = 1; j < kQK; ++j) { mn = std::min(mn, x[j]); mx = std::max(mx, x[j]); }
    float d = (mx - mn) / 15.0f;
    float id = d ? 1.0f / d : 0.0f;
    y[i].d = F32ToF16(d);
    y[i].m = F32ToF16(mn);
    for (int j = 0; j < kQK / 2; ++j) {
      int a = std::min(15, int((x[j] - mn) * id + 0.5f));
      int b = std::min(15, int((x[j + kQK / 2] - mn) * id + 0.5f));
      y[i].qs[j] = uint8_t(a | (b << 4));
    }
  }
}

void QuantizeRow(DType t, const float* src, void* dst, int64_t n) {
  switch (t) {
    case DType::kF32: std::memcpy(dst, src, size_t(n) * 4); return;
    case DType::kF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = F32ToF16(src[i]);
      return;
    }
    case DType::kBF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = F32ToBf16(src[i]);
      return;
    }
    case DType::kF8E4M3: {
      auto* d = static_cast<uint8_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = F32ToF8E4M3(src[i]);
      return;
    }
    case DType::kQ8_0: return QuantizeRowQ8_0(src, static_cast<BlockQ8_0*>(dst), n);
    case DType::kQ4_0: return QuantizeRowQ4_0(src, static_cast<BlockQ4_0*>(dst), n);
    case DType::kQ4_1: return QuantizeRowQ4_1(src, static_cast<BlockQ4_1*>(dst), n);
    default:
      Throw(ErrorCode::kUnsupported, "quantization to {} is not supported", Name(t));
  }
}

}  // namespace pg::quant
