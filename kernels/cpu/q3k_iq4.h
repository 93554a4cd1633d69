// q3k, iq4_nl and iq4_xs: llama.cpp's Q3_K, IQ4_NL and IQ4_XS blocks as they lie in a GGUF file (the
// matrices of Q3_K_S/M/L and IQ4_XS files), read in place at their own 3.44, 4.5 and 4.25 bits a
// weight. Steady has no int8 kernels of their own: each is packed for the int8 kernels of a format
// that holds the same values (q3k as q6k, the IQ4s as q8: Q3KToQ6K and Iq4*ToQ8 below make a passing
// copy in that format, which matmul_dot.h packs), and the widening kernels below read them for
// --cpu-weights stored and on CPUs without int8 kernels.
//
// Q3_K, 110 bytes per 256 weights (ggml's block_q3_K): hmask[32], qs[64], scales[12], d (fp16).
// Value v = 128 h + 32 j + l (h 0..1, j 0..3, l 0..31) is bits 2j, 2j + 1 of qs[32 h + l], less 4
// unless bit 4h + j of hmask[l] is set: q in -4..3. Sub-block v / 16 has a 6-bit scale (Q3KScale,
// less 32: -32..31), and the value is (d * scale) * q, d * scale exact in fp32 and the product rounded
// once, as ggml's dequantize_row_q3_K. It is Q6_K's arithmetic on Q6_K's sub-blocks of 16: a Q3_K
// super-block is a Q6_K one with q + 32 (28..35) as Q6_K's q and the scale as its int8 scale.
//
// IQ4_NL, 18 bytes per 32 (block_iq4_nl): d (fp16), qs[16]; IQ4_XS, 136 bytes per 256
// (block_iq4_xs): d, scales_h (16 bits), scales_l[4], qs[128], eight runs of 32 with a 6-bit scale
// each (Iq4XsScale, less 32). A run's value i is kIq4Values[its index], the index the low nibble of
// qs[i] (i < 16) or the high nibble of qs[i - 16], times d (IQ4_NL) or d * scale (IQ4_XS, exact in
// fp32), rounded once, as ggml's dequantize_row_iq4_nl and _iq4_xs. That is q8's value (an int8 q,
// -127..113, times an fp32 scale per 32).
#ifndef STEADY_KERNELS_CPU_Q3K_IQ4_H_
#define STEADY_KERNELS_CPU_Q3K_IQ4_H_

#include <cstdint>

#include "kernels/cpu/matmul.h"

namespace steady::cpu {

inline constexpr int kQ3KBlock = 256;
inline constexpr int64_t kQ3KBlockBytes = 110;
inline constexpr int64_t kIq4NlBlockBytes = 18;   // per kQ8Block (32) weights
inline constexpr int kIq4XsBlock = 256;
inline constexpr int64_t kIq4XsBlockBytes = 136;
// Bytes of a matrix [out, in] (`in` a whole number of blocks: 256, 32, 256).
inline int64_t Q3KBytes(int64_t out, int64_t in) { return out * (in / kQ3KBlock) * kQ3KBlockBytes; }
inline int64_t Iq4NlBytes(int64_t out, int64_t in) { return out * (in / kQ8Block) * kIq4NlBlockBytes; }
inline int64_t Iq4XsBytes(int64_t out, int64_t in) { return out * (in / kIq4XsBlock) * kIq4XsBlockBytes; }

// Matrices [out, in] of the file's blocks, row after row, no alignment needed.
struct Q3KWeights {
  const uint8_t* blocks = nullptr;
};
struct Iq4NlWeights {
  const uint8_t* blocks = nullptr;
};
struct Iq4XsWeights {
  const uint8_t* blocks = nullptr;
};

// q (-4..3) of value v (0..255) of a Q3_K super-block, and sub-block s's scale less 32 (-32..31): the
// 6-bit scales are the low (s < 8) or high nibbles of bytes 0..7 of `scales` with two bits of bytes
// 8..11 above them (ggml's kmask unpacking, written per scale).
inline int Q3KBlockQ(const uint8_t* block, int v) {
  const int h = v / 128, j = (v % 128) / 32, l = v % 32;
  const int low = (block[32 + 32 * h + l] >> (2 * j)) & 3;
  return low - ((block[l] >> (4 * h + j)) & 1 ? 0 : 4);
}
inline int Q3KScale(const uint8_t* block, int s) {
  const uint8_t* scales = block + 96;
  const int low = s < 8 ? scales[s] & 0x0f : scales[s - 8] >> 4;
  const int high = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
  return (low | high << 4) - 32;
}
// d of a Q3_K super-block.
inline float Q3KBlockD(const uint8_t* block) { return F16At(block + 108); }

// ggml's kvalues_iq4nl, and the value of index i (0..31) of a run of 32 whose 16 bytes are at qs.
inline constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
inline int Iq4RunValue(const uint8_t* qs, int i) { return kIq4Values[i < 16 ? qs[i] & 0x0f : qs[i - 16] >> 4]; }
// Run r's (0..7) scale of an IQ4_XS super-block less 32 (-32..31): 4 bits of scales_l, 2 of scales_h.
inline int Iq4XsScale(const uint8_t* block, int r) {
  const int high = ((block[2] | block[3] << 8) >> (2 * r)) & 3;
  return (((block[4 + r / 2] >> (4 * (r % 2))) & 0x0f) | high << 4) - 32;
}

// Weight (j, k) of a matrix with `in` inputs in fp32: ggml's value.
float Q3KWeightValue(Q3KWeights w, int64_t in, int64_t j, int64_t k);
float Iq4NlWeightValue(Iq4NlWeights w, int64_t in, int64_t j, int64_t k);
float Iq4XsWeightValue(Iq4XsWeights w, int64_t in, int64_t j, int64_t k);
// Rows [r0, r1) as fp32 values into out[(r1 - r0) * in].
void DequantizeQ3K(Q3KWeights w, int64_t in, int64_t r0, int64_t r1, float* out);
void DequantizeIq4Nl(Iq4NlWeights w, int64_t in, int64_t r0, int64_t r1, float* out);
void DequantizeIq4Xs(Iq4XsWeights w, int64_t in, int64_t r0, int64_t r1, float* out);

// Rows [r0, r1) in the formats of the same values, for packing: q3k as q6k super-blocks (q6k.h,
// Q6KBytes(r1 - r0, in) bytes at out), the IQ4s as q8 (int8 values [r1 - r0, in] at q, one fp32 scale
// per 32 at scales).
void Q3KToQ6K(Q3KWeights w, int64_t in, int64_t r0, int64_t r1, uint8_t* out);
void Iq4NlToQ8(Iq4NlWeights w, int64_t in, int64_t r0, int64_t r1, int8_t* q, float* scales);
void Iq4XsToQ8(Iq4XsWeights w, int64_t in, int64_t r0, int64_t r1, int8_t* q, float* scales);

// y = x w^T, the widening kernels (kernels/cpu/matmul.cc: MatMulNTSmallRows's tiles and threads, a
// chunk of each weight row widened to its fp32 values in L1): any CPU, any number of rows, batch- and
// thread-invariant; --cpu-weights stored's path.
void MatMulNTQ3K(const float* x, int rows, int in, Q3KWeights w, int out, float* y);
void MatMulNTIq4Nl(const float* x, int rows, int in, Iq4NlWeights w, int out, float* y);
void MatMulNTIq4Xs(const float* x, int rows, int in, Iq4XsWeights w, int out, float* y);

}  // namespace steady::cpu

#endif  // STEADY_KERNELS_CPU_Q3K_IQ4_H_
