// Checkers for CUDA runtime and cuBLAS calls: report file:line and the error, then abort (CUDA
// failures are broken invariants here, like STEADY_CHECK). Included by kernels/cuda sources only;
// callers of kernels/cuda/ops.h never need CUDA headers.
#ifndef STEADY_KERNELS_CUDA_CUDA_CHECK_H_
#define STEADY_KERNELS_CUDA_CUDA_CHECK_H_

#include <cstdio>
#include <cstdlib>

#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace steady::cuda {

inline void CudaCheck(cudaError_t err, const char* file, int line, const char* expr) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "%s:%d: CUDA error %s (%s) in %s\n", file, line, cudaGetErrorName(err),
                 cudaGetErrorString(err), expr);
    std::abort();
  }
}

inline void CublasCheck(cublasStatus_t st, const char* file, int line, const char* expr) {
  if (st != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "%s:%d: cuBLAS error %s (%d) in %s\n", file, line, cublasGetStatusName(st),
                 int(st), expr);
    std::abort();
  }
}

// After a kernel launch: a bad launch configuration aborts naming `kernel` and file:line. With
// synchronous launch checks on (SetSyncLaunchChecks in kernels/cuda/device.h: the tests turn them on,
// and STEADY_CUDA_SYNC_CHECK=1 in the environment does for any binary), the stream is also
// synchronized, outside a graph capture, so a fault inside the kernel (an illegal address, a trap)
// is reported against this kernel instead of at the next synchronizing call.
void CheckLaunch(const char* kernel, cudaStream_t stream, const char* file, int line);

}  // namespace steady::cuda

#define STEADY_CUDA_CHECK(call) ::steady::cuda::CudaCheck((call), __FILE__, __LINE__, #call)
#define STEADY_CUBLAS_CHECK(call) ::steady::cuda::CublasCheck((call), __FILE__, __LINE__, #call)
#define STEADY_CUDA_CHECK_LAUNCH(kernel, stream) ::steady::cuda::CheckLaunch((kernel), (stream), __FILE__, __LINE__)

#endif  // STEADY_KERNELS_CUDA_CUDA_CHECK_H_
