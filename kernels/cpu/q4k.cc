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
  const uint8_t* block = w.blocks + j * Q4KBytes(1, in) + (k / kQ4KBlock) * kQ4KBlockBytes;
  const int i = int(k % kQ4KBlock), s = i / kQ4KSub;
  const Q4KScales sc = Q4KBlockScales(block);
  return {F16ToFloat(sc.d) * sc.sc[s] * float(Q4KBlockQ(block, i)), F16ToFloat(sc.dmin) * sc.m[s]};
}

float Q4KWeightValue(Q4KWeights w, int64_t in, int64_t j, int64_t k) {
  const Q4KParts p = Q4KWeightParts(w, in, j, k);
  return p.scaled - p.min;
}

void DequantizeQ4K(Q4KWeights w, int64_t in, int64_t r0, int64_t r1, float* out) {
  // Q4KWeightValue's arithmetic, the scales unpacked once a super-block.
  for (int64_t j = r0; j < r1; ++j) {
    float* row = out + (j - r0) * in;
    for (int64_t b = 0; b * kQ4KBlock < in; ++b) {
      const uint8_t* block = w.blocks + j * Q4KBytes(1, in) + b * kQ4KBlockBytes;
      const Q4KScales sc = Q4KBlockScales(block);
      const float d = F16ToFloat(sc.d), dmin = F16ToFloat(sc.dmin);
      for (int i = 0; i < kQ4KBlock && b * kQ4KBlock + i < in; ++i) {
        const int s = i / kQ4KSub;
        const float scaled = d * sc.sc[s] * float(Q4KBlockQ(block, i)), min = dmin * sc.m[s];
        row[b * kQ4KBlock + i] = scaled - min;
      }
    }
  }
}

void MatMulNTQ4KReference(const float* x, int rows, int in, Q4KWeights w, int out, float* y) {
  ReferenceProduct(x, rows, in, out, y, [&](int64_t j, int64_t k) { return Q4KWeightValue(w, in, j, k); });
}

}  // namespace steady::cpu
