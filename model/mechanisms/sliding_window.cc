#include "model/mechanisms/sliding_window.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "model/mechanisms/attention.h"
#include "model/mechanisms/kv_rows.h"
#include "model/mechanisms/params_util.h"
#include "model/mechanisms/window_ring.h"

namespace steady {

namespace {

template <typename T>
Ring<T> RingOf(const LayerAttention& a, const SlidingWindowParams& p, StateView<T> st) {
  return RingAt(a.shape, p.window, st.fixed);
}

}  // namespace

absl::Status ParseParams(const nlohmann::json& j, const AttnShape& s, SlidingWindowParams* p) {
  *p = SlidingWindowParams{};
  if (!j.contains("window")) {
    return absl::InvalidArgumentError(
        "attention.window: missing (the number of positions each token attends to, itself included, e.g. "
        "\"window\": 4096)");
  }
  if (absl::Status st = GetInt(j, "window", 0, 1, kSlidingWindowMax, &p->window); !st.ok()) return st;
  return ParseScale(j, s, &p->scale);
}

absl::Status LoadTensors(const SafeTensors&, const std::string&, const AttnShape&, SlidingWindowParams*) {
  return absl::OkStatus();
}
void RandomInitTensors(uint64_t, const AttnShape&, SlidingWindowParams*) {}
void AppendTensors(const SlidingWindowParams&, const std::string&, const AttnShape&, std::vector<TensorToWrite>*) {}

nlohmann::json Describe(const SlidingWindowParams& p) { return {{"scale", p.scale}, {"window", p.window}}; }

size_t StateFloats(const LayerAttention& a, const SlidingWindowParams& p) {
  return WindowRingFloats(a.shape, p.window);
}

template <typename T>
void InitState(const LayerAttention& a, const SlidingWindowParams& p, StateView<T> st) {
  STEADY_CHECK(p.window >= 1);
  std::fill(st.fixed, st.fixed + StateFloats(a, p), T(0));
}

template <typename T>
void Step(const LayerAttention& a, const SlidingWindowParams& p, const T* q, const T* k, const T* v,
          StateView<T> st, T* y) {
  Ring<T> ring = RingOf(a, p, st);
  thread_local std::vector<T> row;
  row.resize(ring.row_floats);
  WriteKvRow(a.shape, k, v, row.data());
  ring.Append(row.data(), 1);
  // fp32 in SIMD over the ring's two spans (kernels/cpu/kv_attention.h), fp64 through the plain loop.
  AttendKvRows(a.shape, p.scale, q, ring.Window(), y);
}

// Steps a chunk of a.chunk_size tokens at a time (only a chunk's rows are written aside): each token
// reads its W rows, the ring's then the chunk's, through the windowed kernel (kv_rows.h: each row read
// once for the queries that see it, each query's y the same bits as a read of its window alone, so
// the same bits as Step), and the ring takes the chunk's rows after.
template <typename T>
void Chunked(const LayerAttention& a, const SlidingWindowParams& p, int n, const T* q, const T* k, const T* v,
             StateView<T> st, T* y) {
  const AttnShape& s = a.shape;
  for (int c0 = 0; c0 < n; c0 += a.chunk_size) {
    Steps(a, p, std::min(a.chunk_size, n - c0), q + int64_t(c0) * s.heads * s.head_dim,
          k + int64_t(c0) * s.kv_heads * s.head_dim, v + int64_t(c0) * s.kv_heads * s.value_dim, st,
          y + int64_t(c0) * s.heads * s.value_dim);
  }
}

// The masked quadratic reference, written from the definition: token t, query head h, softmax over
// the keys j with t - W < j <= t of kv head h / group.
template <typename T>
void Parallel(const LayerAttention& a, const SlidingWindowParams& p, int n, const T* q, const T* k, const T* v,
              T* y) {
  const AttnShape& s = a.shape;
  const int dk = s.head_dim, dv = s.value_dim;
  std::vector<T> w;
  for (int t = 0; t < n; ++t) {
    const int j0 = std::max(0, t - p.window + 1);
    w.assign(t - j0 + 1, T(0));
    for (int h = 0; h < s.heads; ++h) {
      const int g = h / s.group();
      const T* qt = q + (int64_t(t) * s.heads + h) * dk;
      T top = T(-INFINITY);
      for (int j = j0; j <= t; ++j) {
        const T* kj = k + (int64_t(j) * s.kv_heads + g) * dk;
        T dot = 0;
        for (int d = 0; d < dk; ++d) dot += qt[d] * kj[d];
        w[j - j0] = T(p.scale) * dot;
        top = std::max(top, w[j - j0]);
      }
      T den = 0;
      for (T& x : w) den += x = std::exp(x - top);
      T* yt = y + (int64_t(t) * s.heads + h) * dv;
      std::fill(yt, yt + dv, T(0));
      for (int j = j0; j <= t; ++j) {
        const T* vj = v + (int64_t(j) * s.kv_heads + g) * dv;
        for (int e = 0; e < dv; ++e) yt[e] += w[j - j0] / den * vj[e];
      }
    }
  }
}

// Step for token t appends its row and attends over the ring's last W rows, its own the newest. The
// rows are written aside first, every query reads its window over the ring's rows then those (each
// cached row read once for all the queries that see it, over the compute threads; kv_rows.h), and the
// ring takes them after: the same rows in the same order as each Step reads, so the same bits.
template <typename T>
void Steps(const LayerAttention& a, const SlidingWindowParams& p, int n, const T* q, const T* k, const T* v,
           StateView<T> st, T* y) {
  const AttnShape& s = a.shape;
  Ring<T> ring = RingOf(a, p, st);
  thread_local std::vector<T> fresh;  // [n, row]
  fresh.resize(size_t(n) * ring.row_floats);
  for (int t = 0; t < n; ++t) {
    WriteKvRow(s, k + int64_t(t) * s.kv_heads * s.head_dim, v + int64_t(t) * s.kv_heads * s.value_dim,
               fresh.data() + t * ring.row_floats);
  }
  AttendKvRowsWindowed(s, p.scale, n, q, ring.Window(), fresh.data(), p.window, y);
  ring.Append(fresh.data(), n);
}

STEADY_INSTANTIATE_MECHANISM(SlidingWindowParams)

}  // namespace steady
