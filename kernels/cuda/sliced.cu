// sliced_relu and sliced_relu_bump on the device, bucketed decoder only (declarations in
// kernels/cuda/ops.h; the method in model/mechanisms/sliced_bins.h).
//
// Scores: cuBLAS GEMMs (fp64 or fp32) with small bias/GELU kernels between them.
// Attention: one block per (segment, kv head), one thread per value column, scanning the segment
// token by token. Per token, thread 0 adds the key's count, sum z and Welford M2 to its bin while
// every thread adds its column's v and z v (compensated in fp64, as on the CPU); then one pass over
// the bins in z order keeps the running sums of the bins below and, on reaching the bin that holds a
// query point, reads that point's ReLU moments (the bins below exactly, its own bin through two
// point masses). The arithmetic is kernels/sliced_bins_math.h, the CPU's own, and both sides are
// compiled without FMA contraction (kernels/cuda/CMakeLists.txt), so fed the same scores the kernel reproduces
// the CPU's state and outputs to the last bit (tests/model/backend/backend_test.cc, CudaSlicedKernel). Projected
// scores differ from the CPU's in their last bits (cuBLAS's summation order, the bias added last,
// the device's erf).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "base/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/flat.h"
#include "kernels/cuda/ops.h"
#include "kernels/sliced_bins_math.h"

namespace steady::cuda {
namespace {

template <typename T>
__global__ void ToTypeKernel(const float* x, int64_t n, T* out) {
  STEADY_FLAT_LOOP(i, n) out[i] = T(x[i]);
}

__device__ __forceinline__ double Gelu(double x) { return 0.5 * x * (1.0 + erf(x / sqrt(2.0))); }
__device__ __forceinline__ float Gelu(float x) { return 0.5f * x * (1.0f + erff(x / sqrtf(2.0f))); }

// h[r, i] = gelu(h[r, i] + bias[i]) over [rows, width].
template <typename T>
__global__ void BiasGeluKernel(T* h, const T* bias, int rows, int width) {
  STEADY_FLAT_LOOP(i, int64_t(rows) * width) h[i] = Gelu(h[i] + bias[i % width]);
}

// z[r, g] = double(s[r, g] + bias[g]), rounded to an fp32 value when `round`.
template <typename T>
__global__ void FinishScoresKernel(const T* s, const T* bias, int rows, int groups, bool round, double* z) {
  STEADY_FLAT_LOOP(i, int64_t(rows) * groups) {
    const double v = double(s[i]) + double(bias[i % groups]);
    z[i] = round ? double(float(v)) : v;
  }
}

template <typename T>
void ProjectAs(Blas& blas, const SlicedProjector& p, const float* x, int rows, bool round, void* scratch,
               double* z) {
  cudaStream_t stream = blas.stream();
  const int64_t n = int64_t(rows) * p.width;
  // Scratch: [x as T (fp64 only)] [hidden (mlp)] [scores before the bias].
  T* base = static_cast<T*>(scratch);
  const T* in = nullptr;
  if constexpr (std::is_same_v<T, float>) {
    in = x;
  } else {
    ToTypeKernel<T><<<FlatBlocks(n), kFlatThreads, 0, stream>>>(x, n, base);
    STEADY_CUDA_CHECK_LAUNCH("ToTypeKernel", stream);
    in = base;
    base += n;
  }
  if (p.kind == SlicedProjector::kMlp) {
    MatMulNT(blas, in, rows, p.width, static_cast<const T*>(p.fc1_weight), p.width, base);
    BiasGeluKernel<T><<<FlatBlocks(n), kFlatThreads, 0, stream>>>(base, static_cast<const T*>(p.fc1_bias), rows,
                                                                 p.width);
    STEADY_CUDA_CHECK_LAUNCH("BiasGeluKernel", stream);
    in = base;
    base += n;
  }
  MatMulNT(blas, in, rows, p.width, static_cast<const T*>(p.out_weight), p.groups, base);
  FinishScoresKernel<T><<<FlatBlocks(int64_t(rows) * p.groups), kFlatThreads, 0, stream>>>(
      base, static_cast<const T*>(p.out_bias), rows, p.groups, round, z);
  STEADY_CUDA_CHECK_LAUNCH("FinishScoresKernel", stream);
}

// Query points per kv head: the group's query scores, and for the bump x - b, x, x + b of each.
template <bool Bump>
constexpr int kMaxPoints = (Bump ? 3 : 1) * kLinearMaxGroup;

// Shared memory per block: each query point's column of rv, [points, threads] doubles.
size_t SlicedSharedBytes(int points, int threads) { return size_t(points) * threads * sizeof(double); }

template <bool Bump>
__global__ void __launch_bounds__(160) SlicedBinsKernel(AttnBatch b, SlicedStateLayout st, const float* bandwidth,
                                                        const double* zq, const double* zk, const float* v,
                                                        float* y) {
  constexpr int per_head = Bump ? 3 : 1;
  __shared__ double xs[kMaxPoints<Bump>], r1s[kMaxPoints<Bump>];  // each point's x and r1(x)
  __shared__ int bins[kMaxPoints<Bump>];                          // the bin holding it
  extern __shared__ double rvs[];                                 // [points, blockDim.x]
  const SlicedBinsLayout& layout = st.bins;
  const int seg = blockIdx.x, g = blockIdx.y, tid = threadIdx.x, threads = blockDim.x;
  const int dv = b.value_dim, group = b.heads / b.kv_heads, points = group * per_head;
  const int m = SlicedMomentCount(dv), row_floats = layout.BinFloats();
  const int64_t cells = int64_t(layout.bins + 2) * row_floats;
  float* head = st.pool + int64_t(b.slot[seg]) * st.slot_floats + st.layer_offset + int64_t(g) * layout.HeadFloats();
  float* comps = layout.compensated ? head + cells : nullptr;
  float* ends = head + layout.HeadFloats() - 2;  // lowest z seen, highest z seen
  auto comp = [&](int64_t i) -> float* { return comps ? comps + i : nullptr; };
  auto sum = [&](int64_t i) { return ReadSum(head + i, comp(i)); };
  const bool col = tid < dv;
  const double resolution = sliced_bins::Resolution<float>(layout.compensated);
  const int row0 = b.row_begin[seg], n = b.count[seg];

  for (int t = 0; t < n; ++t) {
    const int64_t row = row0 + t;
    // Insert the key (BinsInsert, split over the threads) and place the group's query points.
    const double z = zk[row * b.kv_heads + g];
    const int64_t kb = int64_t(sliced_bins::BinOf(layout, z)) * row_floats;
    if (tid == 0) {
      const double m2 = sliced_bins::WelfordIncrement(sum(kb), sum(kb + 1), z);
      AddToSum(1.0, head + kb, comp(kb));
      AddToSum(z, head + kb + 1, comp(kb + 1));
      AddToSum(m2, head + kb + m, comp(kb + m));
      const float zf = float(z);
      if (zf < ends[0]) ends[0] = zf;  // std::min(lowest, zf), NaN left out as there
      if (ends[1] < zf) ends[1] = zf;
    }
    if (col) {
      const double vd = double(v[(row * b.kv_heads + g) * dv + tid]);
      AddToSum(vd, head + kb + 2 + tid, comp(kb + 2 + tid));
      AddToSum(z * vd, head + kb + 2 + dv + tid, comp(kb + 2 + dv + tid));
    }
    if (tid < points) {  // bump: x - b, x, x + b per head
      const int h = g * group + tid / per_head;
      double x = zq[row * b.heads + h];
      if constexpr (Bump) {
        const double bw = double(bandwidth[h]);
        if (tid % 3 == 0) x = x - bw;
        if (tid % 3 == 2) x = x + bw;
      }
      xs[tid] = x;
      bins[tid] = sliced_bins::BinOf(layout, x);
    }
    __syncthreads();

    // One pass over the bins: (count, sum z, sum v, sum z v) of the bins below, and each point's r1
    // and column of rv when its bin comes (BinsSnapshot + BinsReluMoments).
    const double lowest = ends[0], highest = ends[1];
    double below_c = 0, below_z = 0, below_v = 0, below_zv = 0;
    for (int bb = 0; bb < layout.bins + 2; ++bb) {
      const int64_t o = int64_t(bb) * row_floats;
      const double c = sum(o), sz = sum(o + 1);
      const double sv = col ? sum(o + 2 + tid) : 0.0, szv = col ? sum(o + 2 + dv + tid) : 0.0;
      for (int p = 0; p < points; ++p) {
        if (bins[p] != bb) continue;
        const double x = xs[p];
        double r1 = x * below_c - below_z, rv = x * below_v - below_zv;
        if (c != 0) {
          const sliced_bins::OwnBin own =
              sliced_bins::SplitOwnBin(layout, bb, x, c, sz, sum(o + m), lowest, highest, resolution);
          if (own.kind != sliced_bins::OwnBin::kNone) {
            r1 += sliced_bins::OwnBinR1(own, x, c, sz);
            rv += sliced_bins::OwnBinRv(own, x, sv, szv);
          }
        }
        rvs[p * threads + tid] = rv;
        if (tid == 0) r1s[p] = r1;
      }
      below_c += c;
      below_z += sz;
      below_v += sv;
      below_zv += szv;
    }
    __syncthreads();  // r1s
    // Outputs (ReadKvHead in model/mechanisms/sliced_relu.cc); the running sums are now the totals.
    if (col) {
      for (int p = 0; p < points; p += per_head) {
        const int h = g * group + p / per_head;
        const double* rv = rvs + tid;
        double out;
        if constexpr (Bump) {
          out = (rv[(p + 2) * threads] - 2 * rv[(p + 1) * threads] + rv[p * threads]) /
                (double(bandwidth[h]) * below_c);
        } else {
          const double den = 2 * r1s[p] - (xs[p] * below_c - below_z);
          const double num = rv[p * threads] - below_v / below_c * r1s[p];
          out = den > 0 ? num / den : 0.0;
        }
        y[(row * b.heads + h) * dv + tid] = float(out);
      }
    }
    __syncthreads();  // the next token rewrites the sums, points and rv every thread has just read
  }
}

}  // namespace

size_t SlicedProjectScratchBytes(const SlicedProjector& p, int rows) {
  const size_t n = size_t(rows) * p.width;
  if (p.kind == SlicedProjector::kNone) return 0;
  const size_t values = (p.fp64 ? n : 0) + (p.kind == SlicedProjector::kMlp ? n : 0) + size_t(rows) * p.groups;
  return values * (p.fp64 ? sizeof(double) : sizeof(float));
}

void SlicedProjectScores(Blas& blas, const SlicedProjector& p, const float* x, int rows, bool round_to_float,
                         void* scratch, double* z) {
  STEADY_CHECK(rows >= 0 && p.groups >= 1 && p.width >= p.groups);
  if (rows == 0) return;
  if (p.kind == SlicedProjector::kNone) {  // head_dim 1: the inputs are the scores (already fp32 values)
    STEADY_CHECK(p.width == p.groups);
    ToTypeKernel<double><<<FlatBlocks(int64_t(rows) * p.groups), kFlatThreads, 0, blas.stream()>>>(
        x, int64_t(rows) * p.groups, z);
    STEADY_CUDA_CHECK_LAUNCH("ToTypeKernel", blas.stream());
    return;
  }
  if (p.fp64) return ProjectAs<double>(blas, p, x, rows, round_to_float, scratch, z);
  ProjectAs<float>(blas, p, x, rows, round_to_float, scratch, z);
}

void SlicedAttention(const AttnBatch& b, const SlicedStateLayout& st, const float* bandwidth, const double* zq,
                     const double* zk, const float* v, float* y, cudaStream_t stream) {
  STEADY_CHECK(b.segments >= 1 && b.kv_heads >= 1 && b.kv_heads <= 65535);
  STEADY_CHECK(b.heads % b.kv_heads == 0 && b.heads / b.kv_heads <= kLinearMaxGroup);
  STEADY_CHECK(b.value_dim >= 1 && b.value_dim <= kLinearMaxValueDim && st.bins.value_dim == b.value_dim);
  STEADY_CHECK(st.bins.bins >= 1);
  const int threads = (b.value_dim + 31) / 32 * 32, group = b.heads / b.kv_heads;
  const dim3 grid(b.segments, b.kv_heads);
  if (bandwidth != nullptr) {
    SlicedBinsKernel<true><<<grid, threads, SlicedSharedBytes(3 * group, threads), stream>>>(b, st, bandwidth, zq,
                                                                                           zk, v, y);
  } else {
    SlicedBinsKernel<false><<<grid, threads, SlicedSharedBytes(group, threads), stream>>>(b, st, bandwidth, zq, zk,
                                                                                         v, y);
  }
  STEADY_CUDA_CHECK_LAUNCH("SlicedBinsKernel", stream);
}

}  // namespace steady::cuda
