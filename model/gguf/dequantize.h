// GGUF tensor data to fp32, following ggml's published block layouts (ggml-common.h) and the
// arithmetic of its reference dequantize_row_* functions, so that the result is bit for bit ggml's
// (tests/cli/gguf_llamacpp.sh checks it against libggml itself).
//
//   F32, F16, BF16  one value each (exact)
//   Q8_0   32 values: fp16 d, 32 x int8 q;                      x = q * d
//   Q4_0   32 values: fp16 d, 16 bytes of 4-bit q (low nibbles are values 0..15, high 16..31);
//                     x = (q - 8) * d
//   Q4_1   32 values: fp16 d, fp16 m, 16 bytes of 4-bit q;        x = q * d + m
//   Q5_0   32 values: fp16 d, 4 bytes of fifth bits (bit j for value j), 16 bytes of 4-bit q;
//                     x = (q - 16) * d
//   Q5_1   32 values: fp16 d, fp16 m, 4 bytes of fifth bits, 16 bytes of 4-bit q; x = q * d + m
//   (llama.cpp's quantizer falls back to these where a K-quant's rows are not 256-value blocks)
//   Q4_K  256 values: fp16 d, fp16 dmin, 12 bytes of eight 6-bit (scale, min) pairs, 128 bytes of
//                     4-bit q; per 32 values x = (d * scale) * q - (dmin * min)
//   Q5_K  256 values: as Q4_K plus 32 bytes holding each value's fifth bit
//   Q6_K  256 values: 128 bytes low 4 bits, 64 bytes high 2 bits, 16 x int8 scales, fp16 d;
//                     per 16 values x = (d * scale) * (q - 32)
//   Q3_K  256 values: 32 bytes holding each value's third bit, 64 bytes of its low 2 bits, 12 bytes
//                     of sixteen 6-bit scales, fp16 d; per 16 values x = (d * (scale - 32)) * q with
//                     q = low bits - (third bit ? 0 : 4), -4..3
//   IQ4_NL 32 values: fp16 d, 16 bytes of 4-bit indices into a table of 16 int8 values (from -127
//                     to 113, ggml's kvalues_iq4nl), arranged as Q4_0's nibbles; x = d * table[index]
//   IQ4_XS 256 values: fp16 d, 2 + 4 bytes of eight 6-bit scales, 128 bytes of indices into the same
//                     table; per 32 values x = (d * (scale - 32)) * table[index]
//
// Steady has no kernels of Q3_K, IQ4_NL and IQ4_XS of their own: the loader holds them in formats of
// Steady's that hold the same values (below), which the widening and int8 kernels read.
#ifndef STEADY_MODEL_GGUF_DEQUANTIZE_H_
#define STEADY_MODEL_GGUF_DEQUANTIZE_H_

#include <cstdint>
#include <string>

namespace steady {

// Whether Dequantize handles the ggml type number.
bool CanDequantize(uint32_t ggml_type);
// "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q3_K, IQ4_NL, IQ4_XS".
std::string DequantizableTypeNames();
// Writes `n` values (a whole number of the type's blocks) from `blocks` to `out`. `blocks` may be
// unaligned. The type must be one CanDequantize accepts.
void Dequantize(uint32_t ggml_type, const void* blocks, int64_t n, float* out);

// A row of `n` Q3_K values (n / 256 super-blocks) as Q6_K super-blocks (210 bytes each, into q6k)
// of the same values bit for bit: the sixteen sub-blocks of 16 and d are Q6_K's too, a scale - 32
// (-32..31) is a Q6_K int8 scale and q + 32 (28..35) a Q6_K 6-bit q, and Q6_K's (d * scale) * (q - 32)
// is Q3_K's arithmetic. 6.56 bits a weight in place of 3.44.
void Q3KAsQ6K(const void* blocks, int64_t n, uint8_t* q6k);
// A row of `n` IQ4_NL or IQ4_XS values as q8 (kernels/cpu/matmul.h: int8 values, one fp32 scale per
// 32): q the table's value (-127..113) and the scale d (IQ4_NL) or d * (scale - 32) (IQ4_XS), exact in
// fp32 (an fp16 value times 6 bits), so float(q) * scale is ggml's value bit for bit. 9 bits a weight
// in place of 4.5 and 4.25.
void Iq4AsQ8(uint32_t ggml_type, const void* blocks, int64_t n, int8_t* q, float* scales);

}  // namespace steady

#endif  // STEADY_MODEL_GGUF_DEQUANTIZE_H_
