// q5k: llama.cpp's Q5_K blocks as they lie in a GGUF file, so that a file's Q5_K matrices (most of a
// Q5_K_M file) are held at their own 5.5 bits a weight with the file's values, instead of widened to
// bf16 at load. q4k (q4k.h) with a fifth bit: a row of `in` weights is cut into super-blocks of
// kQ5KBlock (256) weights (the last one zero padded), each of 8 sub-blocks of kQ5KSub (32). A
// super-block is ggml's block_q5_K, 176 bytes:
//     d, dmin  fp16;  scales[12]  q4k's 6-bit scales and minimums (Q4KSubScale reads them);
//     qh[32]  bit s of qh[l] is the fifth bit of value l of sub-block s;
//     qs[128]  sub-blocks 2i and 2i + 1 in the low and high nibbles of qs[32i..32i+31], as q4k's.
// Weight l of sub-block s is
//     (d * sc[s]) * q - (dmin * m[s]),        q = nibble + 16 * fifth bit, 0..31,
// both products exact in fp32 (11 significant bits times 6, times 5), the difference rounded once,
// as ggml's dequantize_row_q5_K computes it. No quantizer: q5k is a GGUF file's type, not a
// --cpu-weights choice; the loader views a file's blocks in place (a copy only where llama's q/k
// rows are permuted).
//
// The widening kernel (MatMulNTQ5K) reads the blocks on any CPU, the file's values exactly
// (--cpu-weights stored); --cpu-weights auto packs them for the int8 kernels (kernels/cpu/
// matmul_dot.h PackQ5KDot: q4k's packed record with a vector of fifth bits per sub-block).
#ifndef STEADY_KERNELS_CPU_Q5K_H_
#define STEADY_KERNELS_CPU_Q5K_H_

#include <cstdint>

namespace steady::cpu {

inline constexpr int kQ5KBlock = 256;
inline constexpr int kQ5KSub = 32;
inline constexpr int64_t kQ5KBlockBytes = 176;  // d, dmin, 12 bytes of scales, qh, qs
inline int64_t Q5KBlocksPerRow(int64_t in) { return (in + kQ5KBlock - 1) / kQ5KBlock; }
// Bytes of a q5k matrix [out, in]: its rows' super-blocks, one after another.
inline int64_t Q5KBytes(int64_t out, int64_t in) { return out * Q5KBlocksPerRow(in) * kQ5KBlockBytes; }

// A matrix [out, in] in q5k: [out, blocks] super-blocks of kQ5KBlockBytes, no alignment needed.
struct Q5KWeights {
  const uint8_t* blocks = nullptr;
};

// q (0..31) of value k (0..255) of a super-block.
inline int Q5KBlockQ(const uint8_t* block, int k) {
  const int s = k / kQ5KSub, l = k % kQ5KSub;
  return ((block[48 + kQ5KSub * (s / 2) + l] >> (4 * (s % 2))) & 15) | (((block[16 + l] >> s) & 1) << 4);
}
// Weight (j, k) of a q5k matrix with `in` inputs, and rows [r0, r1) as fp32 values into
// out[(r1 - r0) * in].
float Q5KWeightValue(Q5KWeights w, int64_t in, int64_t j, int64_t k);
void DequantizeQ5K(Q5KWeights w, int64_t in, int64_t r0, int64_t r1, float* out);

// y = x w^T with q5k weights, the widening kernel (kernels/cpu/matmul.cc: MatMulNTSmallRows's tiles
// and threads, each weight widened to its fp32 value in registers): any CPU, any number of rows,
// batch- and thread-invariant.
void MatMulNTQ5K(const float* x, int rows, int in, Q5KWeights w, int out, float* y);
// The double-precision product of x and the weights (Q5KWeightValue).
void MatMulNTQ5KReference(const float* x, int rows, int in, Q5KWeights w, int out, float* y);

}  // namespace steady::cpu

#endif  // STEADY_KERNELS_CPU_Q5K_H_
