// q4k's plain readers and reference product, and fp16 rounding as ggml does it (q4k.h; the
// quantizer is q4k_quantize.cc).
#include "kernels/cpu/q4k.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/parallel.h"

namespace steady::cpu {

// What ggml's GGML_FP32_TO_FP16 does with F16C.
uint16_t FloatToF16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t abs = x & 0x7fffffff;
  if (abs >= 0x7f800000) return uint16_t(sign | 0x7c00 | (abs > 0x7f800000 ? 0x200 : 0));
  if (abs >= 0x477ff000) return uint16_t(sign | 0x7c00);  // rounds past 65504: infinity
  if (abs < 0x38800000) {  // a half subnormal (or zero): round abs / 2^-24 to an integer
    const float scaled = std::ldexp(std::fabs(f), 24);
    return uint16_t(sign | uint32_t(std::nearbyint(scaled)));
  }
  const uint32_t mant = abs & 0x7fffff;
  uint32_t h = ((abs >> 23) - 112) << 10 | (mant >> 13);
  const uint32_t rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
  return uint16_t(sign | h);
}

Q4KParts Q4KWeightParts(Q4KWeights w, int64_t in, int64_t j, int64_t k) {
  const int64_t blocks = Q4KBlocksPerRow(in), b = k / kQ4KBlock, s = (k % kQ4KBlock) / kQ4KSub, i = k % kQ4KSub;
  const Q4KScales& sc = w.scales[j * blocks + b];
  const uint8_t byte = w.q[(j * blocks + b) * (kQ4KBlock / 2) + 16 * s + i % 16];
  const int q = i < 16 ? byte & 15 : byte >> 4;
  return {F16ToFloat(sc.d) * sc.sc[s] * float(q), F16ToFloat(sc.dmin) * sc.m[s]};
}

float Q4KWeightValue(Q4KWeights w, int64_t in, int64_t j, int64_t k) {
  const Q4KParts p = Q4KWeightParts(w, in, j, k);
  return p.scaled - p.min;
}

void DequantizeQ4K(Q4KWeights w, int64_t in, int64_t r0, int64_t r1, float* out) {
  for (int64_t j = r0; j < r1; ++j) {
    for (int64_t k = 0; k < in; ++k) out[(j - r0) * in + k] = Q4KWeightValue(w, in, j, k);
  }
}

void MatMulNTQ4KReference(const float* x, int rows, int in, Q4KWeights w, int out, float* y) {
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < out; ++j) {
      double s = 0;
      for (int k = 0; k < in; ++k) s += double(x[int64_t(r) * in + k]) * Q4KWeightValue(w, in, j, k);
      y[int64_t(r) * out + j] = float(s);
    }
  }
}

}  // namespace steady::cpu
