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

// The exact part for one query head, from the definition (Parallel, the reference; the other forms
// read their windows through kv_rows.h): over `len` keys (key(j), value(j) in sequence order) returns
// the max logit a and sets den = sum_j e^{s q.k_j - a} and num = sum_j e^{s q.k_j - a} v_j.
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

// y = (e^a den_w y_w + e^b num_l) / (e^a den_w + e^b den_l): the window's output y_w (its sums over
// den_w), its max logit a and sum den_w, and the dark part's sums relative to e^b, the exponents'
// common part taken out in double. b = -inf when there is no dark part (then y = y_w, and num_l and
// den_l are not read). y may be y_w.
template <typename T>
void Combine(int dv, T a, T den_w, const T* y_w, double b, const T* num_l, T den_l, T* y) {
  if (std::isinf(b) && b < 0) {
    if (y != y_w) std::copy(y_w, y_w + dv, y);
    return;
  }
  const double r = std::max(double(a), b);
  const T fw = T(std::exp(double(a) - r)) * den_w, fl = T(std::exp(b - r));
  const T den = fw + fl * den_l;
  for (int d = 0; d < dv; ++d) y[d] = (fw * y_w[d] + fl * num_l[d]) / den;
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

// A GQA group's dark read: its query heads' features phi_q [group, m] and their maxima cq [group], then
// num [group, dv] = factor phi_q^T S and den [group] = factor phi_q . z.
template <typename T>
struct GroupRead {
  std::vector<T> phi_q, cq, num, den;
  void Resize(int group, int m, int dv) {
    phi_q.resize(size_t(group) * m);
    cq.resize(group);
    num.resize(size_t(group) * dv);
    den.resize(group);
  }

  // For kv head g's query heads q [group, head_dim] (adjacent in a row of q) over the head's sums:
  // W and M read once for the group, the sums once (dark.h, feature_state.h); each head's values are
  // the same bits as a read of its own.
  void Read(const WindowDarkParams& p, const AttnShape& s, int g, const T* q, T factor, const FeatureState<T>& sums) {
    DarkQueryFeatures(p.dark, s, g, s.group(), q, phi_q.data(), cq.data());
    std::fill(num.begin(), num.end(), T(0));
    ReadStateGroup(p.dark.features, s.value_dim, s.group(), phi_q.data(), factor, sums, num.data(), den.data());
  }
};

// Query head hq = g * group + i of a token whose window part y (its heads' outputs) top and den hold
// (kv_rows.h's, [heads] each), read against kv head g's sums at reference c: the head's dark read
// (its features' max cq, num_l [dv], den_l) when c is finite (else not read), weighed by the head's
// gate, into y's head hq.
template <typename T>
void CombineHead(const AttnShape& s, const WindowDarkParams& p, int g, int i, T c, T cq, const T* num_l, T den_l,
                 const T* top, const T* den, T* y) {
  const int hq = g * s.group() + i, dv = s.value_dim;
  double log_scale = DarkLogScale(0, c, p.gate[hq]);
  if (!std::isinf(log_scale)) log_scale += double(cq);
  T* yh = y + int64_t(hq) * dv;
  Combine(dv, top[hq], den[hq], yh, log_scale, num_l, den_l, yh);
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

// One token: n = 1 of Steps (below), so the same bits as Steps by construction.
template <typename T>
void Step(const LayerAttention& a, const WindowDarkParams& p, const T* q, const T* k, const T* v,
          StateView<T> st, T* y) {
  Steps(a, p, 1, q, k, v, st, y);
}

// Per chunk of a.chunk_size tokens: the ring's rows (oldest first) then the chunk's, in one buffer.
// Buffer row b evicts row b - W (the ring holds W rows once full, and until then row 0 is the session's
// first token), so the chunk evicts rows [0, carried + len - W). Each token's window part is read over
// its W rows of the buffer as Steps reads them (kv_rows.h). The evicted keys get their features once,
// with the running max of their logits c_run; the token at row b reads the carried sums plus the keys
// evicted up to row b - W, brought to its reference c_run (as dark's Chunked does), all of a kv head's
// reads of the chunk as matrix products (ChunkReads, feature_state.h). After the chunk the sums take
// the evicted keys and the ring the chunk's rows.
template <typename T>
void Chunked(const LayerAttention& a, const WindowDarkParams& p, int n, const T* q, const T* k, const T* v,
             StateView<T> st, T* y) {
  const AttnShape& s = a.shape;
  const int m = p.dark.features, dv = s.value_dim, group = s.group(), dk = s.head_dim;
  const int64_t qrow = int64_t(s.heads) * dk, krow = int64_t(s.kv_heads) * dk, vrow = int64_t(s.kv_heads) * dv,
                yrow = int64_t(s.heads) * dv;
  Ring<T> ring = RingAt(s, p.window, st.fixed);
  const int64_t row = ring.row_floats;
  thread_local std::vector<T> buffer;  // [carried + len, row]
  std::vector<T> phi_k, c_run, top, den, queries, phi_q, cq, c_t, carried_factor, decay, num_l, den_l;
  std::vector<int> seen;
  for (int c0 = 0; c0 < n; c0 += a.chunk_size) {
    const int len = std::min(a.chunk_size, n - c0), rows = len * group;
    const KvRows<T> window = ring.Window();
    const int64_t carried = window.size();
    buffer.resize(size_t(carried + len) * row);
    for (int64_t j = 0; j < carried; ++j) std::copy(window.Row(j, row), window.Row(j, row) + row, buffer.data() + j * row);
    for (int t = 0; t < len; ++t) {
      WriteKvRow(s, k + (c0 + t) * krow, v + (c0 + t) * vrow, buffer.data() + (carried + t) * row);
    }
    top.resize(size_t(len) * s.heads);
    den.resize(size_t(len) * s.heads);
    AttendKvRowsWindowed(s, p.scale, len, q + c0 * qrow, KvRows<T>{buffer.data(), carried}, buffer.data() + carried * row,
                         p.window, y + c0 * yrow, top.data(), den.data());
    const int evicted = int(std::max<int64_t>(0, carried + len - p.window));  // rows [0, evicted)
    const auto at = [&](int64_t b) { return buffer.data() + b * row; };
    phi_k.resize(size_t(evicted) * m);
    c_run.resize(size_t(evicted));
    phi_q.resize(size_t(rows) * m);
    cq.resize(size_t(rows));
    seen.resize(size_t(len));
    c_t.resize(size_t(len));
    carried_factor.resize(size_t(len));
    decay.resize(size_t(len) * evicted);
    num_l.resize(size_t(rows) * dv);
    den_l.resize(size_t(rows));
    for (int g = 0; g < s.kv_heads; ++g) {
      const int64_t off = int64_t(g) * (dk + dv);
      const HeadState<T> h = HeadAt(a, p, st.fixed, g);
      const T c_carried = *h.c;
      T c = c_carried;
      for (int e = 0; e < evicted; ++e) {
        DarkKeyFeatures(p.dark, s, g, at(e) + off, &c, phi_k.data() + size_t(e) * m);
        c_run[e] = c;
      }
      // Token t (buffer row carried + t) sees the evicted rows <= its row - W, at their reference then.
      for (int t = 0; t < len; ++t) {
        seen[t] = int(std::clamp<int64_t>(carried + t - p.window + 1, 0, evicted));
        c_t[t] = seen[t] > 0 ? c_run[seen[t] - 1] : c_carried;
        carried_factor[t] = DarkShiftFactor(c_carried, c_t[t]);
        for (int e = 0; e < seen[t]; ++e) decay[size_t(t) * evicted + e] = std::exp(c_run[e] - c_t[t]);
      }
      if (c_t[len - 1] > -T(INFINITY)) {  // a dark part for some token (c_t is non-decreasing in t)
        // The group's queries of every token (row t * group + i) and their features.
        const T* queries_g = Gather(len, group * dk, q + c0 * qrow + int64_t(g) * group * dk, qrow, &queries);
        DarkQueryFeatures(p.dark, s, g, rows, queries_g, phi_q.data(), cq.data());
        ChunkReads(m, dv, len, group, phi_q.data(), evicted, phi_k.data(), at(0) + off + dk, row, seen.data(),
                   carried_factor.data(), decay.data(), h.sums, num_l.data(), den_l.data());
      }
      for (int t = 0; t < len; ++t) {
        for (int i = 0; i < group; ++i) {
          const int r = t * group + i;
          CombineHead(s, p, g, i, c_t[t], cq[r], num_l.data() + size_t(r) * dv, den_l[r], top.data() + t * s.heads,
                      den.data() + t * s.heads, y + (c0 + t) * yrow);
        }
      }
      if (evicted > 0) {
        const T c_end = c_run[evicted - 1];
        if (c_end > c_carried) ScaleState(m, dv, DarkShiftFactor(c_carried, c_end), h.sums);
        for (int e = 0; e < evicted; ++e) {
          AddKey(m, dv, phi_k.data() + size_t(e) * m, std::exp(c_run[e] - c_end), at(e) + off + dk, h.sums);
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
        // Both parts' sums over their common exponent, written out here rather than through Combine,
        // so that the reference does not share the other forms' arithmetic.
        T* yt = y + (int64_t(t) * s.heads + hq) * dv;
        const double r = std::max(double(top), b);
        const T fw = T(std::exp(double(top) - r)), fl = std::isinf(b) ? T(0) : T(std::exp(b - r));
        for (int d = 0; d < dv; ++d) yt[d] = (fw * num_w[d] + fl * num_l[d]) / (fw * den_w + fl * den_l);
      }
    }
  }
}

// n tokens: token t's row (held + t in the sequence: the ring's rows oldest first, then the new ones)
// enters, and once the ring was full before it, row held + t - W leaves for the dark sums. The rows are
// written aside first and every token's window part read over its W rows through its own (kv_rows.h:
// SIMD in fp32, each row read once for all the queries that see it, on the compute threads). Then each
// kv head (ForEachKvHead: its sums, and its part of every row, are its own) runs the n tokens'
// evictions and group reads in turn, and each query head weighs its window against its dark part.
// The ring takes the new rows last. Per kv head the same operations in the same order whatever n, so
// n tokens are the same bits as n Steps.
template <typename T>
void Steps(const LayerAttention& a, const WindowDarkParams& p, int n, const T* q, const T* k, const T* v,
           StateView<T> st, T* y) {
  const AttnShape& s = a.shape;
  const int m = p.dark.features, dv = s.value_dim, group = s.group();
  Ring<T> ring = RingAt(s, p.window, st.fixed);
  const KvRows<T> cached = ring.Window();
  const int64_t row = ring.row_floats, held = cached.size();
  thread_local std::vector<T> fresh, top, den;  // [n, row], [n, heads], [n, heads]
  fresh.resize(size_t(n) * row);
  top.resize(size_t(n) * s.heads);
  den.resize(size_t(n) * s.heads);
  for (int t = 0; t < n; ++t) {
    WriteKvRow(s, k + int64_t(t) * s.kv_heads * s.head_dim, v + int64_t(t) * s.kv_heads * dv, fresh.data() + t * row);
  }
  AttendKvRowsWindowed(s, p.scale, n, q, cached, fresh.data(), p.window, y, top.data(), den.data());
  // The tasks name this thread's buffers, not their own thread's.
  const T *added = fresh.data(), *tops = top.data(), *dens = den.data();
  const auto row_at = [&](int64_t j) { return j < held ? cached.Row(j, row) : added + (j - held) * row; };
  const int64_t work = int64_t(n) * s.heads * 2 * int64_t(m) * (s.head_dim + dv);
  T* fixed = st.fixed;
  ForEachKvHead(s.kv_heads, work, [&](int g) {
    thread_local std::vector<T> phi;  // a decode step's scratch: no allocation once grown
    thread_local GroupRead<T> r;
    phi.resize(m);
    r.Resize(group, m, dv);
    const HeadState<T> h = HeadAt(a, p, fixed, g);
    for (int t = 0; t < n; ++t) {
      if (held + t >= p.window) EvictHead(a, p, g, row_at(held + t - p.window), fixed, phi.data());
      if (!std::isinf(*h.c)) r.Read(p, s, g, q + (int64_t(t) * s.heads + g * group) * s.head_dim, T(1), h.sums);
      for (int i = 0; i < group; ++i) {
        CombineHead(s, p, g, i, *h.c, r.cq[i], r.num.data() + int64_t(i) * dv, r.den[i], tops + t * s.heads,
                    dens + t * s.heads, y + int64_t(t) * s.heads * dv);
      }
    }
  });
  ring.Append(fresh.data(), n);
}

STEADY_INSTANTIATE_MECHANISM(WindowDarkParams)

}  // namespace steady
