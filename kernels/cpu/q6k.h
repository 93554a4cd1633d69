// q6k: llama.cpp's Q6_K blocks as they lie in a GGUF file, so that a file's Q6_K matrices (the output
// and some attn_v and ffn_down layers of every Q4_K_M file) run at their own 6.5625 bits a weight
// instead of widened to bf16 (16 bits). A row of `in` weights is cut into super-blocks of kQ6KBlock
// (256) weights (the last one zero padded), each of 16 sub-blocks of kQ6KSub (16). A super-block is
// ggml's block_q6_K, 210 bytes:
//     ql[128]  the low 4 bits of every q, qh[64]  the high 2 bits, sc[16]  int8 scales, d  fp16;
// in ggml's order: half h (0, 1) of the super-block holds values 128 h + l + 32 t (t = 0..3,
// l = 0..31), whose low bits are the low (t = 0, 1) or high (t = 2, 3) nibble of ql[64 h + l + 32 (t % 2)]
// and whose high bits are bits 2t, 2t + 1 of qh[32 h + l]. Weight k of sub-block s is
//     (d * sc[s]) * (q - 32),        q in 0..63,
// d * sc[s] exact in fp32 (11 significant bits times 8), the product with q - 32 rounded once, as
// ggml's dequantize_row_q6_K computes it. No conversion from a file: the loader copies its rows (or
// views them in place), and packing for the int8 kernels (matmul_dot.h PackQ6KDot) regroups them.
//
// The row-major form (this file; the widening kernel MatMulNTQ6K reads it on any CPU) and the form
// packed for VPDPBUSD / SDOT (kernels/cpu/matmul_dot.h PackQ6KDot, made from this one). There is no
// quantizer: q6k is a GGUF file's type, not a --cpu-weights choice.
#ifndef STEADY_KERNELS_CPU_Q6K_H_
#define STEADY_KERNELS_CPU_Q6K_H_

#include <cstdint>

namespace steady::cpu {

inline constexpr int kQ6KBlock = 256;
inline constexpr int kQ6KSub = 16;
inline constexpr int64_t kQ6KBlockBytes = 210;  // ql, qh, sc, d
inline int64_t Q6KBlocksPerRow(int64_t in) { return (in + kQ6KBlock - 1) / kQ6KBlock; }
// Bytes of a q6k matrix [out, in]: its rows' super-blocks, one after another.
inline int64_t Q6KBytes(int64_t out, int64_t in) { return out * Q6KBlocksPerRow(in) * kQ6KBlockBytes; }

// A matrix [out, in] in q6k: [out, blocks] super-blocks of kQ6KBlockBytes, no alignment needed.
struct Q6KWeights {
  const uint8_t* blocks = nullptr;
};

// q (0..63) of value k (0..255) of a super-block; its sub-block's scale is int8_t(block[192 + k / 16]).
inline int Q6KBlockQ(const uint8_t* block, int k) {
  const int half = k / 128, t = (k % 128) / 32, l = k % 32;
  const uint8_t low = block[64 * half + l + 32 * (t % 2)], high = block[128 + 32 * half + l];
  return (t < 2 ? low & 0x0f : low >> 4) | (((high >> (2 * t)) & 3) << 4);
}
// Weight (j, k) of a q6k matrix with `in` inputs: (d * sc) * (q - 32) in fp32.
float Q6KWeightValue(Q6KWeights w, int64_t in, int64_t j, int64_t k);
// Rows [r0, r1) as fp32 values into out[(r1 - r0) * in].
void DequantizeQ6K(Q6KWeights w, int64_t in, int64_t r0, int64_t r1, float* out);

// y = x w^T with q6k weights, the widening kernel (kernels/cpu/matmul.cc: MatMulNTSmallRows's tiles
// and threads, each weight widened to its fp32 value in registers): any CPU, any number of rows,
// batch- and thread-invariant. The fallback where no int8 kernel exists, and --cpu-weights stored's path.
void MatMulNTQ6K(const float* x, int rows, int in, Q6KWeights w, int out, float* y);
// The double-precision product of x and the weights (Q6KWeightValue).
void MatMulNTQ6KReference(const float* x, int rows, int in, Q6KWeights w, int out, float* y);

}  // namespace steady::cpu

#endif  // STEADY_KERNELS_CPU_Q6K_H_
