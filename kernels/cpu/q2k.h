// q2k: llama.cpp's Q2_K blocks as they lie in a GGUF file (most matrices of a Q2_K file), read in
// place at their own 2.625 bits a weight. Q2_K, 84 bytes per 256 weights (ggml's block_q2_K):
//     scales[16]  a 4-bit scale (low nibble) and a 4-bit minimum (high nibble) per sub-block of 16,
//     qs[64]      2-bit q, d and dmin (fp16).
// Value v = 128 h + 32 j + l (h 0..1, j 0..3, l 0..31) is bits 2j, 2j + 1 of qs[32 h + l] (q 0..3),
// in sub-block v / 16, and its value is (d * scale) * q - (dmin * min): the two products exact in
// fp32, the product with q exact too, the difference rounded once, as ggml's dequantize_row_q2_K.
//
// Only a widening kernel (below): no int8 kernel reads q2k, and no other format of Steady's holds its
// values (its sub-blocks of 16 each have a minimum; q4k's have one per 32), so --cpu-weights auto
// keeps it on the widening kernel, fp32 arithmetic on the file's values.
#ifndef STEADY_KERNELS_CPU_Q2K_H_
#define STEADY_KERNELS_CPU_Q2K_H_

#include <cstdint>

#include "kernels/cpu/matmul.h"

namespace steady::cpu {

inline constexpr int kQ2KBlock = 256;
inline constexpr int64_t kQ2KBlockBytes = 84;
// Bytes of a matrix [out, in] (`in` a whole number of super-blocks).
inline int64_t Q2KBytes(int64_t out, int64_t in) { return out * (in / kQ2KBlock) * kQ2KBlockBytes; }

// A matrix [out, in] of the file's blocks, row after row, no alignment needed.
struct Q2KWeights {
  const uint8_t* blocks = nullptr;
};

// q (0..3) of value v (0..255) of a super-block; sub-block s's scale and minimum (0..15 each); d and dmin.
inline int Q2KBlockQ(const uint8_t* block, int v) {
  const int h = v / 128, j = (v % 128) / 32, l = v % 32;
  return (block[16 + 32 * h + l] >> (2 * j)) & 3;
}
inline int Q2KScale(const uint8_t* block, int s) { return block[s] & 0x0f; }
inline int Q2KMin(const uint8_t* block, int s) { return block[s] >> 4; }
inline float Q2KBlockD(const uint8_t* block) { return F16At(block + 80); }
inline float Q2KBlockDmin(const uint8_t* block) { return F16At(block + 82); }

// Weight (j, k) of a matrix with `in` inputs in fp32: ggml's value.
float Q2KWeightValue(Q2KWeights w, int64_t in, int64_t j, int64_t k);
// Rows [r0, r1) as fp32 values into out[(r1 - r0) * in].
void DequantizeQ2K(Q2KWeights w, int64_t in, int64_t r0, int64_t r1, float* out);

// y = x w^T, the widening kernel (kernels/cpu/matmul.cc: MatMulNTSmallRows's tiles and threads, a
// super-block of each weight row widened to its fp32 values in L1): any CPU, any number of rows,
// batch- and thread-invariant.
void MatMulNTQ2K(const float* x, int rows, int in, Q2KWeights w, int out, float* y);

}  // namespace steady::cpu

#endif  // STEADY_KERNELS_CPU_Q2K_H_
