// Decode GEMMs y = x w^T that multiply in the weights' own precision where the CPU has the
// instructions for it (kernels/cpu/matmul_dot.cc): bf16 x bf16 on AVX512_BF16 (VDPBF16PS) and
// int8 x int8 on AVX512_VNNI (VPDPBUSD). The widening kernels of matmul.h stay the fallback and the
// reference. Only kernels/cpu/ and the code above it include this file.
//
// Both change the numerics against the widening kernels: the activations are rounded once per call
// (to bf16, or to q8_0 int8 blocks with an fp32 scale, as llama.cpp's q8_0 x q8_0 does) and the
// product is then that of the rounded activations and the stored weights. Like MatMulNTSmallRows,
// every y[r, j] is the same arithmetic whatever the number of rows, their order or the thread count.
#ifndef STEADY_KERNELS_CPU_MATMUL_DOT_H_
#define STEADY_KERNELS_CPU_MATMUL_DOT_H_

#include <cstdint>

#include "kernels/cpu/matmul.h"

namespace steady::cpu {

// Whether this CPU (and OS) runs the dot-product kernels below; where not, they call the widening
// kernels of matmul.h with the activations as given.
bool Bf16DotAvailable();  // AVX512_BF16 (+ AVX512BW/VL)
bool Int8DotAvailable();  // AVX512_VNNI (+ AVX512BW/VL/DQ)
// The instruction path each weight format takes here, e.g. "avx512_bf16 (VDPBF16PS)" or
// "widening fp32 (AVX3)": for logs and benchmark labels.
const char* Bf16DotPath();
const char* Int8DotPath();

// y = bf16(x) w^T, w in bf16 [out, in]: x rounded to bf16 (nearest even, FloatToBf16) once, then
// bf16 pairs multiplied exactly and summed in fp32 lanes by VDPBF16PS (which flushes subnormal
// inputs and outputs to zero). Where the CPU lacks AVX512_BF16 this is MatMulNTBf16(x, ...).
// Against the exact product of x and w, each element is off by at most 2^-8 sum |x_k w_k| (bf16's
// relative rounding: half an ulp of 8 significant bits) plus the fp32 sum's error.
void MatMulNTBf16Dot(const float* x, int rows, int in, const uint16_t* w, int out, float* y);
// The double-precision product of bf16(x) and w: what MatMulNTBf16Dot computes, exactly summed.
void MatMulNTBf16DotReference(const float* x, int rows, int in, const uint16_t* w, int out, float* y);

// y = q8(x) w^T with q8_0 weights: each row of x quantized per block of kQ8Block by QuantizeQ8
// (scale max|x| / 127), then per block the int8 products summed exactly in int32 (VPDPBUSD, four
// at a time) and scaled by x's scale times w's in fp32. Where the CPU lacks AVX512_VNNI this is
// MatMulNTQ8(x, ...). Against the product of x and the dequantized w, each element is off by at
// most sum over blocks of scale_x(block) / 2 * sum |w_k| in the block, plus the fp32 sum's error.
void MatMulNTQ8Dot(const float* x, int rows, int in, Q8Weights w, int out, float* y);
// The double-precision product of the dequantized q8(x) and the dequantized w.
void MatMulNTQ8DotReference(const float* x, int rows, int in, Q8Weights w, int out, float* y);

}  // namespace steady::cpu

#endif  // STEADY_KERNELS_CPU_MATMUL_DOT_H_
