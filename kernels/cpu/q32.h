// q4_1, q5_0 and q5_1: llama.cpp's other blocks of 32 weights (Q4_0 is q4 and Q8_0 is q8_0, matmul.h),
// held as they lie in a GGUF file, so that a file's matrices of these types keep their own 5 to 6
// bits a weight and their values exactly. llama.cpp writes them where a K-quant does not fit: a row
// that is not a whole number of 256-weight super-blocks gets Q5_0 in place of Q4_K and Q5_1 in place
// of Q5_K (most matrices of SmolLM2's or Qwen2.5-0.5B's Q4_K_M and Q5_K_M files). A row of `in`
// weights is cut into blocks of kQ8Block (32), the last one zero padded; a block is
//     Q4_1  20 bytes: d, m fp16; qs[16]             weight = d q + m,       q 0..15
//     Q5_0  22 bytes: d fp16; qh[4]; qs[16]         weight = d (q - 16),    q 0..31
//     Q5_1  24 bytes: d, m fp16; qh[4]; qs[16]      weight = d q + m,       q 0..31
// qs[i] holds the q of weight i in its low nibble and of weight 16 + i in its high one; qh (32 bits,
// little endian) the fifth bit of weight i in bit i. d q is exact in fp32 and the sum with m rounds
// once, as ggml's dequantize_row_q4_1, _q5_0 and _q5_1 compute them.
//
// No quantizer: these are a GGUF file's types, not --cpu-weights choices; the loader views a file's
// blocks in place (a copy only where llama's q/k rows are permuted). The widening kernel
// (MatMulNTQ32) reads the blocks on any CPU, the file's values exactly (--cpu-weights stored); the
// int8 kernels read them packed (kernels/cpu/matmul_dot.h PackQ32Dot).
#ifndef STEADY_KERNELS_CPU_Q32_H_
#define STEADY_KERNELS_CPU_Q32_H_

#include <cstdint>
#include <cstring>

#include "kernels/cpu/matmul.h"

namespace steady::cpu {

enum class Q32Type { kQ4_1, kQ5_0, kQ5_1 };

// What a type's block holds: its bytes, whether it has m (after d) and qh (the fifth bits), what q
// is offset by (16 for q5_0), and where its 16 bytes of nibbles start.
struct Q32Format {
  int64_t bytes;
  bool min, fifth;
  int offset;
  int qs;
};
inline constexpr Q32Format Q32FormatOf(Q32Type t) {
  return t == Q32Type::kQ4_1 ? Q32Format{20, true, false, 0, 4}
         : t == Q32Type::kQ5_0 ? Q32Format{22, false, true, 16, 6}
                               : Q32Format{24, true, true, 0, 8};
}
// Bytes of a matrix [rows, in]: its rows' blocks, one after another.
inline int64_t Q32Bytes(Q32Type t, int64_t rows, int64_t in) { return rows * Q8BlocksPerRow(in) * Q32FormatOf(t).bytes; }

// A matrix [out, in] of `type`'s blocks: [out, blocks] of Q32FormatOf(type).bytes, no alignment needed.
struct Q32Weights {
  Q32Type type = Q32Type::kQ5_0;
  const uint8_t* blocks = nullptr;
};

// q (0..15 or 0..31, before the offset) of weight i (0..31) of a block.
inline int Q32BlockQ(Q32Type t, const uint8_t* block, int i) {
  const Q32Format f = Q32FormatOf(t);
  int q = (block[f.qs + i % 16] >> (4 * (i / 16))) & 15;
  if (f.fifth) {
    uint32_t qh;
    std::memcpy(&qh, block + (f.min ? 4 : 2), 4);
    q |= int((qh >> i) & 1) << 4;
  }
  return q;
}
// Weight (j, k) of a matrix with `in` inputs, and rows [r0, r1) as fp32 values into out[(r1 - r0) * in].
float Q32WeightValue(Q32Weights w, int64_t in, int64_t j, int64_t k);
void DequantizeQ32(Q32Weights w, int64_t in, int64_t r0, int64_t r1, float* out);
// Rows [r0, r1) of a q5_0 matrix as q8 (q [(r1 - r0), in] of q - 16, scales d), the same values.
void Q5_0ToQ8(Q32Weights w, int64_t in, int64_t r0, int64_t r1, int8_t* q, float* scales);

// y = x w^T, the widening kernel (kernels/cpu/matmul.cc: MatMulNTSmallRows's tiles and threads, each
// weight widened to its fp32 value in registers): any CPU, any number of rows, batch- and
// thread-invariant.
void MatMulNTQ32(const float* x, int rows, int in, Q32Weights w, int out, float* y);
// The double-precision product of x and the weights (Q32WeightValue).
void MatMulNTQ32Reference(const float* x, int rows, int in, Q32Weights w, int out, float* y);

}  // namespace steady::cpu

#endif  // STEADY_KERNELS_CPU_Q32_H_
