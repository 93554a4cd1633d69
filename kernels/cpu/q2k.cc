// q2k's plain readers (q2k.h); the widening kernel is in matmul.cc. Each value is ggml's: (d * scale)
// * q - (dmin * min).
#include "kernels/cpu/q2k.h"

namespace steady::cpu {

float Q2KWeightValue(Q2KWeights w, int64_t in, int64_t j, int64_t k) {
  const uint8_t* block = w.blocks + (j * (in / kQ2KBlock) + k / kQ2KBlock) * kQ2KBlockBytes;
  const int v = int(k % kQ2KBlock), s = v / 16;
  return Q2KBlockD(block) * float(Q2KScale(block, s)) * float(Q2KBlockQ(block, v)) -
         Q2KBlockDmin(block) * float(Q2KMin(block, s));
}

void DequantizeQ2K(Q2KWeights w, int64_t in, int64_t r0, int64_t r1, float* out) {
  for (int64_t j = r0; j < r1; ++j) {
    for (int64_t b = 0; b < in / kQ2KBlock; ++b) {
      const uint8_t* block = w.blocks + (j * (in / kQ2KBlock) + b) * kQ2KBlockBytes;
      const float d = Q2KBlockD(block), dmin = Q2KBlockDmin(block);
      float* y = out + (j - r0) * in + b * kQ2KBlock;
      for (int s = 0; s < kQ2KBlock / 16; ++s) {
        const float dl = d * float(Q2KScale(block, s)), ml = dmin * float(Q2KMin(block, s));
        for (int v = 16 * s; v < 16 * s + 16; ++v) y[v] = dl * float(Q2KBlockQ(block, v)) - ml;
      }
    }
  }
}

}  // namespace steady::cpu
