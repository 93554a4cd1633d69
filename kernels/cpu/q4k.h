// q4k: llama.cpp's Q4_K, a 4-bit weight format with sub-block scales and minimums (--cpu-weights
// q4k, and a GGUF file's Q4_K tensors read in place; docs/cpu.md). A row of `in` weights is cut into
// super-blocks of kQ4KBlock (256) weights (the last one zero padded), each of 8 sub-blocks of kQ4KSub
// (32). Per super-block an fp16 scale d and an fp16 minimum dmin; per sub-block s a 6-bit scale
// sc[s] and a 6-bit minimum m[s]; per weight a 4-bit q in 0..15. A weight is
//     (d * sc[s]) * q - (dmin * m[s])
// where both products are exact in fp32 (11 significant bits times 6). A super-block is ggml's
// block_q4_K, 144 bytes (4.5 bits a weight): d, dmin, 12 bytes holding the 16 six-bit numbers
// (ggml's get_scale_min_k4 reads them: Q4KBlockScales), then 128 bytes of nibbles, sub-blocks 2i and
// 2i + 1 in the low and high nibbles of bytes 32i..32i+31 (Q4KBlockQ). Until 2026-11-28 the scales
// took a byte each and the nibbles another order (4.625 bits), so a GGUF file's Q4_K was converted
// at load into a copy of Steady's own; now the file's bytes are the matrix.
//
// The row-major form (this file; the widening kernel MatMulNTQ4K reads it on any CPU) and the form
// packed for VPDPBUSD (kernels/cpu/matmul_dot.h PackQ4KDot, made from this one).
#ifndef STEADY_KERNELS_CPU_Q4K_H_
#define STEADY_KERNELS_CPU_Q4K_H_

#include <bit>
#include <cstdint>
#include <cstring>

namespace steady::cpu {

inline constexpr int kQ4KBlock = 256;
inline constexpr int kQ4KSub = 32;
inline int64_t Q4KBlocksPerRow(int64_t in) { return (in + kQ4KBlock - 1) / kQ4KBlock; }

inline constexpr int64_t kQ4KBlockBytes = 144;  // d, dmin, 12 bytes of scales, 128 of nibbles
// Bytes of a q4k matrix [out, in]: its rows' super-blocks, one after another.
inline int64_t Q4KBytes(int64_t out, int64_t in) { return out * Q4KBlocksPerRow(in) * kQ4KBlockBytes; }

// A matrix [out, in] in q4k: [out, blocks] super-blocks of kQ4KBlockBytes, no alignment needed.
struct Q4KWeights {
  const uint8_t* blocks = nullptr;
};

// One super-block's scales unpacked: d and dmin as IEEE half-precision bits, sc and m in 0..63.
struct Q4KScales {
  uint16_t d, dmin;
  uint8_t sc[8], m[8];
};
// Sub-block s's 6-bit scale and minimum, as ggml's get_scale_min_k4 reads them from the 12 bytes at
// block + 4: the plain reading, which Q4KBlockScales (all eight, what the kernels call) is tested
// against.
inline void Q4KSubScale(const uint8_t* block, int s, int* sc, int* m) {
  const uint8_t* q = block + 4;
  *sc = s < 4 ? q[s] & 63 : (q[s + 4] & 0x0F) | ((q[s - 4] >> 6) << 4);
  *m = s < 4 ? q[s + 4] & 63 : (q[s + 4] >> 4) | ((q[s] >> 6) << 4);
}
// All eight, Q4KSubScale's bytes four at a time: with a, b, c the 12 bytes' three words, byte j of
// sc[0..3] is a's & 63, of m[0..3] b's & 63, of sc[4..7] c's low nibble with a's top two bits above
// it, of m[4..7] c's high nibble with b's top two bits (tests/kernels/cpu_dot_test.cc compares the two).
inline Q4KScales Q4KBlockScales(const uint8_t* block) {
  Q4KScales s;
  std::memcpy(&s.d, block, 2);
  std::memcpy(&s.dmin, block + 2, 2);
  uint32_t a, b, c;
  std::memcpy(&a, block + 4, 4);
  std::memcpy(&b, block + 8, 4);
  std::memcpy(&c, block + 12, 4);
  const uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, low2 = 0x03030303;
  const uint32_t words[4] = {a & low6, (c & low4) | (((a >> 6) & low2) << 4), b & low6,
                             ((c >> 4) & low4) | (((b >> 6) & low2) << 4)};
  static_assert(std::endian::native == std::endian::little, "byte j of a word is sub-block j's");
  std::memcpy(s.sc, words, 8);
  std::memcpy(s.m, words + 2, 8);
  return s;
}
// q (0..15) of value k (0..255) of a super-block.
inline int Q4KBlockQ(const uint8_t* block, int k) {
  const int s = k / kQ4KSub;
  return (block[16 + kQ4KSub * (s / 2) + k % kQ4KSub] >> (4 * (s % 2))) & 15;
}

// w [rows, in] in fp32 -> q4k, as llama.cpp's quantize_row_q4_K_ref does: per sub-block, a scale and
// a minimum (<= 0) fitted by weighted least squares over 20 trial scales (make_qkx2_quants, weights
// |w| + the sub-block's rms), then the 8 scales and 8 minimums quantized to 6 bits against their
// largest (d = max scale / 63, dmin = max minimum / 63, in fp16), then every q rounded against the
// quantized scale and minimum, into `blocks` (Q4KBytes(rows, in)). Its bytes are ggml's for the same
// rows (tests/cli/gguf_llamacpp.sh). Sub-blocks are fitted a vector of them at a time, on the compute
// threads (kernels/cpu/q4k_quantize.cc); QuantizeQ4KReference is the plain copy, one sub-block at a
// time, on the calling thread, which QuantizeQ4K equals byte for byte.
void QuantizeQ4K(const float* w, int64_t rows, int in, uint8_t* blocks);
void QuantizeQ4KReference(const float* w, int64_t rows, int in, uint8_t* blocks);
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
