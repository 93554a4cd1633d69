// Launch shape of the flat grid-stride kernels (elementwise ops over n values), shared by the .cu
// files: a fixed block size and enough blocks to cover n, capped (each thread's loop does the rest).
#ifndef STEADY_KERNELS_CUDA_FLAT_H_
#define STEADY_KERNELS_CUDA_FLAT_H_

#include <cstdint>

namespace steady::cuda {

constexpr int kFlatThreads = 256;

inline int FlatBlocks(int64_t n) {
  const int64_t blocks = (n + kFlatThreads - 1) / kFlatThreads;
  return int(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

}  // namespace steady::cuda

// The loop of such a kernel (device code): i over [0, n) in grid-sized strides.
#define STEADY_FLAT_LOOP(i, n) \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

#endif  // STEADY_KERNELS_CUDA_FLAT_H_
