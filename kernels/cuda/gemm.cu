// GEMMs through cuBLAS: y[rows, out] = x[rows, in] * w[out, in]^T, row-major. cuBLAS is
// column-major, so the row-major product is computed as its transpose: y^T[out, rows] =
// op_T(w as [in, out] col-major) * (x as [in, rows] col-major).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <utility>

#include "base/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/ops.h"

namespace steady::cuda {
namespace {

cublasHandle_t H(const Blas& b) { return static_cast<cublasHandle_t>(b.handle()); }

}  // namespace

Blas::Blas(cudaStream_t stream) : stream_(stream) {
  cublasHandle_t h = nullptr;
  STEADY_CUBLAS_CHECK(cublasCreate(&h));
  STEADY_CUBLAS_CHECK(cublasSetStream(h, stream));
  // fp32 GEMMs stay fp32 (no TF32): the CPU reference and the tolerance tests assume it.
  STEADY_CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
  // A workspace of our own, so that GEMMs captured into a CUDA graph allocate nothing.
  STEADY_CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
  STEADY_CUBLAS_CHECK(cublasSetWorkspace(h, workspace_, kWorkspaceBytes));
  handle_ = h;
}

Blas::~Blas() { Release(); }

void Blas::Release() {
  if (handle_ != nullptr) STEADY_CUBLAS_CHECK(cublasDestroy(static_cast<cublasHandle_t>(handle_)));
  if (workspace_ != nullptr) STEADY_CUDA_CHECK(cudaFree(workspace_));
  handle_ = workspace_ = nullptr;
}

Blas::Blas(Blas&& o) noexcept
    : handle_(std::exchange(o.handle_, nullptr)), workspace_(std::exchange(o.workspace_, nullptr)),
      stream_(std::exchange(o.stream_, nullptr)) {}

Blas& Blas::operator=(Blas&& o) noexcept {
  if (this != &o) {
    Release();
    handle_ = std::exchange(o.handle_, nullptr);
    workspace_ = std::exchange(o.workspace_, nullptr);
    stream_ = std::exchange(o.stream_, nullptr);
  }
  return *this;
}

void MatMulNT(Blas& blas, const float* x, int rows, int in, const float* w, int out, float* y) {
  STEADY_CHECK(rows >= 0 && in > 0 && out > 0);
  if (rows == 0) return;
  const float alpha = 1.0f, beta = 0.0f;
  STEADY_CUBLAS_CHECK(cublasSgemm(H(blas), CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, &alpha, w, in, x, in,
                                  &beta, y, out));
}

void MatMulNT(Blas& blas, const double* x, int rows, int in, const double* w, int out, double* y) {
  STEADY_CHECK(rows >= 0 && in > 0 && out > 0);
  if (rows == 0) return;
  const double alpha = 1.0, beta = 0.0;
  STEADY_CUBLAS_CHECK(cublasDgemm(H(blas), CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, &alpha, w, in, x, in,
                                  &beta, y, out));
}

void MatMulNTBf16(Blas& blas, const bf16_bits* x, int rows, int in, const bf16_bits* w, int out,
                  float* y) {
  STEADY_CHECK(rows >= 0 && in > 0 && out > 0);
  if (rows == 0) return;
  const float alpha = 1.0f, beta = 0.0f;
  STEADY_CUBLAS_CHECK(cublasGemmEx(H(blas), CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, &alpha, w, CUDA_R_16BF,
                                   in, x, CUDA_R_16BF, in, &beta, y, CUDA_R_32F, out, CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT));
}

void GemmBatched(Blas& blas, bool trans_a, bool trans_b, int m, int n, int k, const float* a, int64_t stride_a,
                 const float* b, int64_t stride_b, float beta, float* c, int64_t stride_c, int batch, bool tf32) {
  STEADY_CHECK(m > 0 && n > 0 && k > 0 && batch > 0);
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: a row-major matrix is its
  // transpose seen column-major, so each operand keeps its op and the two swap places.
  const float alpha = 1.0f;
  const int lda = trans_a ? m : k, ldb = trans_b ? k : n;
  STEADY_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      H(blas), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b,
      CUDA_R_32F, ldb, stride_b, a, CUDA_R_32F, lda, stride_a, &beta, c, CUDA_R_32F, n, stride_c, batch,
      tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace steady::cuda
