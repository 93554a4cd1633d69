// Elementwise and row-wise ops: RMSNorm, RoPE, SwiGLU, residual add, embedding gather, bf16
// conversion. llm.c layout: the __global__ kernels first, then the host launchers (declared in
// kernels/cuda/ops.h), each taking a stream and checking its launch.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "base/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/flat.h"
#include "kernels/cuda/ops.h"

namespace steady::cuda {
namespace {

constexpr int kRowThreads = 256;   // threads per block for one-row-per-block kernels

__device__ __forceinline__ float Load(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float Load(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void Store(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void Store(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }

// Sum over the block; every thread gets the result. blockDim.x is a multiple of 32, at most 1024.
__device__ float BlockSum(float v) {
  __shared__ float partial[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / 32;
  v = lane < warps ? partial[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// ---------------------------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------------------------

// One block per row. Each thread reads its elements once for the sum of squares and again for the
// output (the second read hits L1/L2 for the row sizes of interest: dim <= 16K). x carries no
// __restrict__: out may alias it (each thread reads an element before it writes that element).
template <typename T>
__global__ void RmsNormKernel(const T* x, const float* __restrict__ weight, int dim,
                              float eps, T* out) {
  const int64_t base = int64_t(blockIdx.x) * dim;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    const float v = Load(x, base + i);
    ss = fmaf(v, v, ss);
  }
  ss = BlockSum(ss);
  const float inv = rsqrtf(ss / float(dim) + eps);
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    Store(out, base + i, Load(x, base + i) * inv * weight[i]);
  }
}

// One block per row; thread i (strided) handles frequency i for every head of the row.
__global__ void RopeKernel(float* x, int heads, int dim, const int64_t* __restrict__ positions,
                           const float* __restrict__ inv_freq) {
  const int r = blockIdx.x;
  const int half = dim / 2;
  const double pos = double(positions[r]);
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    // fp64 product and range reduction keep the phase at large positions; sin/cos in fp32.
    const double angle = fmod(pos * double(inv_freq[i]), kTwoPi);
    float s, c;
    sincosf(float(angle), &s, &c);
    for (int h = 0; h < heads; ++h) {
      float* v = x + (int64_t(r) * heads + h) * dim;
      const float a = v[i], b = v[i + half];
      v[i] = a * c - b * s;
      v[i + half] = b * c + a * s;
    }
  }
}

__global__ void SwiGluKernel(const float* __restrict__ gate, const float* __restrict__ up, int64_t n,
                             float* out) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

__global__ void AddInPlaceKernel(float* x, const float* __restrict__ y, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    x[i] += y[i];
  }
}

__global__ void AddBiasRowsKernel(float* y, const float* __restrict__ bias, int64_t total, int n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    y[i] += bias[i % n];
  }
}

// One block per output row.
__global__ void GatherRowsKernel(const float* __restrict__ table, int dim, const int32_t* __restrict__ ids,
                                 float* __restrict__ out) {
  const int64_t src = int64_t(ids[blockIdx.x]) * dim;
  const int64_t dst = int64_t(blockIdx.x) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) out[dst + i] = table[src + i];
}

__global__ void FloatToBf16Kernel(const float* __restrict__ x, int64_t n, __nv_bfloat16* __restrict__ out) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = __float2bfloat16_rn(x[i]);
  }
}

__global__ void Bf16ToFloatKernel(const __nv_bfloat16* __restrict__ x, int64_t n, float* __restrict__ out) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = __bfloat162float(x[i]);
  }
}

// Threads for a one-row-per-block kernel: a multiple of 32, no more than the row needs.
int RowThreads(int dim) {
  int t = ((dim + 31) / 32) * 32;
  if (t > kRowThreads) t = kRowThreads;
  return t < 32 ? 32 : t;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Launchers
// ---------------------------------------------------------------------------------------------

void RmsNorm(const float* x, const float* weight, int rows, int dim, float eps, float* out,
             cudaStream_t stream) {
  STEADY_CHECK(rows >= 0 && dim > 0);
  if (rows == 0) return;
  RmsNormKernel<float><<<rows, RowThreads(dim), 0, stream>>>(x, weight, dim, eps, out);
  STEADY_CUDA_CHECK_LAUNCH("RmsNormKernel", stream);
}

void RmsNormBf16(const bf16_bits* x, const float* weight, int rows, int dim, float eps, bf16_bits* out,
                 cudaStream_t stream) {
  STEADY_CHECK(rows >= 0 && dim > 0);
  if (rows == 0) return;
  RmsNormKernel<__nv_bfloat16><<<rows, RowThreads(dim), 0, stream>>>(
      reinterpret_cast<const __nv_bfloat16*>(x), weight, dim, eps, reinterpret_cast<__nv_bfloat16*>(out));
  STEADY_CUDA_CHECK_LAUNCH("RmsNormKernel", stream);
}

void Rope(float* x, int rows, int heads, int dim, const int64_t* positions, const float* inv_freq,
          cudaStream_t stream) {
  STEADY_CHECK(rows >= 0 && heads > 0 && dim > 0 && dim % 2 == 0);
  if (rows == 0) return;
  RopeKernel<<<rows, RowThreads(dim / 2), 0, stream>>>(x, heads, dim, positions, inv_freq);
  STEADY_CUDA_CHECK_LAUNCH("RopeKernel", stream);
}

void SwiGlu(const float* gate, const float* up, int64_t n, float* out, cudaStream_t stream) {
  STEADY_CHECK(n >= 0);
  if (n == 0) return;
  SwiGluKernel<<<FlatBlocks(n), kFlatThreads, 0, stream>>>(gate, up, n, out);
  STEADY_CUDA_CHECK_LAUNCH("SwiGluKernel", stream);
}

void AddInPlace(float* x, const float* y, int64_t n, cudaStream_t stream) {
  STEADY_CHECK(n >= 0);
  if (n == 0) return;
  AddInPlaceKernel<<<FlatBlocks(n), kFlatThreads, 0, stream>>>(x, y, n);
  STEADY_CUDA_CHECK_LAUNCH("AddInPlaceKernel", stream);
}

void AddBiasRows(float* y, const float* bias, int rows, int n, cudaStream_t stream) {
  STEADY_CHECK(rows >= 0 && n > 0);
  const int64_t total = int64_t(rows) * n;
  if (total == 0) return;
  AddBiasRowsKernel<<<FlatBlocks(total), kFlatThreads, 0, stream>>>(y, bias, total, n);
  STEADY_CUDA_CHECK_LAUNCH("AddBiasRowsKernel", stream);
}

void GatherRows(const float* table, int dim, const int32_t* ids, int rows, float* out,
                cudaStream_t stream) {
  STEADY_CHECK(rows >= 0 && dim > 0);
  if (rows == 0) return;
  GatherRowsKernel<<<rows, RowThreads(dim), 0, stream>>>(table, dim, ids, out);
  STEADY_CUDA_CHECK_LAUNCH("GatherRowsKernel", stream);
}

void FloatToBf16(const float* x, int64_t n, bf16_bits* out, cudaStream_t stream) {
  STEADY_CHECK(n >= 0);
  if (n == 0) return;
  FloatToBf16Kernel<<<FlatBlocks(n), kFlatThreads, 0, stream>>>(x, n, reinterpret_cast<__nv_bfloat16*>(out));
  STEADY_CUDA_CHECK_LAUNCH("FloatToBf16Kernel", stream);
}

void Bf16ToFloat(const bf16_bits* x, int64_t n, float* out, cudaStream_t stream) {
  STEADY_CHECK(n >= 0);
  if (n == 0) return;
  Bf16ToFloatKernel<<<FlatBlocks(n), kFlatThreads, 0, stream>>>(reinterpret_cast<const __nv_bfloat16*>(x), n, out);
  STEADY_CUDA_CHECK_LAUNCH("Bf16ToFloatKernel", stream);
}

}  // namespace steady::cuda
