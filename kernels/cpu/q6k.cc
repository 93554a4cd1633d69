// q6k's plain readers and reference product (q6k.h); the widening kernel is in matmul.cc, the int8
// kernels' packing in matmul_dot.cc.
#include "kernels/cpu/q6k.h"

#include <cstring>

#include "kernels/cpu/matmul.h"

namespace steady::cpu {

Q6KEntry Q6KBlockEntry(const uint8_t* block, int k) {
  const int half = k / 128, t = (k % 128) / 32, l = k % 32;
  const uint8_t low = block[64 * half + l + 32 * (t % 2)];
  const uint8_t high = block[128 + 32 * half + l];
  Q6KEntry e;
  e.q = ((t < 2 ? low & 0x0f : low >> 4) | (((high >> (2 * t)) & 3) << 4));
  e.scale = int8_t(block[192 + k / kQ6KSub]);
  std::memcpy(&e.d, block + 208, 2);
  return e;
}

float Q6KWeightValue(Q6KWeights w, int64_t in, int64_t j, int64_t k) {
  const uint8_t* block = w.blocks + (j * Q6KBlocksPerRow(in) + k / kQ6KBlock) * kQ6KBlockBytes;
  const Q6KEntry e = Q6KBlockEntry(block, int(k % kQ6KBlock));
  return F16ToFloat(e.d) * float(e.scale) * float(e.q - 32);
}

void DequantizeQ6K(Q6KWeights w, int64_t in, int64_t r0, int64_t r1, float* out) {
  // Q6KWeightValue's arithmetic, d widened once a super-block.
  for (int64_t j = r0; j < r1; ++j) {
    float* row = out + (j - r0) * in;
    for (int64_t b = 0; b * kQ6KBlock < in; ++b) {
      const uint8_t* block = w.blocks + j * Q6KBytes(1, in) + b * kQ6KBlockBytes;
      uint16_t half;
      std::memcpy(&half, block + 208, 2);
      const float d = F16ToFloat(half);
      for (int i = 0; i < kQ6KBlock && b * kQ6KBlock + i < in; ++i) {
        const Q6KEntry e = Q6KBlockEntry(block, i);
        row[b * kQ6KBlock + i] = d * float(e.scale) * float(e.q - 32);
      }
    }
  }
}

void MatMulNTQ6KReference(const float* x, int rows, int in, Q6KWeights w, int out, float* y) {
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < out; ++j) {
      double s = 0;
      for (int k = 0; k < in; ++k) s += double(x[int64_t(r) * in + k]) * Q6KWeightValue(w, in, j, k);
      y[int64_t(r) * out + j] = float(s);
    }
  }
}

}  // namespace steady::cpu
