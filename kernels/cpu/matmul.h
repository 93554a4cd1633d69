// y = x w^T for the few rows of a decode step, reading each weight once (kernels/cpu/matmul.cc).
#ifndef STEADY_KERNELS_CPU_MATMUL_H_
#define STEADY_KERNELS_CPU_MATMUL_H_

#include <cstdint>

namespace steady::cpu {

// MatMulNT's kernel for up to kSmallRowsMax rows (ops.h). Each weight row streams from memory once
// into a register tile of up to 4 x rows by 4 weight rows (Highway SIMD, the widest instruction set
// the CPU has, chosen at run time); the output columns are split over the compute threads
// (parallel.h). Every y[r, j] is the same sum in the same order whatever the number of rows, their
// order or the thread count, so a session's logits do not depend on what else is in the batch.
// Up to 32 rows this kernel is ahead of OpenBLAS's sgemm at llama1b's shapes (3.3x at 4 rows, 1.3x
// at 16, 1.1x at 32); at 64, sgemm's cache blocking wins (tools/bench/matmul_bench.cc, docs/cpu.md).
inline constexpr int kSmallRowsMax = 32;
void MatMulNTSmallRows(const float* x, int rows, int in, const float* w, int out, float* y);

// y = x w^T with w in bf16 (each value the top 16 bits of an fp32: half the bytes to read), any
// number of rows: the same kernel, each weight widened exactly to fp32 in registers, so y is the
// fp32 product of x and the stored weights; batch- and thread-invariant like MatMulNTSmallRows.
void MatMulNTBf16(const float* x, int rows, int in, const uint16_t* w, int out, float* y);
void MatMulNTBf16Reference(const float* x, int rows, int in, const uint16_t* w, int out, float* y);
// fp32 -> bf16, rounded to nearest even (NaN stays NaN); and back, exactly.
uint16_t FloatToBf16(float f);
float Bf16ToFloat(uint16_t b);

// y = x w^T with w in IEEE half precision (f16 checkpoints, read as they are stored): the same kernel,
// each weight widened exactly to fp32 in registers (F16C where the CPU has it); the same properties.
void MatMulNTF16(const float* x, int rows, int in, const uint16_t* w, int out, float* y);
void MatMulNTF16Reference(const float* x, int rows, int in, const uint16_t* w, int out, float* y);
// fp32 -> IEEE half bits, rounded to nearest even (F16C's VCVTPS2PH in its default rounding).
uint16_t FloatToF16(float f);
// f16 bits -> fp32, exactly (subnormals, inf and NaN included).
inline float F16ToFloat(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal: normalize
    int e = -1;
    uint32_t m = mantissa;
    do {
      ++e;
      m <<= 1;
    } while ((m & 0x400) == 0);
    bits = sign | (uint32_t(112 - e) << 23) | ((m & 0x3ff) << 13);
  }
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}
// The f16 value in a block's bytes at p (no alignment needed), exactly.
inline float F16At(const uint8_t* p) {
  uint16_t h;
  __builtin_memcpy(&h, p, 2);
  return F16ToFloat(h);
}

// y[r, j] = sum over k of x[r, k] * weight(j, k), in double: every format's reference product.
template <typename WeightAt>
void ReferenceProduct(const float* x, int rows, int in, int out, float* y, const WeightAt& weight) {
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < out; ++j) {
      double s = 0;
      for (int k = 0; k < in; ++k) s += double(x[int64_t(r) * in + k]) * double(weight(j, k));
      y[int64_t(r) * out + j] = float(s);
    }
  }
}

// q8_0-style 8-bit weights (after llama.cpp's q8_0): each row of `in` weights in blocks of kQ8Block,
// a block holding kQ8Block int8 values and one fp32 scale (the last block of a row may be shorter).
// A weight is q * scale rounded to fp32. q [out, in]; scales [out, ceil(in / kQ8Block)].
inline constexpr int kQ8Block = 32;
inline int64_t Q8BlocksPerRow(int64_t in) { return (in + kQ8Block - 1) / kQ8Block; }
struct Q8Weights {
  const int8_t* q = nullptr;
  const float* scales = nullptr;
};
// y = x w^T with q8_0 weights: the same kernel and properties as MatMulNTBf16, about a quarter of
// the fp32 bytes (1.125 bytes a weight).
void MatMulNTQ8(const float* x, int rows, int in, Q8Weights w, int out, float* y);
void MatMulNTQ8Reference(const float* x, int rows, int in, Q8Weights w, int out, float* y);
// w [rows, in] -> q, scales: per block, scale = max |w| / 127 and q = round(w / scale) (|q| <= 127).
void QuantizeQ8(const float* w, int64_t rows, int in, int8_t* q, float* scales);

// q8_0 as a GGUF file holds it (ggml's block_q8_0): per kQ8Block weights an fp16 d, then kQ8Block
// int8 q, 34 bytes (8.5 bits a weight); a weight is q * d, exact in fp32. A Q8_0 tensor is read in
// place as this; the int8 kernels take it packed as q8 (d widened exactly to q8's fp32 scale:
// Q8_0ToQ8, the same values), the widening kernel reads it as it is, with MatMulNTQ8's arithmetic
// on the same values (so the same bits as the q8 it converts to).
inline constexpr int64_t kQ8_0BlockBytes = 2 + kQ8Block;
inline int64_t Q8_0Bytes(int64_t rows, int64_t in) { return rows * Q8BlocksPerRow(in) * kQ8_0BlockBytes; }
struct Q8_0Weights {
  const uint8_t* blocks = nullptr;  // [rows, blocks] of kQ8_0BlockBytes, no alignment needed
};
// Rows [r0, r1) as q8: q [(r1 - r0), in] and scales [(r1 - r0), Q8BlocksPerRow(in)], the same values.
void Q8_0ToQ8(Q8_0Weights w, int64_t in, int64_t r0, int64_t r1, int8_t* q, float* scales);
// Rows [r0, r1) as fp32 values into out[(r1 - r0) * in], exactly.
void DequantizeQ8_0(Q8_0Weights w, int64_t in, int64_t r0, int64_t r1, float* out);
void MatMulNTQ8_0(const float* x, int rows, int in, Q8_0Weights w, int out, float* y);

// q4_0 as a GGUF file holds it (ggml's block_q4_0, --cpu-weights q4): per kQ8Block weights an fp16
// scale, then 16 bytes, byte i holding the block's input i in its low nibble and input 16 + i in its
// high one, q in 0..15 for the weight (q - 8) * scale (18 bytes, 4.5 bits a weight). A Q4_0 tensor
// is read in place as this. QuantizeQ4 is llama.cpp's quantize_row_q4_0_ref (matmul_dot.h has the
// rule); every weight is exact in fp32. The int8 kernels take q4 packed from these (PackQ4Dot, the
// same values); CPUs without them multiply these rows widened to fp32.
inline constexpr int64_t kQ4_0BlockBytes = 2 + kQ8Block / 2;
inline int64_t Q4Bytes(int64_t rows, int64_t in) { return rows * Q8BlocksPerRow(in) * kQ4_0BlockBytes; }
struct Q4Weights {
  const uint8_t* blocks = nullptr;  // [rows, blocks] of kQ4_0BlockBytes, no alignment needed
};
// w [rows, in] -> Q4Bytes(rows, in) bytes of blocks at `blocks`.
void QuantizeQ4(const float* w, int64_t rows, int64_t in, uint8_t* blocks);
// Row j's weight k, and rows [r0, r1) as fp32 values into w[(r1 - r0) * in], exactly.
float Q4WeightValue(Q4Weights w, int64_t in, int64_t j, int64_t k);
void DequantizeQ4(Q4Weights w, int64_t in, int64_t r0, int64_t r1, float* out);
// y = x w^T with q4 weights widened to fp32: the same kernel and properties as MatMulNTQ8.
void MatMulNTQ4(const float* x, int rows, int in, Q4Weights w, int out, float* y);
void MatMulNTQ4Reference(const float* x, int rows, int in, Q4Weights w, int out, float* y);

// Whether MatMulNT takes this kernel for small row counts (the default), or OpenBLAS for every
// count (sgemv for one row), as before it existed: `steady bench --cpu-gemm openblas` measures both
// in one run.
void UseSmallRowKernel(bool on);
bool SmallRowKernelInUse();

// y[i] = bias[i] + sum over k of double(w[i, k]) * x[k] for the rows of w [rows, in]: fp32 weights,
// fp64 input and sums (sliced_relu's score projections on its fp64 path), SIMD lanes summed in their own order, rows
// split over the compute threads (each row's sum the same whatever the thread count).
void MatVecF64(const float* w, int rows, int in, const double* x, const float* bias, double* y);
void MatVecF64Reference(const float* w, int rows, int in, const double* x, const float* bias, double* y);
// MatVecF64 of n vectors x [n, in] into y [n, rows], each row of w read once for all n (sliced_relu's
// verify rows): y's row r is the same bits as MatVecF64 of x's row r.
void MatVecsF64(const float* w, int rows, int in, int n, const double* x, const float* bias, double* y);

// The plain reference the kernels are tested against: a double-precision dot product per element.
void MatMulNTReference(const float* x, int rows, int in, const float* w, int out, float* y);

// y = x w for w [in, out] stored input-major (the mechanisms' small feature projections: dark's W^T
// and M^T, slay's omega), any number of rows, on the calling thread. The columns run along the
// vector lanes: each y[r, j] is one multiply-add per k (fused where the CPU has FMA) in order of k
// from zero, the same bits whatever the number of rows and wherever its column falls (Highway, the
// widest instruction set the CPU has). The matrix is read once per 4 rows of x.
void MatMulNN(const float* x, int rows, int in, const float* w, int out, float* y);
void MatMulNNReference(const float* x, int rows, int in, const float* w, int out, float* y);
// MatMulNN in fp64 SIMD, x and w both fp64: the same operations per y[r, j] (one multiply-add per k
// in order, fused where the CPU has FMA; taylor's chunked prefill sums in fp64 on its fp32 path).
void MatMulNNF64(const double* x, int rows, int in, const double* w, int out, double* y);
// The same product in fp64 with fp32 or fp64 weights (the mechanisms' fp64 references): each y[r, j]
// summed in order of k in a plain loop.
template <typename W>
inline void MatMulNN(const double* x, int rows, int in, const W* w, int out, double* y) {
  for (int r = 0; r < rows; ++r) {
    double* yr = y + int64_t(r) * out;
    for (int j = 0; j < out; ++j) yr[j] = 0.0;
    for (int k = 0; k < in; ++k) {
      const double xk = x[int64_t(r) * in + k];
      const W* wk = w + int64_t(k) * out;
      for (int j = 0; j < out; ++j) yr[j] += double(wk[j]) * xk;
    }
  }
}

// The instruction set the SIMD kernels run with on this CPU (e.g. "AVX3", "AVX2").
const char* SimdTargetName();

}  // namespace steady::cpu

#endif  // STEADY_KERNELS_CPU_MATMUL_H_
