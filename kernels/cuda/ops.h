// CUDA compute over plain device buffers and shapes: the same ops and layouts as kernels/cpu/ops.h
// (row-major throughout). Every pointer is a device pointer; every op is enqueued on `stream` and
// returns without synchronizing. Plain C++ header: callers need no CUDA headers. Model code calls
// these launchers and never writes <<< >>>.
#ifndef STEADY_KERNELS_CUDA_OPS_H_
#define STEADY_KERNELS_CUDA_OPS_H_

#include <cstdint>

struct CUstream_st;
typedef CUstream_st* cudaStream_t;  // the same declaration as cuda_runtime_api.h

namespace steady::cuda {

// bf16 values are passed as their raw 16-bit patterns (the top half of an fp32), so callers need no
// CUDA headers; conversion rounds to nearest even.
using bf16_bits = uint16_t;

// --- elementwise.cu ---------------------------------------------------------------------------

// out[r, :] = x[r, :] / rms(x[r, :]) * weight; rms = sqrt(mean(x^2) + eps); fp32 accumulation, one
// block per row. out may alias x.
void RmsNorm(const float* x, const float* weight, int rows, int dim, float eps, float* out,
             cudaStream_t stream);
// The same with bf16 activations (input and output), fp32 weight and fp32 accumulation.
void RmsNormBf16(const bf16_bits* x, const float* weight, int rows, int dim, float eps, bf16_bits* out,
                 cudaStream_t stream);

// Rotary embedding, Hugging Face Llama layout (rotate_half: pairs (i, i + dim/2)), in place.
// x [rows, heads, dim]; positions[rows]; inv_freq[dim/2]. The angle position * inv_freq is formed
// and reduced mod 2*pi in fp64 (positions reach 1e6+, where an fp32 product has lost the phase),
// then sin/cos are taken in fp32: results stay within a few fp32 ulps of the CPU reference, which
// uses fp64 for the angle too.
void Rope(float* x, int rows, int heads, int dim, const int64_t* positions, const float* inv_freq,
          cudaStream_t stream);

// out[i] = silu(gate[i]) * up[i].
void SwiGlu(const float* gate, const float* up, int64_t n, float* out, cudaStream_t stream);

// x[i] += y[i].
void AddInPlace(float* x, const float* y, int64_t n, cudaStream_t stream);

// out[r, :] = table[ids[r], :]; table [vocab, dim]. ids must lie in [0, vocab) (checked by the
// caller on the host, as on the CPU path).
void GatherRows(const float* table, int dim, const int32_t* ids, int rows, float* out,
                cudaStream_t stream);

// Conversions between fp32 and bf16 (round to nearest even).
void FloatToBf16(const float* x, int64_t n, bf16_bits* out, cudaStream_t stream);
void Bf16ToFloat(const bf16_bits* x, int64_t n, float* out, cudaStream_t stream);

// --- gemm.cu ----------------------------------------------------------------------------------

// A cuBLAS handle bound to one stream: one per stream, never shared across threads. Move-only.
class Blas {
 public:
  explicit Blas(cudaStream_t stream);
  ~Blas();
  Blas(Blas&& o) noexcept;
  Blas& operator=(Blas&& o) noexcept;
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  cudaStream_t stream() const { return stream_; }
  void* handle() const { return handle_; }  // a cublasHandle_t

 private:
  void* handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

// y[rows, out] = x[rows, in] * w[out, in]^T (w in the PyTorch Linear layout), fp32 throughout
// (cublasSgemm, no TF32).
void MatMulNT(Blas& blas, const float* x, int rows, int in, const float* w, int out, float* y);
// The same with bf16 x and w, fp32 y and fp32 accumulation (cublasGemmEx, tensor cores).
void MatMulNTBf16(Blas& blas, const bf16_bits* x, int rows, int in, const bf16_bits* w, int out,
                  float* y);

}  // namespace steady::cuda

#endif  // STEADY_KERNELS_CUDA_OPS_H_
