// Dequantization of GGUF blocks (model/gguf/dequantize.h). Plain scalar code: it runs once per
// tensor at load. The expressions keep ggml's order of operations (d * scale first, then times q,
// then minus the min) and this file is compiled with -ffp-contract=off (model/gguf/CMakeLists.txt)
// so no multiply-add is fused: each step rounds as ggml's reference C does, which makes the result
// bit-identical.
#include "model/gguf/dequantize.h"

#include <cstring>

#include "base/check.h"
#include "kernels/cpu/q2k.h"
#include "kernels/cpu/q3k_iq4.h"
#include "model/checkpoint/safetensors.h"
#include "model/gguf/gguf.h"

namespace steady {
namespace {

constexpr int kQK = 32;    // values per Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 block
constexpr int kQK_K = 256; // values per K-quant super-block

uint16_t Load16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
float LoadHalf(const uint8_t* p) { return HalfToFloat(Load16(p)); }

void DequantizeQ8_0(const uint8_t* b, int64_t n, float* y) {
  for (int64_t block = 0; block < n / kQK; ++block, b += 34) {
    const float d = LoadHalf(b);
    for (int j = 0; j < kQK; ++j) *y++ = float(int8_t(b[2 + j])) * d;
  }
}

void DequantizeQ4_0(const uint8_t* b, int64_t n, float* y) {
  for (int64_t block = 0; block < n / kQK; ++block, b += 18, y += kQK) {
    const float d = LoadHalf(b);
    const uint8_t* qs = b + 2;
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = float((qs[j] & 0x0F) - 8) * d;
      y[j + kQK / 2] = float((qs[j] >> 4) - 8) * d;
    }
  }
}

// Q4_1: fp16 d, fp16 m, 16 bytes of nibbles; x = q * d + m.
void DequantizeQ4_1(const uint8_t* b, int64_t n, float* y) {
  for (int64_t block = 0; block < n / kQK; ++block, b += 20, y += kQK) {
    const float d = LoadHalf(b), m = LoadHalf(b + 2);
    const uint8_t* qs = b + 4;
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = float(qs[j] & 0x0F) * d + m;
      y[j + kQK / 2] = float(qs[j] >> 4) * d + m;
    }
  }
}

// The fifth bits of a Q5_0/Q5_1 block: bit j of the 32-bit qh for value j (j < 16: low nibbles,
// 16..31: high nibbles), as 0 or 16.
int FifthBit(uint32_t qh, int j) { return int((qh >> j) & 1) << 4; }

// Q5_0: fp16 d, 4 bytes qh, 16 bytes of nibbles; x = (q | fifth bit << 4) - 16) * d.
void DequantizeQ5_0(const uint8_t* b, int64_t n, float* y) {
  for (int64_t block = 0; block < n / kQK; ++block, b += 22, y += kQK) {
    const float d = LoadHalf(b);
    uint32_t qh;
    std::memcpy(&qh, b + 2, 4);
    const uint8_t* qs = b + 6;
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = float(((qs[j] & 0x0F) | FifthBit(qh, j)) - 16) * d;
      y[j + kQK / 2] = float(((qs[j] >> 4) | FifthBit(qh, j + 16)) - 16) * d;
    }
  }
}

// Q5_1: fp16 d, fp16 m, 4 bytes qh, 16 bytes of nibbles; x = (q | fifth bit << 4) * d + m.
void DequantizeQ5_1(const uint8_t* b, int64_t n, float* y) {
  for (int64_t block = 0; block < n / kQK; ++block, b += 24, y += kQK) {
    const float d = LoadHalf(b), m = LoadHalf(b + 2);
    uint32_t qh;
    std::memcpy(&qh, b + 4, 4);
    const uint8_t* qs = b + 8;
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = float((qs[j] & 0x0F) | FifthBit(qh, j)) * d + m;
      y[j + kQK / 2] = float((qs[j] >> 4) | FifthBit(qh, j + 16)) * d + m;
    }
  }
}

// The j-th (scale, min) pair of a K-quant block's 12 scale bytes: eight 6-bit pairs, the first four
// in the low 6 bits of bytes 0..3 (scales) and 4..7 (mins), the last four split between the low or
// high nibble of bytes 8..11 and the top 2 bits of bytes 0..7.
void ScaleMinK4(int j, const uint8_t* q, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
    *min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// The scales and mins of the two 32-value runs `is` and `is` + 1 of a Q4_K or Q5_K block, in ggml's
// order of operations: d * scale and dmin * min.
void RunScales(int is, const uint8_t* scales, float d, float dmin, float* d1, float* m1, float* d2, float* m2) {
  uint8_t sc, m;
  ScaleMinK4(is, scales, &sc, &m);
  *d1 = d * float(sc), *m1 = dmin * float(m);
  ScaleMinK4(is + 1, scales, &sc, &m);
  *d2 = d * float(sc), *m2 = dmin * float(m);
}

void DequantizeQ4_K(const uint8_t* b, int64_t n, float* y) {
  for (int64_t block = 0; block < n / kQK_K; ++block, b += 144) {
    const float d = LoadHalf(b);
    const float dmin = LoadHalf(b + 2);
    const uint8_t* scales = b + 4;
    const uint8_t* q = b + 16;
    for (int j = 0, is = 0; j < kQK_K; j += 64, is += 2, q += 32) {
      float d1, m1, d2, m2;
      RunScales(is, scales, d, dmin, &d1, &m1, &d2, &m2);
      for (int l = 0; l < 32; ++l) *y++ = d1 * float(q[l] & 0x0F) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float(q[l] >> 4) - m2;
    }
  }
}

void DequantizeQ5_K(const uint8_t* b, int64_t n, float* y) {
  for (int64_t block = 0; block < n / kQK_K; ++block, b += 176) {
    const float d = LoadHalf(b);
    const float dmin = LoadHalf(b + 2);
    const uint8_t* scales = b + 4;
    const uint8_t* qh = b + 16;
    const uint8_t* ql = b + 48;
    uint8_t u1 = 1, u2 = 2;  // the bit of qh[l] that is the fifth bit of this pair of 32-value runs
    for (int j = 0, is = 0; j < kQK_K; j += 64, is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
      float d1, m1, d2, m2;
      RunScales(is, scales, d, dmin, &d1, &m1, &d2, &m2);
      for (int l = 0; l < 32; ++l) *y++ = d1 * float((ql[l] & 0x0F) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    }
  }
}

void DequantizeQ6_K(const uint8_t* b, int64_t n, float* y) {
  for (int64_t block = 0; block < n / kQK_K; ++block, b += 210) {
    const uint8_t* ql = b;
    const uint8_t* qh = b + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
    const float d = LoadHalf(b + 208);
    for (int half = 0; half < 2; ++half, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = int((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = int((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * float(sc[is + 0]) * float(q1);
        y[l + 32] = d * float(sc[is + 2]) * float(q2);
        y[l + 64] = d * float(sc[is + 4]) * float(q3);
        y[l + 96] = d * float(sc[is + 6]) * float(q4);
      }
    }
  }
}


}  // namespace

bool CanDequantize(uint32_t t) {
  switch (GgmlType(t)) {
    case GgmlType::kF32: case GgmlType::kF16: case GgmlType::kBF16: case GgmlType::kQ8_0: case GgmlType::kQ4_0:
    case GgmlType::kQ4_1: case GgmlType::kQ5_0: case GgmlType::kQ5_1:
    case GgmlType::kQ4_K: case GgmlType::kQ5_K: case GgmlType::kQ6_K:
    case GgmlType::kQ2_K: case GgmlType::kQ3_K: case GgmlType::kIQ4_NL: case GgmlType::kIQ4_XS:
      return true;
    default:
      return false;
  }
}

std::string DequantizableTypeNames() {
  return "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS";
}

void Dequantize(uint32_t t, const void* blocks, int64_t n, float* out) {
  const uint8_t* b = static_cast<const uint8_t*>(blocks);
  switch (GgmlType(t)) {
    case GgmlType::kF32: std::memcpy(out, b, size_t(n) * 4); return;
    case GgmlType::kF16: for (int64_t k = 0; k < n; ++k) out[k] = LoadHalf(b + 2 * k); return;
    case GgmlType::kBF16: for (int64_t k = 0; k < n; ++k) out[k] = BFloat16ToFloat(Load16(b + 2 * k)); return;
    case GgmlType::kQ8_0: STEADY_CHECK(n % kQK == 0); DequantizeQ8_0(b, n, out); return;
    case GgmlType::kQ4_0: STEADY_CHECK(n % kQK == 0); DequantizeQ4_0(b, n, out); return;
    case GgmlType::kQ4_1: STEADY_CHECK(n % kQK == 0); DequantizeQ4_1(b, n, out); return;
    case GgmlType::kQ5_0: STEADY_CHECK(n % kQK == 0); DequantizeQ5_0(b, n, out); return;
    case GgmlType::kQ5_1: STEADY_CHECK(n % kQK == 0); DequantizeQ5_1(b, n, out); return;
    case GgmlType::kQ4_K: STEADY_CHECK(n % kQK_K == 0); DequantizeQ4_K(b, n, out); return;
    case GgmlType::kQ5_K: STEADY_CHECK(n % kQK_K == 0); DequantizeQ5_K(b, n, out); return;
    case GgmlType::kQ6_K: STEADY_CHECK(n % kQK_K == 0); DequantizeQ6_K(b, n, out); return;
    // Q2_K, Q3_K, IQ4_NL and IQ4_XS: the readers of the kernels that hold them (kernels/cpu/q2k.h,
    // q3k_iq4.h), `n` values as one row; they keep ggml's order of operations too (q2k.cc is compiled
    // with -ffp-contract=off; the others only multiply).
    case GgmlType::kQ2_K: STEADY_CHECK(n % kQK_K == 0); cpu::DequantizeQ2K({b}, n, 0, 1, out); return;
    case GgmlType::kQ3_K: STEADY_CHECK(n % kQK_K == 0); cpu::DequantizeQ3K({b}, n, 0, 1, out); return;
    case GgmlType::kIQ4_NL: STEADY_CHECK(n % kQK == 0); cpu::DequantizeIq4Nl({b}, n, 0, 1, out); return;
    case GgmlType::kIQ4_XS: STEADY_CHECK(n % kQK_K == 0); cpu::DequantizeIq4Xs({b}, n, 0, 1, out); return;
    default: break;
  }
  STEADY_CHECK(false && "Dequantize on a type CanDequantize refuses");
}

}  // namespace steady
