// q4k: a 4-bit weight format with sub-block scales and minimums, after llama.cpp's Q4_K
// (--cpu-weights q4k, docs/cpu.md). A row of `in` weights is cut into super-blocks of kQ4KBlock
// (256) weights (the last one zero padded), each of 8 sub-blocks of kQ4KSub (32). Per super-block
// an fp16 scale d and an fp16 minimum dmin; per sub-block s a 6-bit scale sc[s] and a 6-bit minimum
// m[s]; per weight a 4-bit q in 0..15. A weight is
//     (d * sc[s]) * q - (dmin * m[s])
// where both products are exact in fp32 (11 significant bits times 6). ggml stores the 16 six-bit
// numbers in 12 bytes; here they take a byte each (20 bytes of scales per super-block, 4.625 bits a
// weight against ggml's 4.5) so that the kernels read them without bit surgery. A GGUF Q4_K tensor
// maps onto this row-major form by unpacking its 12 bytes of scales and moving its nibbles (ggml
// keeps sub-blocks 2i and 2i + 1 in the low and high nibbles of one 32-byte run; here a sub-block's
// inputs 0-15 are the low and 16-31 the high nibbles of its own 16 bytes): no requantization.
//
// The row-major form (this file; the widening kernel MatMulNTQ4K reads it on any CPU) and the form
// packed for VPDPBUSD (kernels/cpu/matmul_dot.h PackQ4KDot, made from this one).
#ifndef STEADY_KERNELS_CPU_Q4K_H_
#define STEADY_KERNELS_CPU_Q4K_H_

#include <cstdint>

namespace steady::cpu {

inline constexpr int kQ4KBlock = 256;
inline constexpr int kQ4KSub = 32;
inline int64_t Q4KBlocksPerRow(int64_t in) { return (in + kQ4KBlock - 1) / kQ4KBlock; }

// One super-block's scales: d and dmin as IEEE half-precision bits, sc and m in 0..63.
struct Q4KScales {
  uint16_t d, dmin;
  uint8_t sc[8], m[8];
};
static_assert(sizeof(Q4KScales) == 20);

// A matrix [out, in] in q4k: q holds each row's super-blocks of 128 bytes (sub-block s at 16 s; its
// input i < 16 in the low nibble of byte i, input 16 + i in the high nibble), [out, blocks * 128];
// then scales [out, blocks].
struct Q4KWeights {
  const uint8_t* q = nullptr;
  const Q4KScales* scales = nullptr;
};
// Bytes of a q4k matrix [out, in]: the nibbles, then the scales.
inline int64_t Q4KNibbleBytes(int64_t out, int64_t in) { return out * Q4KBlocksPerRow(in) * (kQ4KBlock / 2); }
inline int64_t Q4KBytes(int64_t out, int64_t in) {
  return Q4KNibbleBytes(out, in) + out * Q4KBlocksPerRow(in) * int64_t(sizeof(Q4KScales));
}

// w [rows, in] in fp32 -> q4k, as llama.cpp's quantize_row_q4_K_ref does: per sub-block, a scale and
// a minimum (<= 0) fitted by weighted least squares over 20 trial scales (make_qkx2_quants, weights
// |w| + the sub-block's rms), then the 8 scales and 8 minimums quantized to 6 bits against their
// largest (d = max scale / 63, dmin = max minimum / 63, in fp16), then every q rounded against the
// quantized scale and minimum. q (Q4KNibbleBytes) and scales ([rows, blocks]).
// Its bytes equal ggml's for the same rows (tests/cli/gguf_llamacpp.sh). Sub-blocks are fitted a
// vector of them at a time, on the compute threads (kernels/cpu/q4k_quantize.cc);
// QuantizeQ4KReference is the plain copy, one sub-block at a time, on the calling thread, which
// QuantizeQ4K equals byte for byte.
void QuantizeQ4K(const float* w, int64_t rows, int in, uint8_t* q, Q4KScales* scales);
void QuantizeQ4KReference(const float* w, int64_t rows, int in, uint8_t* q, Q4KScales* scales);
// The step before the 6-bit rounding, for `subs` sub-blocks of 32 values at x: each one's
// least-squares scale, minimum (as -min >= 0) and q in 0..15 (q[subs * 32]). Every rounding of the
// fit shows in these, where the 6-bit scales hide most of them: the test of the lanes against the
// plain copy compares them too.
void FitQ4KSubBlocks(const float* x, int64_t subs, float* scales, float* mins, uint8_t* q);
void FitQ4KSubBlocksReference(const float* x, int64_t subs, float* scales, float* mins, uint8_t* q);

// Weight (j, k) of a q4k matrix with `in` inputs, and its two parts (scale * q and the minimum,
// each exact in fp32): the value is their difference, rounded to fp32.
struct Q4KParts {
  float scaled, min;
};
Q4KParts Q4KWeightParts(Q4KWeights w, int64_t in, int64_t j, int64_t k);
float Q4KWeightValue(Q4KWeights w, int64_t in, int64_t j, int64_t k);
// Rows [r0, r1) as fp32 values into out[(r1 - r0) * in].
void DequantizeQ4K(Q4KWeights w, int64_t in, int64_t r0, int64_t r1, float* out);

// y = x w^T with q4k weights, the widening kernel (kernels/cpu/matmul.cc: MatMulNTSmallRows's tiles
// and threads, each weight widened to its fp32 value in registers): any CPU, any number of rows,
// batch- and thread-invariant. The fallback where VPDPBUSD is missing, and --cpu-gemm simd's path.
void MatMulNTQ4K(const float* x, int rows, int in, Q4KWeights w, int out, float* y);
// The double-precision product of x and the dequantized weights (Q4KWeightValue).
void MatMulNTQ4KReference(const float* x, int rows, int in, Q4KWeights w, int out, float* y);

}  // namespace steady::cpu

#endif  // STEADY_KERNELS_CPU_Q4K_H_
