// Attention against per-slot state in device memory (declarations and layouts in kernels/cuda/ops.h).
//
// Linear-state mechanisms (taylor, slay, dark/performer): one block per (segment, kv head). For
// each token of the segment the block (1) builds the key's features and those of the group's
// query heads in shared memory (mechanism-specific), (2) makes one pass over the head's state
// [m, dv + 1] in which every element is read once, scaled (dark's running-max shift), updated with
// the key (Kahan-compensated where the layout has compensations) and written once, while each
// query head's readout phi(q)^T S accumulates from the updated values in registers, and (3) divides
// numerator by denominator with the mechanism's guard. This is the CPU Step of each mechanism
// (model/mechanisms/*.cc) fused; tests/cuda/attention_test.cc checks it against them.
//
// softmax: the segment's keys and values are appended to the slot's preallocated cache, then one
// block per (segment, kv head, token) attends with an online softmax: each warp walks a strided
// subset of the cached rows, and the warps' partial (max, sum, weighted values) are merged at the end.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <algorithm>
#include <cstdint>

#include "base/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/ops.h"
#include "kernels/host_device.h"

namespace steady::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kColIters = (kLinearMaxValueDim + 1 + 31) / 32;  // columns per lane of a state row
constexpr int kRowUnroll = 4;  // state rows a warp loads before it updates them
constexpr int kSplitBlocks = 1024;  // softmax decode: blocks to aim for when splitting the context
constexpr int kMaxSplits = 64;
constexpr int kMaxGridYZ = 65535;  // the largest grid extent in y and z
// Linear-state decode: blocks to aim for when splitting the state's rows, and the fewest rows a
// strip keeps (each block also builds every feature, which a thinner strip would not repay).
constexpr int kLinearSplitBlocks = 512;
constexpr int kMinSplitRows = 64;

// A LinearAttentionKernel instantiation's register shape (query heads, 32-column strips).
template <int Group, int Cols>
struct KernelShape {
  static constexpr int kGroup = Group, kCols = Cols;
};

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// out[vi] = sum_d x[vi * len + d]^2 for `vectors` rows, one warp per row. Ends with a barrier.
__device__ void RowSquares(const float* x, int vectors, int len, float* out) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int vi = warp; vi < vectors; vi += blockDim.x / 32) {
    float n2 = 0;
    for (int d = lane; d < len; d += 32) n2 += x[vi * len + d] * x[vi * len + d];
    n2 = WarpSum(n2);
    if (lane == 0) out[vi] = n2;
  }
  __syncthreads();
}

// Raises `kernel`'s dynamic shared-memory limit to `smem` when that is above `allowed` (the caller's
// static, one per kernel): once per kernel and size, never inside a graph capture (a shape's first
// step runs eagerly, model/backend/backend_cuda.cc).
template <typename Kernel>
void AllowSharedMemory(Kernel kernel, size_t smem, size_t& allowed) {
  if (smem <= allowed) return;
  STEADY_CHECK(smem <= MaxSharedBytesPerBlock());
  STEADY_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  allowed = smem;
}

// Shared memory of a linear-state block: features of the key [m] and of the group's queries
// [group, m], the warps' readout partials [warps, group, dv + 1] in the mechanism's accumulator type
// (Mech::Acc: fp64 for taylor, as the CPU reads its state; 8-byte aligned), then the mechanism's
// scratch. FeatureFloats is where the partials start.
__host__ __device__ inline size_t FeatureFloats(int m, int group) { return (size_t(group + 1) * m + 1) / 2 * 2; }

struct LinearSmem {
  float* fk;
  float* fq;
  void* red;
  float* scratch;
};

template <typename Acc>
__device__ LinearSmem CarveLinearSmem(float* smem, int m, int group, int width) {
  LinearSmem s;
  s.fk = smem;
  s.fq = s.fk + m;
  s.red = smem + FeatureFloats(m, group);
  s.scratch = smem + FeatureFloats(m, group) + size_t(kWarps) * group * width * (sizeof(Acc) / sizeof(float));
  return s;
}

// Copies the key and the group's query rows into x [(group + 1), dk]: vector 0 is the key.
__device__ void LoadVectors(const float* kt, const float* qt, int group, int dk, float* x) {
  for (int i = threadIdx.x; i < (group + 1) * dk; i += blockDim.x) {
    x[i] = i < dk ? kt[i] : qt[i - dk];
  }
}

// The output of feature vector `vi` (0: the key, 1 + i: query head i of the group).
__device__ __forceinline__ float* FeatureOut(const LinearSmem& s, int vi, int m) {
  return vi == 0 ? s.fk : s.fq + size_t(vi - 1) * m;
}

// --- taylor -----------------------------------------------------------------------------------

struct TaylorMech {
  using Tables = TaylorTables;
  // The readout sums in fp64 from fp64 reads of sum + compensation, as the CPU's ReadRowGroup: the
  // compensated state is not rounded back to fp32 when read, and m rows' products are not summed in
  // fp32 (the kernel must not drift from the CPU over long contexts).
  using Acc = double;
  static constexpr bool kShifted = false;  // features on a fixed scale (no running reference)
  // Scratch: x [(group+1), dk] (TaylorScratchFloats adds the fp64 partials' second half).

  // Degree by degree: row r of degree p is its parent row (degree p - 1) times one coordinate.
  static __device__ void Features(const Tables& t, int, int dk, int group, int m, const float* kt,
                                  const float* qt, const float*, const LinearSmem& s, float* state_scale,
                                  float*) {
    float* x = s.scratch;
    LoadVectors(kt, qt, group, dk, x);
    for (int vi = threadIdx.x; vi <= group; vi += blockDim.x) FeatureOut(s, vi, m)[0] = 1.0f;
    __syncthreads();
    // Unrolled so that degree_offset is indexed by constants (a run-time index into a kernel
    // parameter's array copies it to local memory).
#pragma unroll
    for (int p = 1; p < kTaylorMaxOrder; ++p) {
      if (p >= t.order) break;
      const int first = t.degree_offset[p], rows = t.degree_offset[p + 1] - first;
      for (int i = threadIdx.x; i < (group + 1) * rows; i += blockDim.x) {
        const int vi = i / rows, r = first + i % rows;
        float* out = FeatureOut(s, vi, m);
        out[r] = out[t.parent[r]] * x[vi * dk + t.last_index[r]];
      }
      __syncthreads();
    }
    for (int i = threadIdx.x; i < (group + 1) * m; i += blockDim.x) {
      const int vi = i / m, r = i % m;
      FeatureOut(s, vi, m)[r] *= vi == 0 ? t.key_scale[r] : t.query_scale[r];
    }
    if (threadIdx.x == 0) *state_scale = 1.0f;
    __syncthreads();
  }

  // GuardDenominator of taylor.cc: |den| < 1e-30 becomes +-1e-30 (sign kept, +0 -> +).
  static __device__ float Ratio(const Tables&, double num, double den, int, int, const float*) {
    const double guarded = fabs(den) >= 1e-30 ? den : (den < 0 ? -1e-30 : 1e-30);
    return float(num / guarded);
  }
  static __device__ void AfterToken(const Tables&, float*, const float*) {}
};

// --- slay -------------------------------------------------------------------------------------

struct SlayMech {
  using Tables = SlayTables;
  using Acc = float;  // as the CPU's ReadRow
  static constexpr bool kShifted = false;
  // Scratch: x [(group+1), dk], |x|^2 [group+1], poly [(group+1), P], prf [(group+1), R, M].

  static __device__ void Features(const Tables& t, int g, int dk, int group, int m, const float* kt,
                                  const float* qt, const float*, const LinearSmem& s, float* state_scale,
                                  float*) {
    const int vectors = group + 1, P = t.anchors, R = t.nodes, M = t.features;
    float* x = s.scratch;
    float* norm2 = x + vectors * dk;
    float* poly = norm2 + vectors;
    float* prf = poly + vectors * P;
    LoadVectors(kt, qt, group, dk, x);
    __syncthreads();
    RowSquares(x, vectors, dk, norm2);
    auto inv_norm = [&](int vi) { return 1.0f / fmaxf(sqrtf(norm2[vi]), 1e-12f); };
    const float inv_sqrt_p = rsqrtf(float(P)), inv_sqrt_m = rsqrtf(float(M));
    for (int i = threadIdx.x; i < vectors * P; i += blockDim.x) {
      const int vi = i / P, a = i % P;
      float dot = 0;
      for (int d = 0; d < dk; ++d) dot += t.anchor_dirs[a * dk + d] * x[vi * dk + d];
      dot *= inv_norm(vi);
      poly[i] = dot * dot * inv_sqrt_p;
    }
    for (int i = threadIdx.x; i < vectors * R * M; i += blockDim.x) {
      const int vi = i / (R * M), r = (i / M) % R, f = i % M;
      const float* om = t.omega + (size_t(r) * gridDim.y + g) * dk * M;
      float dot = 0;
      for (int d = 0; d < dk; ++d) dot += om[size_t(d) * M + f] * x[vi * dk + d];
      const float sr = t.node_s[r];
      const float gain = sqrtf(2.0f * sr) * inv_norm(vi);
      const float amp = sqrtf(t.node_w[r]) * inv_sqrt_m;
      prf[i] = amp * expf(fminf(fmaxf(gain * dot - sr, -20.0f), 20.0f));
    }
    __syncthreads();
    for (int i = threadIdx.x; i < vectors * m; i += blockDim.x) {
      const int vi = i / m, c = i % m;
      const int r = c / (P * M), a = (c / M) % P, f = c % M;
      FeatureOut(s, vi, m)[c] = poly[vi * P + a] * prf[(vi * R + r) * M + f];
    }
    if (threadIdx.x == 0) *state_scale = 1.0f;
    __syncthreads();
  }

  static __device__ float Ratio(const Tables& t, float num, float den, int, int, const float*) {
    return num / (den + t.delta);
  }
  static __device__ void AfterToken(const Tables&, float*, const float*) {}
};

// --- dark / performer -------------------------------------------------------------------------

struct DarkMech {
  using Tables = DarkTables;
  using Acc = float;  // as the CPU's ReadRow
  static constexpr bool kShifted = true;  // keys relative to the running max, queries to their own
  // Scratch: x [(group+1), dk], Mx [(group+1), rank], half_norm [group+1], top [group+1].

  // aux[i] = query i's own max logit; aux[group] = the key running max after this key.
  static __device__ void Features(const Tables& t, int g, int dk, int group, int m, const float* kt,
                                  const float* qt, const float* head_extra, const LinearSmem& s,
                                  float* state_scale, float* aux) {
    const int vectors = group + 1, rank = t.rank;
    float* x = s.scratch;
    float* mx = x + vectors * dk;
    float* half_norm = mx + vectors * rank;
    float* top = half_norm + vectors;
    LoadVectors(kt, qt, group, dk, x);
    __syncthreads();
    for (int i = threadIdx.x; i < vectors * rank; i += blockDim.x) {
      const int vi = i / rank, r = i % rank;
      const float* row = t.M + (size_t(g) * rank + r) * dk;
      float acc = 0;
      for (int d = 0; d < dk; ++d) acc += row[d] * x[vi * dk + d];
      mx[i] = acc;
    }
    __syncthreads();
    RowSquares(mx, vectors, rank, half_norm);  // |Mx|^2; the logits subtract scale * |Mx|^2 / 2
    const float root_scale = sqrtf(t.scale);
    for (int i = threadIdx.x; i < vectors * m; i += blockDim.x) {
      const int vi = i / m, f = i % m;
      const float* w = t.W + (size_t(g) * m + f) * dk;
      float dot = 0;
      for (int d = 0; d < dk; ++d) dot += w[d] * x[vi * dk + d];
      FeatureOut(s, vi, m)[f] = root_scale * dot - t.scale * half_norm[vi] / 2;
    }
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int vi = warp; vi < vectors; vi += blockDim.x / 32) {
      const float* l = FeatureOut(s, vi, m);
      float mval = -INFINITY;
      for (int f = lane; f < m; f += 32) mval = fmaxf(mval, l[f]);
      mval = WarpMax(mval);
      if (lane == 0) top[vi] = mval;
    }
    __syncthreads();
    // The key's reference moves to c' = max(c, max_f l_f); the carried sums are rescaled by
    // exp(c - c') in the state pass (0 from an empty state, whose c is -inf).
    const float c_old = *head_extra;
    const float c_new = fmaxf(c_old, top[0]);
    const float inv_sqrt_m = rsqrtf(float(m));
    for (int i = threadIdx.x; i < vectors * m; i += blockDim.x) {
      const int vi = i / m, f = i % m;
      float* out = FeatureOut(s, vi, m);
      out[f] = expf(out[f] - (vi == 0 ? c_new : top[vi])) * inv_sqrt_m;
    }
    if (threadIdx.x == 0) {
      *state_scale = c_new > c_old ? (isinf(c_old) ? 0.0f : expf(c_old - c_new)) : 1.0f;
      for (int i = 0; i < group; ++i) aux[i] = top[1 + i];
      aux[group] = c_new;
    }
    __syncthreads();
  }

  // dark.cc's GuardedRatio: the guard acts on the canonical denominator exp(log_shift) * den, with
  // log_shift = the query's own max logit + the key running max.
  static __device__ float Ratio(const Tables& t, float num, float den, int i, int group, const float* aux) {
    const double log_shift = double(aux[i]) + double(aux[group]);
    const double abs_den = fabs(double(den));
    const double log_delta = log(double(t.delta));
    const double log_den = abs_den > 0 ? log(abs_den) + log_shift : -INFINITY;
    if (!(log_den < log_delta)) return num / den;
    if (abs_den == 0) return 0.0f;
    const double rho = exp(log_den - log_delta);
    return num / den * float(rho / (rho + 2));
  }
  static __device__ void AfterToken(const Tables&, float* head_extra, const float* aux_c) { *head_extra = *aux_c; }
};

// --- the fused linear-state kernel --------------------------------------------------------------

// Where a split decode step's partial readouts lie in LinearStateLayout::partial: [segments,
// kv_heads, splits, group, dv + 1] accumulators, then per (segment, kv head) the mechanism's aux
// values [kLinearMaxGroup + 1] (dark: the queries' max logits and the key running max after the key).
template <typename Acc>
struct SplitPartials {
  Acc* sums;
  float* aux;
  int splits, group, width;

  __host__ __device__ SplitPartials(void* base, const AttnBatch& b, int splits_)
      : splits(splits_), group(b.heads / b.kv_heads), width(b.value_dim + 1) {
    sums = static_cast<Acc*>(base);
    aux = reinterpret_cast<float*>(sums + int64_t(b.segments) * b.kv_heads * splits * group * width);
  }
  static __host__ __device__ int64_t Bytes(const AttnBatch& b, int splits) {
    const int group = b.heads / b.kv_heads;
    return int64_t(b.segments) * b.kv_heads *
           (int64_t(splits) * group * (b.value_dim + 1) * int64_t(sizeof(Acc)) + (kLinearMaxGroup + 1) * 4);
  }
  __device__ Acc* Sums(const AttnBatch& b, int seg, int g, int split) const {
    return sums + ((int64_t(seg) * b.kv_heads + g) * splits + split) * group * width;
  }
  __device__ float* Aux(const AttnBatch& b, int seg, int g) const {
    return aux + (int64_t(seg) * b.kv_heads + g) * (kLinearMaxGroup + 1);
  }
};

// MaxGroup bounds the query heads per kv head and Cols the 32-column strips of a state row (dv + 1
// columns): the accumulators live in registers, sized by both. gridDim.z > 1 (a decode step: one
// token per segment) splits the state's rows into strips of split_rows, one per block: each block
// updates and reads its strip, writes its partial readout, and LinearMergeKernel finishes the token.
template <class Mech, int MaxGroup, int Cols>
__global__ void __launch_bounds__(kThreads, 2) LinearAttentionKernel(AttnBatch b, LinearStateLayout st,
                                                                  typename Mech::Tables t, int split_rows,
                                                                  const float* q, const float* k, const float* v,
                                                                  float* y) {
  using Acc = typename Mech::Acc;
  // Rows a warp loads before it updates them: fewer where fp64 accumulators take the registers.
  constexpr int kUnroll = sizeof(Acc) == 8 && MaxGroup * Cols >= 20 ? 2 : kRowUnroll;
  extern __shared__ __align__(16) float smem[];
  __shared__ float value[kLinearMaxValueDim + 1];  // the token's v, with value[dv] = 1 (for z)
  __shared__ float state_scale;
  __shared__ float aux[kLinearMaxGroup + 1];
  const int seg = blockIdx.x, g = blockIdx.y, splits = gridDim.z, split = blockIdx.z;
  const int group = b.heads / b.kv_heads, dk = b.head_dim, dv = b.value_dim, width = dv + 1;
  const int m = st.features;
  const int r_begin = splits > 1 ? min(m, split * split_rows) : 0;
  const int r_end = splits > 1 ? min(m, r_begin + split_rows) : m;
  const LinearSmem s = CarveLinearSmem<Acc>(smem, m, group, width);
  Acc* red = static_cast<Acc*>(s.red);
  const int slot = b.slot[seg], row0 = b.row_begin[seg], n = b.count[seg];
  if (b.chunked_min > 0 && n >= b.chunked_min) return;  // prefilled by the chunked path
  float* head = st.pool + int64_t(slot) * st.slot_floats + st.layer_offset + int64_t(g) * st.head_stride;
  float* extra = st.extra_off >= 0 ? head + st.extra_off : nullptr;
  const bool kahan = st.comp_off >= 0;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  for (int tok = 0; tok < n; ++tok) {
    const int64_t row = row0 + tok;
    const float* kt = k + (row * b.kv_heads + g) * dk;
    const float* qt = q + (row * b.heads + int64_t(g) * group) * dk;
    const float* vt = v + (row * b.kv_heads + g) * dv;
    for (int c = threadIdx.x; c < width; c += blockDim.x) value[c] = c < dv ? vt[c] : 1.0f;
    // Every split builds all the features (higher degrees are products of lower ones); the reference
    // extra (dark's running max) is only read here: with splits the merge kernel moves it.
    Mech::Features(t, g, dk, group, m, kt, qt, extra, s, &state_scale, aux);  // ends with a barrier

    // One pass over the state: read, scale, add the key, write; accumulate the readout.
    Acc acc[MaxGroup][Cols];
#pragma unroll
    for (int i = 0; i < MaxGroup; ++i) {
#pragma unroll
      for (int j = 0; j < Cols; ++j) acc[i][j] = Acc(0);
    }
    const float scale = state_scale;
    // Each warp takes kUnroll consecutive rows at a time and issues all their loads before any
    // arithmetic, so enough bytes are in flight to keep the memory system busy.
    for (int r0 = r_begin + warp * kUnroll; r0 < r_end; r0 += kWarps * kUnroll) {
      float sum[kUnroll][Cols], comp[kUnroll][Cols];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
        for (int j = 0; j < Cols; ++j) {
          const int r = r0 + u, c = lane + 32 * j;
          sum[u][j] = comp[u][j] = 0.0f;
          if (r < r_end && c < width) {
            const int64_t off = c < dv ? int64_t(r) * st.s_row + c : st.z_off + int64_t(r) * st.z_stride;
            sum[u][j] = head[off];
            if (kahan) comp[u][j] = head[st.comp_off + off];
          }
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int r = r0 + u;
        if (r >= r_end) break;
        const float kr = s.fk[r];
#pragma unroll
        for (int j = 0; j < Cols; ++j) {
          const int c = lane + 32 * j;
          if (c >= width) continue;
          const int64_t off = c < dv ? int64_t(r) * st.s_row + c : st.z_off + int64_t(r) * st.z_stride;
          // Products rounded on their own (__fmul_rn: never fused into the adds), so that the state
          // takes exactly the CPU's operations (kernels/cpu/state_update.h): bit for bit where the
          // features are (taylor's are products alone).
          const float term = __fmul_rn(kr, value[c]);
          float total = __fmul_rn(sum[u][j], scale);
          Acc read;
          if (kahan) {
            float carry = __fmul_rn(comp[u][j], scale);
            KahanAdd(total, carry, term);
            head[st.comp_off + off] = carry;
            // Taylor (Acc = double) reads sum and compensation in fp64, as the CPU does; slay and
            // dark add them in fp32, as theirs do.
            read = Acc(total) + Acc(carry);
          } else {
            total = __fadd_rn(total, term);
            read = Acc(total);
          }
          head[off] = total;
#pragma unroll
          for (int i = 0; i < MaxGroup; ++i) {
            if (i < group) acc[i][j] += Acc(s.fq[size_t(i) * m + r]) * read;
          }
        }
      }
    }
    // Merge the warps' partial readouts: red [warps, group, width] -> red [group, width].
#pragma unroll
    for (int i = 0; i < MaxGroup; ++i) {
#pragma unroll
      for (int j = 0; j < Cols; ++j) {
        const int c = lane + 32 * j;
        if (i < group && c < width) red[(size_t(warp) * group + i) * width + c] = acc[i][j];
      }
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < group * width; idx += blockDim.x) {
      Acc total = 0;
      for (int w = 0; w < kWarps; ++w) total += red[size_t(w) * group * width + idx];
      red[idx] = total;
    }
    __syncthreads();
    if (splits > 1) {
      // This strip's partial readout (and, from the first strip, the aux values) for the merge.
      const SplitPartials<Acc> part(st.partial, b, splits);
      Acc* out = part.Sums(b, seg, g, split);
      for (int idx = threadIdx.x; idx < group * width; idx += blockDim.x) out[idx] = red[idx];
      if (split == 0 && threadIdx.x <= group) part.Aux(b, seg, g)[threadIdx.x] = aux[threadIdx.x];
    } else {
      float* yt = y + (row * b.heads + int64_t(g) * group) * dv;
      for (int idx = threadIdx.x; idx < group * dv; idx += blockDim.x) {
        const int i = idx / dv, d = idx % dv;
        yt[idx] = Mech::Ratio(t, red[i * width + d], red[i * width + dv], i, group, aux);
      }
      if (threadIdx.x == 0 && extra != nullptr) Mech::AfterToken(t, extra, &aux[group]);
    }
    __syncthreads();
  }
}

// Grid (segments, kv_heads), after a split LinearAttentionKernel: each query head's readout summed
// over the strips (in a fixed order, in the accumulator type), divided with the mechanism's guard;
// dark's running max moves to the key's (read by every strip, so only now).
template <class Mech>
__global__ void __launch_bounds__(kThreads) LinearMergeKernel(AttnBatch b, LinearStateLayout st,
                                                              typename Mech::Tables t, int splits, float* y) {
  using Acc = typename Mech::Acc;
  __shared__ Acc total[kLinearMaxGroup * (kLinearMaxValueDim + 1)];
  const int seg = blockIdx.x, g = blockIdx.y;
  const int group = b.heads / b.kv_heads, dv = b.value_dim, width = dv + 1;
  const SplitPartials<Acc> part(st.partial, b, splits);
  for (int idx = threadIdx.x; idx < group * width; idx += blockDim.x) {
    Acc sum = 0;
    for (int s = 0; s < splits; ++s) sum += part.Sums(b, seg, g, s)[idx];
    total[idx] = sum;
  }
  __syncthreads();
  const float* aux = part.Aux(b, seg, g);
  float* yt = y + (int64_t(b.row_begin[seg]) * b.heads + int64_t(g) * group) * dv;
  for (int idx = threadIdx.x; idx < group * dv; idx += blockDim.x) {
    const int i = idx / dv, d = idx % dv;
    yt[idx] = Mech::Ratio(t, total[i * width + d], total[i * width + dv], i, group, aux);
  }
  if (threadIdx.x == 0 && st.extra_off >= 0) {
    float* head = st.pool + int64_t(b.slot[seg]) * st.slot_floats + st.layer_offset + int64_t(g) * st.head_stride;
    Mech::AfterToken(t, head + st.extra_off, &aux[group]);
  }
}

// --- chunked prefill (taylor, slay, dark) ----------------------------------------------------------

// Scratch of one chunk, per kv head g (dense, row-major): Fq [C * group, m], Fk [C, m], Vx [C, dv + 1],
// Seff [m, dv + 1], A [C * group, C], Num [C * group, dv + 1], dS [m, dv + 1], and for dark Aux
// [C, group + 1] (each token's query max logits, then the key running max c_j after it) and Refs
// [2] (the running max carried into the chunk, and at its end); the heads' blocks are consecutive
// ([kv_heads, ...]) so each GEMM is one strided batch over the heads.
struct ChunkScratch {
  int C, group, m, width;
  int64_t fq, fk, vx, seff, a, num, ds, ax;  // per-head strides (floats)
  float *Fq, *Fk, *Vx, *Seff, *A, *Num, *dS, *Aux, *Refs;

  __host__ __device__ ChunkScratch(float* base, int kv_heads, int C_, int group_, int m_, int width_)
      : C(C_), group(group_), m(m_), width(width_) {
    fq = int64_t(C) * group * m;
    fk = int64_t(C) * m;
    vx = int64_t(C) * width;
    seff = int64_t(m) * width;
    a = int64_t(C) * group * C;
    num = int64_t(C) * group * width;
    ds = seff;
    Fq = base;
    Fk = Fq + kv_heads * fq;
    Vx = Fk + kv_heads * fk;
    Seff = Vx + kv_heads * vx;
    A = Seff + kv_heads * seff;
    Num = A + kv_heads * a;
    dS = Num + kv_heads * num;
    ax = int64_t(C) * (group + 1);
    Aux = dS + kv_heads * ds;
    Refs = Aux + kv_heads * ax;
  }
  int64_t Floats(int kv_heads) const {
    return int64_t(kv_heads) * (fq + fk + vx + seff + a + num + ds + ax + 2);
  }
  // Token tok's aux row of kv head g: [query max logits (group), key running max c_tok].
  __device__ float* AuxRow(int g, int tok) const { return Aux + g * ax + int64_t(tok) * (group + 1); }
};

// Grid (tokens, kv_heads): token `tok` of the chunk: its features (Mech::Features, as the fused
// kernel builds them) copied out to Fq / Fk, and [v 1] to Vx. Dark's features are built against an
// empty reference (-inf), so each key's are relative to its own max logit (DarkChunkRefsKernel
// moves them to the running max) and Aux gets the query maxima and that key max.
template <class Mech>
__global__ void __launch_bounds__(kThreads) ChunkFeaturesKernel(AttnBatch b, typename Mech::Tables t, int m, int row0,
                                                                ChunkScratch cs, const float* q, const float* k,
                                                                const float* v) {
  extern __shared__ float smem[];
  __shared__ float state_scale, no_reference;
  __shared__ float aux[kLinearMaxGroup + 1];
  const int tok = blockIdx.x, g = blockIdx.y;
  const int group = b.heads / b.kv_heads, dk = b.head_dim, dv = b.value_dim;
  const LinearSmem s = CarveLinearSmem<float>(smem, m, group, 0);
  const int64_t row = row0 + tok;
  if (threadIdx.x == 0) no_reference = -INFINITY;
  __syncthreads();
  Mech::Features(t, g, dk, group, m, k + (row * b.kv_heads + g) * dk, q + (row * b.heads + int64_t(g) * group) * dk,
                 &no_reference, s, &state_scale, aux);
  if (Mech::kShifted && threadIdx.x <= group) cs.AuxRow(g, tok)[threadIdx.x] = aux[threadIdx.x];
  float* fk = cs.Fk + g * cs.fk + int64_t(tok) * m;
  float* fq = cs.Fq + g * cs.fq + int64_t(tok) * group * m;
  for (int i = threadIdx.x; i < m; i += blockDim.x) fk[i] = s.fk[i];
  for (int i = threadIdx.x; i < group * m; i += blockDim.x) fq[i] = s.fq[i];
  float* vx = cs.Vx + g * cs.vx + int64_t(tok) * cs.width;
  const float* vt = v + (row * b.kv_heads + g) * dv;
  for (int c = threadIdx.x; c < cs.width; c += blockDim.x) vx[c] = c < dv ? vt[c] : 1.0f;
}

__device__ __forceinline__ int64_t StateOffset(const LinearStateLayout& st, int r, int c, int dv) {
  return c < dv ? int64_t(r) * st.s_row + c : st.z_off + int64_t(r) * st.z_stride;
}

// Grid (ceil(m * width / threads), kv_heads): Seff = S + compensation, dense.
__global__ void GatherStateKernel(LinearStateLayout st, int slot, int dv, ChunkScratch cs) {
  const int g = blockIdx.y;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(cs.m) * cs.width) return;
  const int r = int(i / cs.width), c = int(i % cs.width);
  const float* head = st.pool + int64_t(slot) * st.slot_floats + st.layer_offset + int64_t(g) * st.head_stride;
  const int64_t off = StateOffset(st, r, c, dv);
  cs.Seff[g * cs.seff + i] = head[off] + (st.comp_off >= 0 ? head[st.comp_off + off] : 0.0f);
}

// The same grid: the state += dS (Kahan where the layout has compensations). Shifted (dark): the
// carried sums are first rescaled from the chunk's carried reference to its final one, as the CPU's
// ScaleState does (compensations too), and the final reference is stored.
template <bool Shifted>
__global__ void AddToStateKernel(LinearStateLayout st, int slot, int dv, ChunkScratch cs) {
  const int g = blockIdx.y;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(cs.m) * cs.width) return;
  const int r = int(i / cs.width), c = int(i % cs.width);
  float* head = st.pool + int64_t(slot) * st.slot_floats + st.layer_offset + int64_t(g) * st.head_stride;
  const int64_t off = StateOffset(st, r, c, dv);
  const float delta = cs.dS[g * cs.ds + i];
  float scale = 1.0f;
  if (Shifted) {
    const float c_carried = cs.Refs[2 * g], c_end = cs.Refs[2 * g + 1];
    if (c_end > c_carried) scale = isinf(c_carried) ? 0.0f : expf(c_carried - c_end);
    if (i == 0) head[st.extra_off] = c_end;
  }
  if (st.comp_off >= 0) {
    float sum = head[off] * scale, comp = head[st.comp_off + off] * scale;
    KahanAdd(sum, comp, delta);
    head[off] = sum;
    head[st.comp_off + off] = comp;
  } else {
    head[off] = head[off] * scale + delta;
  }
}

// Grid (kv_heads): dark's references. c_j = max(c carried, key maxima of tokens <= j) (the CPU's
// running max), stored in Aux; each key's features (relative to its own max) brought to c_j; Refs =
// (c carried, c at the chunk's end).
__global__ void DarkChunkRefsKernel(LinearStateLayout st, int slot, ChunkScratch cs, int tokens) {
  __shared__ float top[kPrefillChunk], c_run[kPrefillChunk];  // each key's max, the running max
  const int g = blockIdx.x;
  const float* head = st.pool + int64_t(slot) * st.slot_floats + st.layer_offset + int64_t(g) * st.head_stride;
  const float c_carried = head[st.extra_off];
  for (int j = threadIdx.x; j < tokens; j += blockDim.x) top[j] = cs.AuxRow(g, j)[cs.group];
  __syncthreads();
  if (threadIdx.x == 0) {
    float c = c_carried;
    for (int j = 0; j < tokens; ++j) {
      c = fmaxf(c, top[j]);
      c_run[j] = c;
    }
    cs.Refs[2 * g] = c_carried;
    cs.Refs[2 * g + 1] = c;
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < int64_t(tokens) * cs.m; i += blockDim.x) {
    const int j = int(i / cs.m);
    cs.Fk[g * cs.fk + i] *= expf(top[j] - c_run[j]);
  }
  for (int j = threadIdx.x; j < tokens; j += blockDim.x) cs.AuxRow(g, j)[cs.group] = c_run[j];
}

// Grid (tokens, kv_heads): dark's carried-state term of query token t, phi(q) S computed against the
// carried reference, brought to c_t: Num rows times exp(c carried - c_t) (0 from an empty state).
__global__ void DarkCarriedScaleKernel(ChunkScratch cs) {
  const int tok = blockIdx.x, g = blockIdx.y;
  const float c_carried = cs.Refs[2 * g], c_t = cs.AuxRow(g, tok)[cs.group];
  const float f = isinf(c_carried) ? 0.0f : expf(c_carried - c_t);
  float* num = cs.Num + g * cs.num + int64_t(tok) * cs.group * cs.width;
  for (int i = threadIdx.x; i < cs.group * cs.width; i += blockDim.x) num[i] *= f;
}

// Grid (ceil(tokens * m / threads), kv_heads): dark's keys weighted for the state update, from their
// own reference c_j to the chunk's final one: Fk rows times exp(c_j - c_end).
__global__ void DarkKeyWeightKernel(ChunkScratch cs, int tokens) {
  const int g = blockIdx.y;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(tokens) * cs.m) return;
  const int j = int(i / cs.m);
  cs.Fk[g * cs.fk + i] *= expf(cs.AuxRow(g, j)[cs.group] - cs.Refs[2 * g + 1]);
}

// Grid (ceil(C * group * C / threads), kv_heads): A[t * group + i][j] = 0 for keys after the query.
// Shifted (dark): the rest times exp(c_j - c_t), key j's features brought to query t's reference.
template <bool Shifted>
__global__ void CausalMaskKernel(ChunkScratch cs, int tokens) {
  const int g = blockIdx.y;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(tokens) * cs.group * tokens) return;
  const int qrow = int(i / tokens), j = int(i % tokens), t = qrow / cs.group;
  if (j > t) {
    cs.A[g * cs.a + i] = 0.0f;
  } else if (Shifted) {
    cs.A[g * cs.a + i] *= expf(cs.AuxRow(g, j)[cs.group] - cs.AuxRow(g, t)[cs.group]);
  }
}

// Grid (tokens, kv_heads): y = Num[:dv] / Num[dv] per query head, with the mechanism's guard.
template <class Mech>
__global__ void ChunkRatioKernel(AttnBatch b, typename Mech::Tables t, int row0, ChunkScratch cs, float* y) {
  const int tok = blockIdx.x, g = blockIdx.y;
  const int group = cs.group, dv = b.value_dim;
  float* yt = y + ((int64_t(row0) + tok) * b.heads + int64_t(g) * group) * dv;
  const float* num = cs.Num + g * cs.num + int64_t(tok) * group * cs.width;
  for (int idx = threadIdx.x; idx < group * dv; idx += blockDim.x) {
    const int i = idx / dv, d = idx % dv;
    yt[idx] = Mech::Ratio(t, num[i * cs.width + d], num[i * cs.width + dv], i, group,
                          Mech::kShifted ? cs.AuxRow(g, tok) : nullptr);
  }
}

template <class Mech>
void LaunchPrefillChunked(Blas& blas, const AttnBatch& b, const LinearStateLayout& st, const typename Mech::Tables& t,
                          int scratch_floats, int slot, int row0, int n, bool tf32, float* scratch, const float* q,
                          const float* k, const float* v, float* y, cudaStream_t stream) {
  const int group = b.heads / b.kv_heads, m = st.features, width = b.value_dim + 1, G = b.kv_heads;
  const size_t smem = (FeatureFloats(m, group) + scratch_floats) * sizeof(float);
  static size_t allowed = 48 * 1024;
  AllowSharedMemory(ChunkFeaturesKernel<Mech>, smem, allowed);
  for (int c0 = 0; c0 < n; c0 += kPrefillChunk) {
    const int C = std::min(kPrefillChunk, n - c0), R = C * group;
    const ChunkScratch cs(scratch, G, C, group, m, width);
    ChunkFeaturesKernel<Mech><<<dim3(C, G), kThreads, smem, stream>>>(b, t, m, row0 + c0, cs, q, k, v);
    STEADY_CUDA_CHECK_LAUNCH("ChunkFeaturesKernel", stream);
    if (Mech::kShifted) {
      DarkChunkRefsKernel<<<G, kThreads, 0, stream>>>(st, slot, cs, C);
      STEADY_CUDA_CHECK_LAUNCH("DarkChunkRefsKernel", stream);
    }
    const dim3 state_grid(unsigned((int64_t(m) * width + kThreads - 1) / kThreads), G);
    GatherStateKernel<<<state_grid, kThreads, 0, stream>>>(st, slot, b.value_dim, cs);
    STEADY_CUDA_CHECK_LAUNCH("GatherStateKernel", stream);
    // Num = phi(Q) Seff: every query against the state carried into the chunk.
    GemmBatched(blas, false, false, R, width, m, cs.Fq, cs.fq, cs.Seff, cs.seff, 0.0f, cs.Num, cs.num, G, tf32);
    if (Mech::kShifted) {
      DarkCarriedScaleKernel<<<dim3(C, G), kThreads, 0, stream>>>(cs);
      STEADY_CUDA_CHECK_LAUNCH("DarkCarriedScaleKernel", stream);
    }
    // A = mask(phi(Q) phi(K)^T); Num += A [V 1]: the chunk's own keys, causally.
    GemmBatched(blas, false, true, R, C, m, cs.Fq, cs.fq, cs.Fk, cs.fk, 0.0f, cs.A, cs.a, G, tf32);
    CausalMaskKernel<Mech::kShifted>
        <<<dim3(unsigned((int64_t(R) * C + kThreads - 1) / kThreads), G), kThreads, 0, stream>>>(cs, C);
    STEADY_CUDA_CHECK_LAUNCH("CausalMaskKernel", stream);
    GemmBatched(blas, false, false, R, width, C, cs.A, cs.a, cs.Vx, cs.vx, 1.0f, cs.Num, cs.num, G, tf32);
    ChunkRatioKernel<Mech><<<dim3(C, G), kThreads, 0, stream>>>(b, t, row0 + c0, cs, y);
    STEADY_CUDA_CHECK_LAUNCH("ChunkRatioKernel", stream);
    // dS = phi(K)^T [V 1], added to the state.
    if (Mech::kShifted) {
      DarkKeyWeightKernel<<<dim3(unsigned((int64_t(C) * m + kThreads - 1) / kThreads), G), kThreads, 0, stream>>>(
          cs, C);
      STEADY_CUDA_CHECK_LAUNCH("DarkKeyWeightKernel", stream);
    }
    GemmBatched(blas, true, false, m, width, C, cs.Fk, cs.fk, cs.Vx, cs.vx, 0.0f, cs.dS, cs.ds, G, tf32);
    AddToStateKernel<Mech::kShifted><<<state_grid, kThreads, 0, stream>>>(st, slot, b.value_dim, cs);
    STEADY_CUDA_CHECK_LAUNCH("AddToStateKernel", stream);
  }
}

// --- softmax ------------------------------------------------------------------------------------

// The cache's element type: fp32, or bf16 (KvCacheLayout::bf16: half the bytes a decode step reads).
__device__ __forceinline__ float LoadKv(const float* p) { return *p; }
__device__ __forceinline__ float LoadKv(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void StoreKv(float* p, float x) { *p = x; }
__device__ __forceinline__ void StoreKv(__nv_bfloat16* p, float x) { *p = __float2bfloat16_rn(x); }

// Grid (segments, min(max_count, kMaxGridYZ)): row `tok` of segment `seg` goes to cache row
// position + tok (blocks stride over a segment longer than the grid).
template <typename KV>
__global__ void AppendKvKernel(AttnBatch b, KvCacheLayout kv, const int64_t* positions, const float* k,
                               const float* v) {
  const int seg = blockIdx.x;
  const int dk = b.head_dim, dv = b.value_dim, width = dk + dv;
  KV* base = static_cast<KV*>(kv.cache) + int64_t(b.slot[seg]) * kv.slot_stride + kv.layer_offset;
  for (int tok = blockIdx.y; tok < b.count[seg]; tok += gridDim.y) {
    const int64_t row = b.row_begin[seg] + tok;
    KV* dst = base + (positions[seg] + tok) * int64_t(b.kv_heads) * width;
    for (int i = threadIdx.x; i < b.kv_heads * width; i += blockDim.x) {
      const int g = i / width, c = i % width;
      StoreKv(dst + i, c < dk ? k[(row * b.kv_heads + g) * dk + c] : v[(row * b.kv_heads + g) * dv + c - dk]);
    }
  }
}

// Grid (segments, kv_heads, min(max_count, kMaxGridYZ)): block z attends for tokens z, z + gridDim.z,
// ... of its segment. Shared: q [group, dk], then per warp max [group], sum [group] and weighted
// values [group, dv]. With splits > 1 (decode: one token per segment) blockIdx.z is a split of the
// cached rows (flash-decoding): the block writes its (max, sum, weighted values) to kv.partial for
// SoftmaxMergeKernel instead of y.
template <typename KV>
__global__ void __launch_bounds__(kThreads) SoftmaxAttendKernel(AttnBatch b, KvCacheLayout kv,
                                                                const int64_t* positions, float scale,
                                                                const float* q, float* y, int splits) {
  extern __shared__ float smem[];
  const int seg = blockIdx.x, g = blockIdx.y;
  const int split = splits > 1 ? int(blockIdx.z) : 0;
  const int first_tok = splits > 1 ? 0 : int(blockIdx.z), tok_stride = splits > 1 ? 1 : int(gridDim.z);
  const int n = splits > 1 ? 1 : b.count[seg];
  const int group = b.heads / b.kv_heads, dk = b.head_dim, dv = b.value_dim, width = dk + dv;
  float* qs = smem;
  float* wmax = qs + group * dk;
  float* wsum = wmax + kWarps * group;
  float* wacc = wsum + kWarps * group;
  const KV* cache = static_cast<const KV*>(kv.cache) + int64_t(b.slot[seg]) * kv.slot_stride + kv.layer_offset +
                    int64_t(g) * width;
  const int64_t row_stride = int64_t(b.kv_heads) * width;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int tok = first_tok; tok < n; tok += tok_stride) {
    const int64_t row = b.row_begin[seg] + tok;
    const int64_t len = positions[seg] + tok + 1;
    const int64_t per_split = (len + splits - 1) / splits;
    const int64_t first = split * per_split, last = len < first + per_split ? len : first + per_split;
    for (int i = threadIdx.x; i < group * dk; i += blockDim.x) qs[i] = q[(row * b.heads + int64_t(g) * group) * dk + i];
    __syncthreads();
    float mx[kLinearMaxGroup], sum[kLinearMaxGroup], acc[kLinearMaxGroup][kColIters];
#pragma unroll
    for (int i = 0; i < kLinearMaxGroup; ++i) {
      mx[i] = -INFINITY;
      sum[i] = 0.0f;
#pragma unroll
      for (int j = 0; j < kColIters; ++j) acc[i][j] = 0.0f;
    }
    for (int64_t j = first + warp; j < last; j += kWarps) {
      const KV* kj = cache + j * row_stride;
      const KV* vj = kj + dk;
#pragma unroll
      for (int i = 0; i < kLinearMaxGroup; ++i) {
        if (i >= group) break;
        float dot = 0;
        for (int d = lane; d < dk; d += 32) dot += qs[i * dk + d] * LoadKv(kj + d);
        const float x = scale * WarpSum(dot);
        const float m_new = fmaxf(mx[i], x);
        const float corr = expf(mx[i] - m_new), p = expf(x - m_new);
        sum[i] = sum[i] * corr + p;
#pragma unroll
        for (int jj = 0; jj < kColIters; ++jj) {
          const int d = lane + 32 * jj;
          if (d < dv) acc[i][jj] = acc[i][jj] * corr + p * LoadKv(vj + d);
        }
        mx[i] = m_new;
      }
    }
#pragma unroll
    for (int i = 0; i < kLinearMaxGroup; ++i) {
      if (i >= group) break;
      if (lane == 0) {
        wmax[warp * group + i] = mx[i];
        wsum[warp * group + i] = sum[i];
      }
#pragma unroll
      for (int jj = 0; jj < kColIters; ++jj) {
        const int d = lane + 32 * jj;
        if (d < dv) wacc[(size_t(warp) * group + i) * dv + d] = acc[i][jj];
      }
    }
    __syncthreads();
    float* yt = y + (row * b.heads + int64_t(g) * group) * dv;
    for (int idx = threadIdx.x; idx < group * dv; idx += blockDim.x) {
      const int i = idx / dv, d = idx % dv;
      float top = -INFINITY;
      for (int w = 0; w < kWarps; ++w) top = fmaxf(top, wmax[w * group + i]);
      float den = 0, num = 0;
      for (int w = 0; w < kWarps; ++w) {
        const float f = wsum[w * group + i] > 0 ? expf(wmax[w * group + i] - top) : 0.0f;
        den += wsum[w * group + i] * f;
        num += wacc[(size_t(w) * group + i) * dv + d] * f;
      }
      if (splits == 1) {
        yt[idx] = num / den;
      } else {
        // This split's partial, [group, dv + 2]: (max, sum, weighted values relative to max).
        float* pi = kv.partial + (((int64_t(seg) * b.kv_heads + g) * splits + split) * group + i) * (dv + 2);
        if (d == 0) {
          pi[0] = top;
          pi[1] = den;
        }
        pi[2 + d] = num;
      }
    }
    __syncthreads();  // the next token rewrites qs and the warps' partials
  }
}

// Grid (segments, kv_heads): y from the splits' partials (a split with no rows has sum 0).
__global__ void SoftmaxMergeKernel(AttnBatch b, KvCacheLayout kv, int splits, float* y) {
  const int seg = blockIdx.x, g = blockIdx.y;
  const int group = b.heads / b.kv_heads, dv = b.value_dim;
  const float* part = kv.partial + (int64_t(seg) * b.kv_heads + g) * splits * group * (dv + 2);
  float* yt = y + (int64_t(b.row_begin[seg]) * b.heads + int64_t(g) * group) * dv;
  for (int idx = threadIdx.x; idx < group * dv; idx += blockDim.x) {
    const int i = idx / dv, d = idx % dv;
    float top = -INFINITY;
    for (int s = 0; s < splits; ++s) {
      const float* ps = part + (int64_t(s) * group + i) * (dv + 2);
      if (ps[1] > 0) top = fmaxf(top, ps[0]);
    }
    float den = 0, num = 0;
    for (int s = 0; s < splits; ++s) {
      const float* ps = part + (int64_t(s) * group + i) * (dv + 2);
      if (!(ps[1] > 0)) continue;
      const float f = expf(ps[0] - top);
      den += ps[1] * f;
      num += ps[2 + d] * f;
    }
    yt[idx] = num / den;
  }
}

// No cap on tokens per segment here: only softmax's grids have a token dimension, and they stride
// over segments longer than a grid's y or z extent (kMaxGridYZ).
void CheckBatch(const AttnBatch& b) {
  STEADY_CHECK(b.segments >= 1 && b.max_count >= 1);
  STEADY_CHECK(b.kv_heads >= 1 && b.heads % b.kv_heads == 0 && b.heads / b.kv_heads <= kLinearMaxGroup);
  STEADY_CHECK(b.value_dim >= 1 && b.value_dim <= kLinearMaxValueDim && b.head_dim >= 1);
}

// Strips of state rows for a decode step (one token per segment) with few (segment, kv head)
// pairs: about kLinearSplitBlocks blocks in all, each strip at least kMinSplitRows rows, as far as
// st.partial holds their partials. 1: no split (a prefill segment scans its tokens in order).
template <typename Acc>
int LinearSplits(const AttnBatch& b, const LinearStateLayout& st, int* split_rows) {
  *split_rows = st.features;
  if (b.max_count != 1 || st.partial == nullptr) return 1;
  int splits = std::min(kLinearSplitBlocks / (b.segments * b.kv_heads), st.features / kMinSplitRows);
  while (splits > 1 && SplitPartials<Acc>::Bytes(b, splits) > st.partial_bytes) --splits;
  if (splits <= 1) return 1;
  const int rows = (st.features + splits - 1) / splits;
  *split_rows = (rows + kRowUnroll - 1) / kRowUnroll * kRowUnroll;
  return (st.features + *split_rows - 1) / *split_rows;
}

template <class Mech, int MaxGroup, int Cols>
void LaunchLinearAs(const AttnBatch& b, const LinearStateLayout& st, const typename Mech::Tables& t, size_t smem,
                    int splits, int split_rows, const float* q, const float* k, const float* v, float* y,
                    cudaStream_t stream) {
  static size_t allowed = 48 * 1024;
  AllowSharedMemory(LinearAttentionKernel<Mech, MaxGroup, Cols>, smem, allowed);
  LinearAttentionKernel<Mech, MaxGroup, Cols><<<dim3(b.segments, b.kv_heads, splits), kThreads, smem, stream>>>(
      b, st, t, split_rows, q, k, v, y);
  STEADY_CUDA_CHECK_LAUNCH("LinearAttentionKernel", stream);
}

template <class Mech>
void LaunchLinear(const AttnBatch& b, const LinearStateLayout& st, const typename Mech::Tables& t,
                  int scratch_floats, const float* q, const float* k, const float* v, float* y,
                  cudaStream_t stream) {
  CheckBatch(b);
  const size_t smem = LinearAttentionSharedBytes(b, st.features, scratch_floats);
  int split_rows = 0;
  const int splits = LinearSplits<typename Mech::Acc>(b, st, &split_rows);
  const int group = b.heads / b.kv_heads, strips = (b.value_dim + 1 + 31) / 32;
  // Instantiations: group <= 4 or <= 8; dv + 1 <= 32, <= 96 (head_dim 64) or <= 160 columns.
  auto launch = [&](auto kernel_shape) {
    constexpr int kGroup = decltype(kernel_shape)::kGroup, kCols = decltype(kernel_shape)::kCols;
    LaunchLinearAs<Mech, kGroup, kCols>(b, st, t, smem, splits, split_rows, q, k, v, y, stream);
  };
  if (group <= 4) {
    if (strips <= 1) launch(KernelShape<4, 1>());
    else if (strips <= 3) launch(KernelShape<4, 3>());
    else launch(KernelShape<4, kColIters>());
  } else {
    if (strips <= 1) launch(KernelShape<kLinearMaxGroup, 1>());
    else if (strips <= 3) launch(KernelShape<kLinearMaxGroup, 3>());
    else launch(KernelShape<kLinearMaxGroup, kColIters>());
  }
  if (splits > 1) {
    LinearMergeKernel<Mech><<<dim3(b.segments, b.kv_heads), kThreads, 0, stream>>>(b, st, t, splits, y);
    STEADY_CUDA_CHECK_LAUNCH("LinearMergeKernel", stream);
  }
}

template <typename KV>
void LaunchSoftmax(const AttnBatch& b, const KvCacheLayout& kv, const int64_t* positions, float scale, const float* q,
                   const float* k, const float* v, float* y, cudaStream_t stream) {
  const unsigned token_blocks = unsigned(std::min(b.max_count, kMaxGridYZ));
  AppendKvKernel<KV><<<dim3(b.segments, token_blocks), kThreads, 0, stream>>>(b, kv, positions, k, v);
  STEADY_CUDA_CHECK_LAUNCH("AppendKvKernel", stream);
  const int group = b.heads / b.kv_heads;
  const size_t smem = (size_t(group) * b.head_dim + 2 * kWarps * group + size_t(kWarps) * group * b.value_dim) *
                      sizeof(float);
  static size_t allowed = 48 * 1024;
  AllowSharedMemory(SoftmaxAttendKernel<KV>, smem, allowed);
  // Decode (one token per segment): split the cached rows over more blocks when the step has few
  // (segment, kv head) pairs, about kSplitBlocks blocks in all, as far as kv.partial holds them.
  int splits = 1;
  if (b.max_count == 1 && kv.partial != nullptr) {
    splits = std::max(1, std::min(kMaxSplits, kSplitBlocks / (b.segments * b.kv_heads)));
    const int64_t per_split = int64_t(b.kv_heads) * group * (b.value_dim + 2);
    while (splits > 1 && int64_t(b.segments) * splits * per_split > kv.partial_floats) --splits;
  }
  SoftmaxAttendKernel<KV><<<dim3(b.segments, b.kv_heads, splits > 1 ? unsigned(splits) : token_blocks), kThreads, smem,
                            stream>>>(b, kv, positions, scale, q, y, splits);
  STEADY_CUDA_CHECK_LAUNCH("SoftmaxAttendKernel", stream);
  if (splits > 1) {
    SoftmaxMergeKernel<<<dim3(b.segments, b.kv_heads), kThreads, 0, stream>>>(b, kv, splits, y);
    STEADY_CUDA_CHECK_LAUNCH("SoftmaxMergeKernel", stream);
  }
}

}  // namespace

size_t LinearAttentionSharedBytes(const AttnBatch& b, int features, int scratch_floats) {
  const int group = b.heads / b.kv_heads;
  const size_t floats = FeatureFloats(features, group) + size_t(kWarps) * group * (b.value_dim + 1) + scratch_floats;
  return floats * sizeof(float);
}

size_t MaxSharedBytesPerBlock() {
  int device = 0, bytes = 0;
  STEADY_CUDA_CHECK(cudaGetDevice(&device));
  STEADY_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  // Static shared memory of the kernels (value row, scale, aux) comes out of the same budget.
  return size_t(bytes) - (kLinearMaxValueDim + 1 + 1 + kLinearMaxGroup + 1) * sizeof(float);
}

int TaylorScratchFloats(const AttnBatch& b) {
  const int group = b.heads / b.kv_heads;
  // x [(group+1), dk], plus the second half of the fp64 readout partials (LinearAttentionSharedBytes
  // counts them as floats).
  return (group + 1) * b.head_dim + kWarps * group * (b.value_dim + 1);
}

int SlayScratchFloats(const AttnBatch& b, const SlayTables& t) {
  const int group = b.heads / b.kv_heads;
  return (group + 1) * (b.head_dim + 1 + t.anchors + t.nodes * t.features);
}

int DarkScratchFloats(const AttnBatch& b, const DarkTables& t) {
  const int group = b.heads / b.kv_heads;
  return (group + 1) * (b.head_dim + t.rank + 2);
}

int64_t LinearPartialBytes(const AttnBatch& shape) {
  // Splits stop at kLinearSplitBlocks blocks, so segments * kv_heads * splits <= kLinearSplitBlocks.
  const int group = shape.heads / shape.kv_heads;
  return int64_t(kLinearSplitBlocks) * (int64_t(group) * (shape.value_dim + 1) * int64_t(sizeof(double)) +
                                        (kLinearMaxGroup + 1) * int64_t(sizeof(float)));
}

void TaylorAttention(const AttnBatch& b, const LinearStateLayout& st, const TaylorTables& t, const float* q,
                     const float* k, const float* v, float* y, cudaStream_t stream) {
  STEADY_CHECK(t.order >= 1 && t.order <= kTaylorMaxOrder && t.degree_offset[t.order] == st.features);
  LaunchLinear<TaylorMech>(b, st, t, TaylorScratchFloats(b), q, k, v, y, stream);
}

void SlayAttention(const AttnBatch& b, const LinearStateLayout& st, const SlayTables& t, const float* q,
                   const float* k, const float* v, float* y, cudaStream_t stream) {
  STEADY_CHECK(t.nodes * t.anchors * t.features == st.features);
  LaunchLinear<SlayMech>(b, st, t, SlayScratchFloats(b, t), q, k, v, y, stream);
}

void DarkAttention(const AttnBatch& b, const LinearStateLayout& st, const DarkTables& t, const float* q,
                   const float* k, const float* v, float* y, cudaStream_t stream) {
  STEADY_CHECK(t.features == st.features && st.extra_off >= 0);
  LaunchLinear<DarkMech>(b, st, t, DarkScratchFloats(b, t), q, k, v, y, stream);
}

size_t ChunkedPrefillScratchFloats(const AttnBatch& shape, int features) {
  const int group = shape.heads / shape.kv_heads;
  return size_t(ChunkScratch(nullptr, shape.kv_heads, kPrefillChunk, group, features, shape.value_dim + 1)
                    .Floats(shape.kv_heads));
}

void TaylorPrefillChunked(Blas& blas, const AttnBatch& shape, const LinearStateLayout& st, const TaylorTables& t,
                          int slot, int row0, int n, bool tf32, float* scratch, const float* q, const float* k,
                          const float* v, float* y, cudaStream_t stream) {
  const int group = shape.heads / shape.kv_heads;
  LaunchPrefillChunked<TaylorMech>(blas, shape, st, t, (group + 1) * shape.head_dim, slot, row0, n, tf32, scratch, q,
                                   k, v, y, stream);
}

void SlayPrefillChunked(Blas& blas, const AttnBatch& shape, const LinearStateLayout& st, const SlayTables& t,
                        int slot, int row0, int n, bool tf32, float* scratch, const float* q, const float* k,
                        const float* v, float* y, cudaStream_t stream) {
  LaunchPrefillChunked<SlayMech>(blas, shape, st, t, SlayScratchFloats(shape, t), slot, row0, n, tf32, scratch, q, k,
                                 v, y, stream);
}

void DarkPrefillChunked(Blas& blas, const AttnBatch& shape, const LinearStateLayout& st, const DarkTables& t,
                        int slot, int row0, int n, bool tf32, float* scratch, const float* q, const float* k,
                        const float* v, float* y, cudaStream_t stream) {
  STEADY_CHECK(t.features == st.features && st.extra_off >= 0);
  LaunchPrefillChunked<DarkMech>(blas, shape, st, t, DarkScratchFloats(shape, t), slot, row0, n, tf32, scratch, q, k,
                                 v, y, stream);
}

int64_t SoftmaxPartialFloats(const AttnBatch& shape) {
  // Splits stop at kSplitBlocks blocks, so segments * kv_heads * splits <= kSplitBlocks.
  return int64_t(kSplitBlocks) * (shape.heads / shape.kv_heads) * (shape.value_dim + 2);
}

void SoftmaxAttention(const AttnBatch& b, const KvCacheLayout& kv, const int64_t* positions, float scale,
                      const float* q, const float* k, const float* v, float* y, cudaStream_t stream) {
  CheckBatch(b);
  if (kv.bf16) {
    LaunchSoftmax<__nv_bfloat16>(b, kv, positions, scale, q, k, v, y, stream);
  } else {
    LaunchSoftmax<float>(b, kv, positions, scale, q, k, v, y, stream);
  }
}

}  // namespace steady::cuda
