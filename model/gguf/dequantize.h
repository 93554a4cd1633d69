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
//   Q2_K  256 values: 16 bytes of a 4-bit scale and a 4-bit min per 16 values, 64 bytes of 2-bit q, fp16
//                     d and dmin; per 16 values x = (d * scale) * q - (dmin * min)
//   Q3_K  256 values: 32 bytes holding each value's third bit, 64 bytes of its low 2 bits, 12 bytes
//                     of sixteen 6-bit scales, fp16 d; per 16 values x = (d * (scale - 32)) * q with
//                     q = low bits - (third bit ? 0 : 4), -4..3
//   IQ4_NL 32 values: fp16 d, 16 bytes of 4-bit indices into a table of 16 int8 values (from -127
//                     to 113, ggml's kvalues_iq4nl), arranged as Q4_0's nibbles; x = d * table[index]
//   IQ4_XS 256 values: fp16 d, 2 + 4 bytes of eight 6-bit scales, 128 bytes of indices into the same
//                     table; per 32 values x = (d * (scale - 32)) * table[index]
#ifndef STEADY_MODEL_GGUF_DEQUANTIZE_H_
#define STEADY_MODEL_GGUF_DEQUANTIZE_H_

#include <cstdint>
#include <string>

namespace steady {

// Whether Dequantize handles the ggml type number.
bool CanDequantize(uint32_t ggml_type);
// "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS".
std::string DequantizableTypeNames();
// Writes `n` values (a whole number of the type's blocks) from `blocks` to `out`. `blocks` may be
// unaligned. The type must be one CanDequantize accepts.
void Dequantize(uint32_t ggml_type, const void* blocks, int64_t n, float* out);

}  // namespace steady

#endif  // STEADY_MODEL_GGUF_DEQUANTIZE_H_
