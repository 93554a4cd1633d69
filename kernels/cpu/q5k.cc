// q5k's plain readers and reference product (q5k.h); the widening kernel is in matmul.cc.
#include "kernels/cpu/q5k.h"

#include <cstring>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/q4k.h"

namespace steady::cpu {
namespace {

// Sub-block s's scale d * sc and minimum dmin * m, exact in fp32.
void SubScaleMin(const uint8_t* block, int s, float* scale, float* min) {
  uint16_t half[2];
  std::memcpy(half, block, 4);
  int sc, m;
  Q4KSubScale(block, s, &sc, &m);
  *scale = F16ToFloat(half[0]) * float(sc);
  *min = F16ToFloat(half[1]) * float(m);
}

}  // namespace

float Q5KWeightValue(Q5KWeights w, int64_t in, int64_t j, int64_t k) {
  const uint8_t* block = w.blocks + (j * Q5KBlocksPerRow(in) + k / kQ5KBlock) * kQ5KBlockBytes;
  const int i = int(k % kQ5KBlock);
  float scale, min;
  SubScaleMin(block, i / kQ5KSub, &scale, &min);
  return scale * float(Q5KBlockQ(block, i)) - min;
}

void DequantizeQ5K(Q5KWeights w, int64_t in, int64_t r0, int64_t r1, float* out) {
  // Q5KWeightValue's arithmetic, a sub-block's scale and minimum unpacked once.
  for (int64_t j = r0; j < r1; ++j) {
    float* row = out + (j - r0) * in;
    for (int64_t b = 0; b * kQ5KBlock < in; ++b) {
      const uint8_t* block = w.blocks + j * Q5KBytes(1, in) + b * kQ5KBlockBytes;
      for (int s = 0; s < kQ5KBlock / kQ5KSub; ++s) {
        float scale, min;
        SubScaleMin(block, s, &scale, &min);
        for (int l = 0; l < kQ5KSub; ++l) {
          const int64_t k = b * kQ5KBlock + s * kQ5KSub + l;
          if (k < in) row[k] = scale * float(Q5KBlockQ(block, s * kQ5KSub + l)) - min;
        }
      }
    }
  }
}

void MatMulNTQ5KReference(const float* x, int rows, int in, Q5KWeights w, int out, float* y) {
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < out; ++j) {
      double s = 0;
      for (int k = 0; k < in; ++k) s += double(x[int64_t(r) * in + k]) * Q5KWeightValue(w, in, j, k);
      y[int64_t(r) * out + j] = float(s);
    }
  }
}

}  // namespace steady::cpu
