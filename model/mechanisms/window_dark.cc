#include "model/mechanisms/window_dark.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "model/mechanisms/attention.h"
#include "model/mechanisms/feature_state.h"
#include "model/mechanisms/kv_rows.h"
#include "model/mechanisms/params_util.h"
#include "model/mechanisms/window_ring.h"

namespace steady {

namespace {

size_t HeadFloats(const LayerAttention& a, const WindowDarkParams& p) {
  return FeatureStateFloats(p.dark.features, a.shape.value_dim, a.accumulation) + 1;
}

// One kv head's dark state (after the ring): sums relative to exp(c), then c.
template <typename T>
struct HeadState {
  FeatureState<T> sums;
  T* c;
};

template <typename T>
HeadState<T> HeadAt(const LayerAttention& a, const WindowDarkParams& p, T* fixed, int g) {
  T* base = fixed + WindowRingFloats(a.shape, p.window) + g * HeadFloats(a, p);
  return {FeatureStateAt(base, p.dark.features, a.shape.value_dim, a.accumulation), base + HeadFloats(a, p) - 1};
}

// The exact part for one query head: over `len` keys (key(j), value(j) in sequence order) returns the
// max logit a and sets den = sum_j e^{s q.k_j - a} and num = sum_j e^{s q.k_j - a} v_j.
template <typename T, typename Key, typename Value>
T WindowSums(const AttnShape& s, double scale, const T* q, int64_t len, Key key, Value value, T* num, T* den) {
  thread_local std::vector<T> logits;
  logits.resize(size_t(len));
  T top = -T(INFINITY);
  for (int64_t j = 0; j < len; ++j) {
    const T* kj = key(j);
    T dot = 0;
    for (int d = 0; d < s.head_dim; ++d) dot += q[d] * kj[d];
    logits[j] = T(scale) * dot;
    top = std::max(top, logits[j]);
  }
  std::fill(num, num + s.value_dim, T(0));
  *den = 0;
  for (int64_t j = 0; j < len; ++j) {
    const T w = std::exp(logits[j] - top);
    const T* vj = value(j);
    for (int d = 0; d < s.value_dim; ++d) num[d] += w * vj[d];
    *den += w;
  }
  return top;
}

// y = (e^a num_w + e^b num_l) / (e^a den_w + e^b den_l), the exponents' common part taken out in
// double; b = -inf when there is no dark part (then num_l and den_l are not read).
template <typename T>
void Combine(int dv, T a, const T* num_w, T den_w, double b, const T* num_l, T den_l, T* y) {
  if (std::isinf(b) && b < 0) {
    for (int d = 0; d < dv; ++d) y[d] = num_w[d] / den_w;
    return;
  }
  const double r = std::max(double(a), b);
  const T fw = T(std::exp(double(a) - r)), fl = T(std::exp(b - r));
  const T den = fw * den_w + fl * den_l;
  for (int d = 0; d < dv; ++d) y[d] = (fw * num_w[d] + fl * num_l[d]) / den;
}

// log(gate) + the query's and the keys' references: the dark part's canonical log-scale; -inf when it
// is empty (c = -inf) or gated off.
double DarkLogScale(double cq, double c, float gate) {
  if (std::isinf(c) || !(gate > 0)) return -INFINITY;
  return cq + c + std::log(double(gate));
}

// Moves the evicted token's keys and values of kv head g (in its row, the keys then values of every kv
// head) into the head's dark sums; phi [features] is scratch.
template <typename T>
void EvictHead(const LayerAttention& a, const WindowDarkParams& p, int g, const T* row, T* fixed, T* phi) {
  const AttnShape& s = a.shape;
  const int m = p.dark.features, dv = s.value_dim;
  const T* key = row + int64_t(g) * (s.head_dim + dv);
  const HeadState<T> h = HeadAt(a, p, fixed, g);
  const T c_old = *h.c;
  DarkKeyFeatures(p.dark, s, g, key, h.c, phi);
  if (*h.c > c_old) ScaleState(m, dv, DarkShiftFactor(c_old, *h.c), h.sums);
  AddKey(m, dv, phi, T(1), key + s.head_dim, h.sums);
}

// Scratch of one query head's read.
template <typename T>
struct ReadBuffers {
  std::vector<T> phi_q, num_w, num_l;
  ReadBuffers(int m, int dv) : phi_q(m), num_w(dv), num_l(dv) {}
};

// y [dv] of query head hq (q [head_dim]) after its token entered the ring: exactly over the `len`
// rows the window holds (row(j), j in sequence order) and through its features over kv head g's dark
// sums.
template <typename T, typename RowAt>
void ReadQueryHead(const LayerAttention& a, const WindowDarkParams& p, int hq, const T* q, int64_t len,
                   const RowAt& row, T* fixed, ReadBuffers<T>* b, T* y) {
  const AttnShape& s = a.shape;
  const int m = p.dark.features, dv = s.value_dim, g = hq / s.group();
  const int64_t at = int64_t(g) * (s.head_dim + dv);
  T den_w = 0;
  const T top = WindowSums(
      s, p.scale, q, len, [&](int64_t j) { return row(j) + at; }, [&](int64_t j) { return row(j) + at + s.head_dim; },
      b->num_w.data(), &den_w);
  const HeadState<T> h = HeadAt(a, p, fixed, g);
  double log_scale = DarkLogScale(0, *h.c, p.gate[hq]);
  T den_l = 0;
  if (!std::isinf(log_scale)) {
    const T cq = DarkQueryFeatures(p.dark, s, g, q, b->phi_q.data());
    std::fill(b->num_l.begin(), b->num_l.end(), T(0));
    den_l = ReadState(m, dv, b->phi_q.data(), T(1), h.sums, b->num_l.data());
    log_scale += double(cq);
  }
  Combine(dv, top, b->num_w.data(), den_w, log_scale, b->num_l.data(), den_l, y);
}

}  // namespace

absl::Status ParseParams(const nlohmann::json& j, const AttnShape& s, WindowDarkParams* p) {
  *p = WindowDarkParams{};
  if (!j.contains("window")) {
    return absl::InvalidArgumentError(
        "attention.window: missing (the number of recent positions attended exactly, itself included, e.g. "
        "\"window\": 64)");
  }
  if (absl::Status st = GetInt(j, "window", 0, 1, kSlidingWindowMax, &p->window); !st.ok()) return st;
  if (absl::Status st = ParseScale(j, s, &p->scale); !st.ok()) return st;
  if (absl::Status st = GetInt(j, "features", 64, 1, 1 << 16, &p->dark.features); !st.ok()) return st;
  if (absl::Status st = GetInt(j, "rank", s.head_dim, 1, s.head_dim, &p->dark.rank); !st.ok()) return st;
  p->dark.scale = p->scale;
  return absl::OkStatus();
}

absl::Status LoadTensors(const SafeTensors& st, const std::string& prefix, const AttnShape& s,
                         WindowDarkParams* p) {
  if (absl::Status e = LoadTensors(st, prefix, s, &p->dark); !e.ok()) return e;
  const std::string name = prefix + "dark.gate";
  if (absl::Status e = ReadTensor(st, name, {s.heads}, &p->gate); !e.ok()) return e;
  for (size_t h = 0; h < p->gate.size(); ++h) {
    if (!std::isfinite(p->gate[h]) || p->gate[h] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(name, "[", h, "] = ", p->gate[h],
                                                     ": a gate must be finite and >= 0"));
    }
  }
  return absl::OkStatus();
}

void RandomInitTensors(uint64_t seed, const AttnShape& s, WindowDarkParams* p) {
  RandomInitTensors(seed, s, &p->dark);
  p->gate.assign(size_t(s.heads), 1.0f);  // both parts then estimate the same kernel
}

void AppendTensors(const WindowDarkParams& p, const std::string& prefix, const AttnShape& s,
                   std::vector<TensorToWrite>* out) {
  AppendTensors(p.dark, prefix, s, out);
  out->push_back({prefix + "dark.gate", DType::kF32, {s.heads}, std::vector<double>(p.gate.begin(), p.gate.end())});
}

nlohmann::json Describe(const WindowDarkParams& p) {
  return {{"scale", p.scale}, {"window", p.window}, {"features", p.dark.features}, {"rank", p.dark.rank}};
}

size_t StateFloats(const LayerAttention& a, const WindowDarkParams& p) {
  return WindowRingFloats(a.shape, p.window) + size_t(a.shape.kv_heads) * HeadFloats(a, p);
}

template <typename T>
void InitState(const LayerAttention& a, const WindowDarkParams& p, StateView<T> st) {
  STEADY_CHECK(p.window >= 1 && int(p.gate.size()) == a.shape.heads);
  std::fill(st.fixed, st.fixed + StateFloats(a, p), T(0));
  for (int g = 0; g < a.shape.kv_heads; ++g) *HeadAt(a, p, st.fixed, g).c = -T(INFINITY);
}

// One token: the oldest row leaves the full ring for the dark sums, the token enters the ring, then
// each query head reads the ring exactly and the sums through its features.
template <typename T>
void Step(const LayerAttention& a, const WindowDarkParams& p, const T* q, const T* k, const T* v,
          StateView<T> st, T* y) {
  const AttnShape& s = a.shape;
  Ring<T> ring = RingAt(s, p.window, st.fixed);
  thread_local std::vector<T> row, phi;
  row.resize(size_t(ring.row_floats));
  phi.resize(size_t(p.dark.features));
  if (ring.Full()) {
    for (int g = 0; g < s.kv_heads; ++g) EvictHead(a, p, g, ring.Oldest(), st.fixed, phi.data());
  }
  WriteKvRow(s, k, v, row.data());
  ring.Append(row.data(), 1);
  const KvRows<T> window = ring.Window();
  ReadBuffers<T> buffers(p.dark.features, s.value_dim);
  for (int hq = 0; hq < s.heads; ++hq) {
    ReadQueryHead(
        a, p, hq, q + hq * s.head_dim, window.size(), [&](int64_t j) { return window.Row(j, ring.row_floats); },
        st.fixed, &buffers, y + hq * s.value_dim);
  }
}

// Per chunk of a.chunk_size tokens: the ring's rows (oldest first) then the chunk's, in one buffer.
// Buffer row b evicts row b - W (the ring holds W rows once full, and until then row 0 is the session's
// first token), so the chunk evicts rows [0, carried + len - W). Those keys get their features once,
// with the running max of their logits c_run; the token at row b attends exactly to rows
// (b - W, b] and reads the carried sums plus the keys evicted up to row b - W, brought to its
// reference c_run (as dark's Chunked does). After the chunk the sums take the evicted keys and the
// ring the chunk's rows.
template <typename T>
void Chunked(const LayerAttention& a, const WindowDarkParams& p, int n, const T* q, const T* k, const T* v,
             StateView<T> st, T* y) {
  const AttnShape& s = a.shape;
  const int m = p.dark.features, dv = s.value_dim;
  const int64_t qrow = int64_t(s.heads) * s.head_dim, krow = int64_t(s.kv_heads) * s.head_dim,
                vrow = int64_t(s.kv_heads) * dv, yrow = int64_t(s.heads) * dv;
  Ring<T> ring = RingAt(s, p.window, st.fixed);
  const int64_t row = ring.row_floats;
  thread_local std::vector<T> buffer;  // [carried + len, row]
  std::vector<T> phi_q(m), phi_k, c_run, num_w(dv), num_l(dv);
  for (int c0 = 0; c0 < n; c0 += a.chunk_size) {
    const int len = std::min(a.chunk_size, n - c0);
    const KvRows<T> window = ring.Window();
    const int64_t carried = window.size();
    buffer.resize(size_t(carried + len) * row);
    for (int64_t j = 0; j < carried; ++j) std::copy(window.Row(j, row), window.Row(j, row) + row, buffer.data() + j * row);
    for (int t = 0; t < len; ++t) {
      WriteKvRow(s, k + (c0 + t) * krow, v + (c0 + t) * vrow, buffer.data() + (carried + t) * row);
    }
    const int64_t evicted = std::max<int64_t>(0, carried + len - p.window);  // rows [0, evicted)
    const auto at = [&](int64_t b) { return buffer.data() + b * row; };
    phi_k.resize(size_t(evicted) * m);
    c_run.resize(size_t(evicted));
    for (int g = 0; g < s.kv_heads; ++g) {
      const int64_t off = int64_t(g) * (s.head_dim + dv);
      const HeadState<T> h = HeadAt(a, p, st.fixed, g);
      const T c_carried = *h.c;
      T c = c_carried;
      for (int64_t e = 0; e < evicted; ++e) {
        DarkKeyFeatures(p.dark, s, g, at(e) + off, &c, phi_k.data() + e * m);
        c_run[e] = c;
      }
      for (int t = 0; t < len; ++t) {
        const int64_t b = carried + t, first = std::max<int64_t>(0, b - p.window + 1);
        const int64_t seen = std::clamp<int64_t>(b - p.window + 1, 0, evicted);  // evicted rows <= b - W
        const T c_t = seen > 0 ? c_run[seen - 1] : c_carried;
        for (int hq = g * s.group(); hq < (g + 1) * s.group(); ++hq) {
          const T* qh = q + (c0 + t) * qrow + hq * s.head_dim;
          T den_w = 0;
          const T top = WindowSums(
              s, p.scale, qh, b - first + 1, [&](int64_t j) { return at(first + j) + off; },
              [&](int64_t j) { return at(first + j) + off + s.head_dim; }, num_w.data(), &den_w);
          double log_scale = DarkLogScale(0, c_t, p.gate[hq]);
          T den_l = 0;
          if (!std::isinf(log_scale)) {
            const T cq = DarkQueryFeatures(p.dark, s, g, qh, phi_q.data());
            std::fill(num_l.begin(), num_l.end(), T(0));
            den_l = ReadState(m, dv, phi_q.data(), DarkShiftFactor(c_carried, c_t), h.sums, num_l.data());
            for (int64_t e = 0; e < seen; ++e) {
              const T w = std::exp(c_run[e] - c_t) * Dot(m, phi_q.data(), phi_k.data() + e * m);
              const T* ve = at(e) + off + s.head_dim;
              for (int d = 0; d < dv; ++d) num_l[d] += w * ve[d];
              den_l += w;
            }
            log_scale += double(cq);
          }
          Combine(dv, top, num_w.data(), den_w, log_scale, num_l.data(), den_l, y + (c0 + t) * yrow + hq * dv);
        }
      }
      if (evicted > 0) {
        const T c_end = c_run[evicted - 1];
        if (c_end > c_carried) ScaleState(m, dv, DarkShiftFactor(c_carried, c_end), h.sums);
        for (int64_t e = 0; e < evicted; ++e) {
          AddKey(m, dv, phi_k.data() + e * m, std::exp(c_run[e] - c_end), at(e) + off + s.head_dim, h.sums);
        }
        *h.c = c_end;
      }
    }
    ring.Append(buffer.data() + carried * row, len);
  }
}

// The masked quadratic reference, from the definition: token t, query head h, the keys t - W < j <= t
// exactly and j <= t - W through the features (key j's relative to the running max c_j of the key
// logits through j, brought to t - W's by exp(c_j - c_{t-W}) <= 1).
template <typename T>
void Parallel(const LayerAttention& a, const WindowDarkParams& p, int n, const T* q, const T* k, const T* v,
              T* y) {
  const AttnShape& s = a.shape;
  const int m = p.dark.features, dk = s.head_dim, dv = s.value_dim;
  std::vector<T> phi_q(m), phi_k(size_t(n) * m), c_run(n), num_w(dv), num_l(dv);
  for (int g = 0; g < s.kv_heads; ++g) {
    T c = -T(INFINITY);
    for (int j = 0; j < n; ++j) {
      DarkKeyFeatures(p.dark, s, g, k + (int64_t(j) * s.kv_heads + g) * dk, &c, phi_k.data() + size_t(j) * m);
      c_run[j] = c;
    }
    for (int t = 0; t < n; ++t) {
      const int first = std::max(0, t - p.window + 1), last_linear = t - p.window;  // linear: j <= last_linear
      for (int hq = g * s.group(); hq < (g + 1) * s.group(); ++hq) {
        const T* qh = q + (int64_t(t) * s.heads + hq) * dk;
        T den_w = 0;
        const T top = WindowSums(
            s, p.scale, qh, t - first + 1, [&](int64_t j) { return k + ((first + j) * s.kv_heads + g) * dk; },
            [&](int64_t j) { return v + ((first + j) * s.kv_heads + g) * dv; }, num_w.data(), &den_w);
        double b = last_linear >= 0 ? DarkLogScale(0, c_run[last_linear], p.gate[hq]) : -INFINITY;
        T den_l = 0;
        if (!std::isinf(b)) {
          const T cq = DarkQueryFeatures(p.dark, s, g, qh, phi_q.data());
          std::fill(num_l.begin(), num_l.end(), T(0));
          for (int j = 0; j <= last_linear; ++j) {
            const T w = std::exp(c_run[j] - c_run[last_linear]) * Dot(m, phi_q.data(), phi_k.data() + size_t(j) * m);
            const T* vj = v + (int64_t(j) * s.kv_heads + g) * dv;
            for (int d = 0; d < dv; ++d) num_l[d] += w * vj[d];
            den_l += w;
          }
          b += double(cq);
        }
        Combine(dv, top, num_w.data(), den_w, b, num_l.data(), den_l, y + (int64_t(t) * s.heads + hq) * dv);
      }
    }
  }
}

// Step for each token in turn, per kv head: a kv head's dark sums and outputs are its own, and its part
// of every row too, so each kv head runs the n tokens' evictions and reads in turn on its own (on the
// compute threads, ForEachKvHead), over the ring's rows then the n new ones, written aside; the ring
// takes them after. The same operations in the same order per kv head as n Steps, so the same bits.
template <typename T>
void Steps(const LayerAttention& a, const WindowDarkParams& p, int n, const T* q, const T* k, const T* v,
           StateView<T> st, T* y) {
  const AttnShape& s = a.shape;
  const int m = p.dark.features, dv = s.value_dim;
  Ring<T> ring = RingAt(s, p.window, st.fixed);
  const KvRows<T> cached = ring.Window();
  const int64_t row = ring.row_floats, held = cached.size();
  thread_local std::vector<T> fresh;  // [n, row]
  fresh.resize(size_t(n) * row);
  for (int t = 0; t < n; ++t) {
    WriteKvRow(s, k + int64_t(t) * s.kv_heads * s.head_dim, v + int64_t(t) * s.kv_heads * dv, fresh.data() + t * row);
  }
  // Sequence row j: the ring's rows oldest first, then the new ones. Token t is row held + t; the ring
  // is full before it enters once held + t >= W, and then row held + t - W leaves.
  const T* added = fresh.data();  // the tasks name this thread's buffer, not their own thread's
  const auto row_at = [&](int64_t j) { return j < held ? cached.Row(j, row) : added + (j - held) * row; };
  const int64_t window_rows = std::min<int64_t>(p.window, held + n);
  const int64_t work = int64_t(n) * s.heads * (window_rows * (s.head_dim + dv) + 2 * int64_t(m) * dv);
  T* fixed = st.fixed;
  ForEachKvHead(s.kv_heads, work, [&](int g) {
    std::vector<T> phi(m);
    ReadBuffers<T> buffers(m, dv);
    for (int t = 0; t < n; ++t) {
      const int64_t at = held + t;
      if (at >= p.window) EvictHead(a, p, g, row_at(at - p.window), fixed, phi.data());
      const int64_t first = std::max<int64_t>(0, at - p.window + 1);
      for (int hq = g * s.group(); hq < (g + 1) * s.group(); ++hq) {
        ReadQueryHead(
            a, p, hq, q + (int64_t(t) * s.heads + hq) * s.head_dim, at - first + 1,
            [&](int64_t j) { return row_at(first + j); }, fixed, &buffers, y + (int64_t(t) * s.heads + hq) * dv);
      }
    }
  });
  ring.Append(fresh.data(), n);
}

STEADY_INSTANTIATE_MECHANISM(WindowDarkParams)

}  // namespace steady
