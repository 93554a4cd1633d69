// Types shared by every attention mechanism. A mechanism is a set of free functions over plain data
// (see attention.h for the list); this header holds what they all take.
#ifndef STEADY_MODEL_MECHANISMS_COMMON_H_
#define STEADY_MODEL_MECHANISMS_COMMON_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/host_device.h"

namespace steady {

struct LayerAttention;  // attention.h

// Per-layer attention geometry. Buffers passed to mechanisms are token-major:
//   q [n, heads, head_dim], k [n, kv_heads, head_dim], v [n, kv_heads, value_dim],
//   y [n, heads, value_dim].
// Query head h reads kv head h / group() (GQA: state lives per kv head).
struct AttnShape {
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;   // dk (for sliced mechanisms with projection "none": 1, the score itself)
  int value_dim = 0;  // dv
  int group() const { return heads / kv_heads; }
};

// How fixed-size state sums accumulate. kKahan keeps a compensation term beside every running sum
// (twice the floats); chosen from the long-context drift study in docs/benchmarks.md.
enum class Accumulation { kPlain, kKahan };

// A session's state for one layer. `fixed` has StateFloats(layer) elements, owned by the caller
// (a slot in a preallocated pool). `growing` is per-session storage for mechanisms whose state grows
// with t (softmax's KV cache, the exact sliced decoder); null where the mechanism has none.
template <typename T>
struct StateView {
  T* fixed = nullptr;
  std::vector<T>* growing = nullptr;
};

// A fixed matrix a mechanism multiplies a token's q or k by before it touches any state
// (sliced_relu's hidden layers), fp32 [out, in] as PyTorch's Linear stores it, owned by the layer's
// params. A backend may hold a copy in its own precision, as it does the model's projections.
struct TokenMatrix {
  const float* w = nullptr;
  int64_t out = 0, in = 0;
};
// y[rows, out] = x[rows, in] w^T for the mechanism's token matrix i, read from the caller's copy; a
// row's y must be the same bits whatever `rows` (a session's scores may not depend on its batch).
using TokenMatrixProduct = std::function<void(int i, const float* x, int rows, float* y)>;

// KahanAdd (compensated running sums) is in kernels/host_device.h, shared with the CUDA kernels.

// Declares the functions every mechanism provides for its params struct P (see attention.h).
// Needs <nlohmann/json.hpp>, absl/status/status.h and model/checkpoint/safetensors.h included first.
#define STEADY_DECLARE_MECHANISM(P)                                                               \
  absl::Status ParseParams(const nlohmann::json& j, const AttnShape& s, P* p);                    \
  absl::Status LoadTensors(const SafeTensors& st, const std::string& prefix, const AttnShape& s,  \
                           P* p);                                                                 \
  void RandomInitTensors(uint64_t seed, const AttnShape& s, P* p);                                \
  void AppendTensors(const P& p, const std::string& prefix, const AttnShape& s,                   \
                     std::vector<TensorToWrite>* out);                                            \
  nlohmann::json Describe(const P& p);                                                            \
  size_t StateFloats(const LayerAttention& a, const P& p);                                        \
  template <typename T>                                                                           \
  void InitState(const LayerAttention& a, const P& p, StateView<T> st);                           \
  template <typename T>                                                                           \
  void Step(const LayerAttention& a, const P& p, const T* q, const T* k, const T* v,              \
            StateView<T> st, T* y);                                                               \
  template <typename T>                                                                           \
  void Steps(const LayerAttention& a, const P& p, int n, const T* q, const T* k, const T* v,      \
             StateView<T> st, T* y);                                                              \
  template <typename T>                                                                           \
  void Chunked(const LayerAttention& a, const P& p, int n, const T* q, const T* k, const T* v,    \
               StateView<T> st, T* y);                                                            \
  template <typename T>                                                                           \
  void Parallel(const LayerAttention& a, const P& p, int n, const T* q, const T* k, const T* v,   \
                T* y);

// fn(g) for every kv head g: on the compute threads where the call's multiply-adds (`work`) are worth
// handing out (a lone session's verify rows; within a step over several sessions, whose attention
// is already spread over the threads, ParallelFor runs nested calls serially). Each kv head's state
// and outputs are its own, so the bits do not depend on the threads.
inline void ForEachKvHead(int kv_heads, int64_t work, const std::function<void(int)>& fn) {
  if (work < cpu::kMinParallelWork) {
    for (int g = 0; g < kv_heads; ++g) fn(g);
  } else {
    cpu::ParallelFor(kv_heads, fn);
  }
}

// n pieces of `len` values gathered from x, piece t at x + t * stride, into `rows` [n, len] (e.g. a
// kv head's keys, or its GQA group's queries, of n tokens); returns rows->data().
template <typename T>
const T* Gather(int n, int len, const T* x, int64_t stride, std::vector<T>* rows) {
  rows->resize(size_t(n) * len);
  for (int t = 0; t < n; ++t) std::copy(x + t * stride, x + t * stride + len, rows->data() + size_t(t) * len);
  return rows->data();
}

// Explicit instantiations of a mechanism's templates for float and double (in its .cc).
#define STEADY_INSTANTIATE_MECHANISM_FOR(P, T)                                                      \
  template void InitState<T>(const LayerAttention&, const P&, StateView<T>);                       \
  template void Step<T>(const LayerAttention&, const P&, const T*, const T*, const T*,             \
                        StateView<T>, T*);                                                         \
  template void Steps<T>(const LayerAttention&, const P&, int, const T*, const T*, const T*,       \
                         StateView<T>, T*);                                                        \
  template void Chunked<T>(const LayerAttention&, const P&, int, const T*, const T*, const T*,     \
                           StateView<T>, T*);                                                      \
  template void Parallel<T>(const LayerAttention&, const P&, int, const T*, const T*, const T*, T*);
#define STEADY_INSTANTIATE_MECHANISM(P)     \
  STEADY_INSTANTIATE_MECHANISM_FOR(P, float) \
  STEADY_INSTANTIATE_MECHANISM_FOR(P, double)

}  // namespace steady

#endif  // STEADY_MODEL_MECHANISMS_COMMON_H_
