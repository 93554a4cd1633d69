// Token sampling on the device (declared in kernels/cuda/ops.h): one block per row of logits, so a
// decode step returns only token ids to the host. The semantics are model/sampling/sampling.cc's Sampler
// without the repetition penalty: temperature 0 is the first maximum; otherwise logits / T, the
// top-k tokens, then the smallest set of most likely tokens whose mass reaches top_p, and a draw
// from what is left. The sets are found by bisection on a logit threshold instead of a sort (ties
// at the threshold are all kept, where the CPU keeps the lower ids), over [max - 30, max] (a token
// further below the maximum has probability below 1e-13 and is never drawn). Random numbers are
// Philox (curand) keyed by the row's seed and counter: the same (seed, counter, logits) always
// give the same token.
#include <cuda_runtime.h>
#include <curand_kernel.h>

#include <cfloat>
#include <cstdint>

#include "base/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/ops.h"

namespace steady::cuda {
namespace {

constexpr int kThreads = 256;
constexpr float kWindow = 30.0f;  // logits (after temperature) below max - kWindow are never drawn
constexpr int kBisections = 26;

// Block-wide reductions; every thread gets the result. `scratch` holds 32 entries.
__device__ float BlockSumF(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < int(blockDim.x / 32) ? scratch[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// (value, index) maximum over the warp, the lowest index on ties; every lane gets it.
__device__ void WarpArgMax(float& v, int& i) {
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (ov > v || (ov == v && oi < i)) {
      v = ov;
      i = oi;
    }
  }
}

// The same over the block (sv, si: 32 entries of scratch).
__device__ void BlockArgMax(float& v, int& i, float* sv, int* si) {
  WarpArgMax(v, i);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();
  if (lane == 0) {
    sv[warp] = v;
    si[warp] = i;
  }
  __syncthreads();
  v = lane < int(blockDim.x / 32) ? sv[lane] : -FLT_MAX;
  i = lane < int(blockDim.x / 32) ? si[lane] : INT32_MAX;
  WarpArgMax(v, i);
}

__global__ void __launch_bounds__(kThreads) SampleKernel(const float* logits, int vocab, const RowSampling* params,
                                                         int32_t* out) {
  __shared__ float sv[32];
  __shared__ int si[32];
  __shared__ float chunk_mass[kThreads];
  __shared__ int chosen;
  const int row = blockIdx.x;
  const float* x = logits + int64_t(row) * vocab;
  const RowSampling p = params[row];

  float best = -FLT_MAX;
  int best_i = INT32_MAX;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float v = x[i];
    if (v > best) {  // strided: the first maximum of this thread's elements
      best = v;
      best_i = i;
    }
  }
  BlockArgMax(best, best_i, sv, si);
  if (p.temperature == 0.0f || p.top_k == 1) {
    if (threadIdx.x == 0) out[row] = best_i;
    return;
  }
  const float inv_t = 1.0f / p.temperature;
  const float top = best * inv_t;
  // Threshold for top-k: the largest t in [top - window, top] with count(x / T >= t) >= k.
  float t_k = top - kWindow;
  if (p.top_k > 0 && p.top_k < vocab) {
    float lo = top - kWindow, hi = top;
    for (int it = 0; it < kBisections; ++it) {
      const float mid = 0.5f * (lo + hi);
      float count = 0;
      for (int i = threadIdx.x; i < vocab; i += blockDim.x) count += x[i] * inv_t >= mid ? 1.0f : 0.0f;
      count = BlockSumF(count, sv);
      if (count >= float(p.top_k)) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    t_k = lo;
  }
  // Mass above the top-k threshold, then the top-p threshold inside it.
  float total = 0;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float v = x[i] * inv_t;
    if (v >= t_k) total += __expf(v - top);
  }
  total = BlockSumF(total, sv);
  float t = t_k;
  if (p.top_p < 1.0f) {
    float lo = t_k, hi = top;
    for (int it = 0; it < kBisections; ++it) {
      const float mid = 0.5f * (lo + hi);
      float mass = 0;
      for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float v = x[i] * inv_t;
        if (v >= mid) mass += __expf(v - top);
      }
      mass = BlockSumF(mass, sv);
      if (mass >= p.top_p * total) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    t = lo;
  }
  // Draw: each thread owns a contiguous chunk of the vocabulary; a scan over the chunks' masses
  // finds the chunk holding u, and its thread walks it.
  const int per = (vocab + blockDim.x - 1) / blockDim.x;
  const int begin = min(vocab, int(threadIdx.x) * per), end = min(vocab, begin + per);
  float mine = 0;
  for (int i = begin; i < end; ++i) {
    const float v = x[i] * inv_t;
    if (v >= t) mine += __expf(v - top);
  }
  chunk_mass[threadIdx.x] = mine;
  if (threadIdx.x == 0) chosen = best_i;  // fallback when rounding leaves u past the last chunk
  __syncthreads();
  if (threadIdx.x == 0) {
    float kept = 0;
    for (int i = 0; i < int(blockDim.x); ++i) {
      const float m = chunk_mass[i];
      chunk_mass[i] = kept;  // exclusive prefix
      kept += m;
    }
    curandStatePhilox4_32_10_t rng;
    curand_init(p.seed, p.counter, 0, &rng);
    sv[0] = curand_uniform(&rng) * kept;  // (0, kept]
    sv[1] = kept;
  }
  __syncthreads();
  const float u = sv[0];
  const float next = threadIdx.x + 1 < blockDim.x ? chunk_mass[threadIdx.x + 1] : sv[1];
  if (u > chunk_mass[threadIdx.x] && u <= next) {
    float acc = chunk_mass[threadIdx.x];
    int last = -1;
    for (int i = begin; i < end; ++i) {
      const float v = x[i] * inv_t;
      if (v < t) continue;
      last = i;
      acc += __expf(v - top);
      if (u <= acc) break;
    }
    if (last >= 0) chosen = last;
  }
  __syncthreads();
  if (threadIdx.x == 0) out[row] = chosen;
}

}  // namespace

void SampleRows(const float* logits, int rows, int vocab, const RowSampling* params, int32_t* ids,
                cudaStream_t stream) {
  STEADY_CHECK(rows >= 1 && vocab >= 1);
  SampleKernel<<<rows, kThreads, 0, stream>>>(logits, vocab, params, ids);
  STEADY_CUDA_CHECK_LAUNCH("SampleKernel", stream);
}

}  // namespace steady::cuda
