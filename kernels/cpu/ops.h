// CPU compute over plain buffers and shapes. Knows nothing of configs, sessions or checkpoints.
// Row-major throughout; small-row GEMMs run on kernels/cpu/matmul.cc, larger ones on OpenBLAS.
#ifndef STEADY_KERNELS_CPU_OPS_H_
#define STEADY_KERNELS_CPU_OPS_H_

#include <cstdint>

namespace steady::cpu {

// y[rows, out] = x[rows, in] * w[out, in]^T  (w in the PyTorch Linear layout). Weights are read
// once for all rows: a decode step of B sessions is one GEMM per projection. Up to kSmallRowsMax
// rows run on our own kernel (matmul.h: batch-invariant, threaded), more on OpenBLAS's sgemm.
void MatMulNT(const float* x, int rows, int in, const float* w, int out, float* y);

// The sum of x[i]^2 in double: four running sums (elements i = j mod 4 in sum j) added as
// (s0 + s1) + (s2 + s3), the same bits on every CPU.
double SumOfSquares(const float* x, int n);

// out[r, :] = x[r, :] / rms(x[r, :]) * weight; rms = sqrt(mean(x^2) + eps), mean(x^2) from
// SumOfSquares. out may alias x.
void RmsNorm(const float* x, const float* weight, int rows, int dim, float eps, float* out);

// Rotary embedding in the Hugging Face Llama layout (rotate_half: pairs (i, i + dim/2)), in place.
// x [rows, heads, dim]; positions[rows]; inv_freq[dim/2] = theta^(-2i/dim).
void Rope(float* x, int rows, int heads, int dim, const int64_t* positions, const float* inv_freq);

// out[i] = silu(gate[i]) * up[i].
void SwiGlu(const float* gate, const float* up, int64_t n, float* out);

// x[i] += y[i].
void AddInPlace(float* x, const float* y, int64_t n);

// out[r, :] = table[ids[r], :]; table [vocab, dim].
void GatherRows(const float* table, int dim, const int32_t* ids, int rows, float* out);

}  // namespace steady::cpu

#endif  // STEADY_KERNELS_CPU_OPS_H_
