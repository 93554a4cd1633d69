// q6k's plain readers and reference product (q6k.h); the widening kernel is in matmul.cc, the int8
// kernels' packing in matmul_dot.cc.
#include "kernels/cpu/q6k.h"

#include "kernels/cpu/matmul.h"

namespace steady::cpu {

float Q6KWeightValue(Q6KWeights w, int64_t in, int64_t j, int64_t k) {
  const uint8_t* block = w.blocks + (j * Q6KBlocksPerRow(in) + k / kQ6KBlock) * kQ6KBlockBytes;
  const int i = int(k % kQ6KBlock);
  return F16At(block + 208) * float(int8_t(block[192 + i / kQ6KSub])) * float(Q6KBlockQ(block, i) - 32);
}

void DequantizeQ6K(Q6KWeights w, int64_t in, int64_t r0, int64_t r1, float* out) {
  // Q6KWeightValue's arithmetic, d widened once a super-block.
  for (int64_t j = r0; j < r1; ++j) {
    float* row = out + (j - r0) * in;
    for (int64_t b = 0; b * kQ6KBlock < in; ++b) {
      const uint8_t* block = w.blocks + j * Q6KBytes(1, in) + b * kQ6KBlockBytes;
      const float d = F16At(block + 208);
      for (int i = 0; i < kQ6KBlock && b * kQ6KBlock + i < in; ++i) {
        row[b * kQ6KBlock + i] = d * float(int8_t(block[192 + i / kQ6KSub])) * float(Q6KBlockQ(block, i) - 32);
      }
    }
  }
}

void MatMulNTQ6KReference(const float* x, int rows, int in, Q6KWeights w, int out, float* y) {
  ReferenceProduct(x, rows, in, out, y, [&](int64_t j, int64_t k) { return Q6KWeightValue(w, in, j, k); });
}

}  // namespace steady::cpu
