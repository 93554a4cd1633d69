// q5k's plain readers and reference product (q5k.h); the widening kernel is in matmul.cc.
#include "kernels/cpu/q5k.h"

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/q4k.h"

namespace steady::cpu {

// q4k's d, dmin and 6-bit numbers (Q4KBlockScales reads them in a q5k block too): d sc q - dmin m.
float Q5KWeightValue(Q5KWeights w, int64_t in, int64_t j, int64_t k) {
  const uint8_t* block = w.blocks + (j * Q5KBlocksPerRow(in) + k / kQ5KBlock) * kQ5KBlockBytes;
  const int i = int(k % kQ5KBlock), s = i / kQ5KSub;
  const Q4KScales sc = Q4KBlockScales(block);
  return F16ToFloat(sc.d) * sc.sc[s] * float(Q5KBlockQ(block, i)) - F16ToFloat(sc.dmin) * sc.m[s];
}

void DequantizeQ5K(Q5KWeights w, int64_t in, int64_t r0, int64_t r1, float* out) {
  // Q5KWeightValue's arithmetic, the scales unpacked once a super-block.
  for (int64_t j = r0; j < r1; ++j) {
    float* row = out + (j - r0) * in;
    for (int64_t b = 0; b * kQ5KBlock < in; ++b) {
      const uint8_t* block = w.blocks + j * Q5KBytes(1, in) + b * kQ5KBlockBytes;
      const Q4KScales sc = Q4KBlockScales(block);
      const float d = F16ToFloat(sc.d), dmin = F16ToFloat(sc.dmin);
      for (int i = 0; i < kQ5KBlock && b * kQ5KBlock + i < in; ++i) {
        const int s = i / kQ5KSub;
        row[b * kQ5KBlock + i] = d * sc.sc[s] * float(Q5KBlockQ(block, i)) - dmin * sc.m[s];
      }
    }
  }
}

void MatMulNTQ5KReference(const float* x, int rows, int in, Q5KWeights w, int out, float* y) {
  ReferenceProduct(x, rows, in, out, y, [&](int64_t j, int64_t k) { return Q5KWeightValue(w, in, j, k); });
}

}  // namespace steady::cpu
