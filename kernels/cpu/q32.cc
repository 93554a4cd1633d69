// q32's plain readers and reference product (q32.h); the widening kernel is in matmul.cc.
#include "kernels/cpu/q32.h"

namespace steady::cpu {

namespace {

// Weight i of a block whose d and m are given: d (q - offset), exact, or d q + m, rounded once.
float BlockValue(Q32Type t, const uint8_t* block, int i, float d, float m) {
  const Q32Format f = Q32FormatOf(t);
  const float q = float(Q32BlockQ(t, block, i) - f.offset);
  return f.min ? d * q + m : d * q;
}
float MinOf(Q32Type t, const uint8_t* block) { return Q32FormatOf(t).min ? F16At(block + 2) : 0.0f; }

}  // namespace

float Q32WeightValue(Q32Weights w, int64_t in, int64_t j, int64_t k) {
  const uint8_t* block = w.blocks + (j * Q8BlocksPerRow(in) + k / kQ8Block) * Q32FormatOf(w.type).bytes;
  return BlockValue(w.type, block, int(k % kQ8Block), F16At(block), MinOf(w.type, block));
}

void DequantizeQ32(Q32Weights w, int64_t in, int64_t r0, int64_t r1, float* out) {
  const int64_t blocks = Q8BlocksPerRow(in), bytes = Q32FormatOf(w.type).bytes;
  for (int64_t j = r0; j < r1; ++j) {
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* block = w.blocks + (j * blocks + b) * bytes;
      const float d = F16At(block), m = MinOf(w.type, block);  // widened once a block
      float* row = out + (j - r0) * in + b * kQ8Block;
      for (int i = 0; i < kQ8Block && b * kQ8Block + i < in; ++i) row[i] = BlockValue(w.type, block, i, d, m);
    }
  }
}

void Q5_0ToQ8(Q32Weights w, int64_t in, int64_t r0, int64_t r1, int8_t* q, float* scales) {
  const int64_t blocks = Q8BlocksPerRow(in), bytes = Q32FormatOf(Q32Type::kQ5_0).bytes;
  for (int64_t j = r0; j < r1; ++j) {
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* block = w.blocks + (j * blocks + b) * bytes;
      scales[(j - r0) * blocks + b] = F16At(block);
      for (int64_t i = 0; i < kQ8Block && b * kQ8Block + i < in; ++i) {
        q[(j - r0) * in + b * kQ8Block + i] = int8_t(Q32BlockQ(Q32Type::kQ5_0, block, int(i)) - 16);
      }
    }
  }
}

void MatMulNTQ32Reference(const float* x, int rows, int in, Q32Weights w, int out, float* y) {
  ReferenceProduct(x, rows, in, out, y, [&](int64_t j, int64_t k) { return Q32WeightValue(w, in, j, k); });
}

}  // namespace steady::cpu
