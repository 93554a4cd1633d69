#include "model/mechanisms/dark.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/state_update.h"
#include "model/mechanisms/attention.h"
#include "model/mechanisms/feature_state.h"
#include "model/mechanisms/params_util.h"

namespace steady {

namespace {

// Rows of `block` [r, r] made orthonormal in place (modified Gram-Schmidt). False if a row vanished.
bool Orthonormalize(int r, std::vector<double>* block) {
  for (int i = 0; i < r; ++i) {
    double* row = block->data() + size_t(i) * r;
    for (int j = 0; j < i; ++j) {
      const double* prev = block->data() + size_t(j) * r;
      double dot = 0;
      for (int d = 0; d < r; ++d) dot += row[d] * prev[d];
      for (int d = 0; d < r; ++d) row[d] -= dot * prev[d];
    }
    double norm2 = 0;
    for (int d = 0; d < r; ++d) norm2 += row[d] * row[d];
    if (!(norm2 > 1e-20)) return false;
    const double inv = 1.0 / std::sqrt(norm2);
    for (int d = 0; d < r; ++d) row[d] *= inv;
  }
  return true;
}

// One kv head's state: the feature sums S [m, dv], z [m] stored relative to exp(c) (canonical
// S = exp(c) * S) with their Kahan compensations, then c, the running max of key logits (-inf: empty).
template <typename T>
struct HeadState {
  FeatureState<T> sums;
  T* c;
};

size_t HeadFloats(const LayerAttention& a, const DarkParams& p) {
  return FeatureStateFloats(p.features, a.shape.value_dim, a.accumulation) + 1;
}

template <typename T>
HeadState<T> HeadAt(const LayerAttention& a, const DarkParams& p, T* fixed, int g) {
  T* base = fixed + g * HeadFloats(a, p);
  return {FeatureStateAt(base, p.features, a.shape.value_dim, a.accumulation), base + HeadFloats(a, p) - 1};
}

// y = num / den with the Performer's denominator guard (den += 2 delta where |den| < delta),
// applied to the *canonical* sums. The arguments are shifted: canonical = exp(log_shift) * given,
// log_shift = (query's own max logit) + (key running max c). Multiplying both sums by exp(-log_shift)
// leaves num / den unchanged, so where |den_canonical| >= delta this returns num / den: the guard
// cannot change results there, however large or small the shifts. The test on the canonical value
// is done in logs, log|den| + log_shift < log(delta), so neither exp(log_shift) nor its inverse is
// ever formed (either can overflow). Where the guard acts, with rho = den_canonical / delta < 1:
// y = num_canonical / (den_canonical + 2 delta) = (num / den) * rho / (rho + 2).
template <typename T>
void GuardedRatio(int dv, T den, double log_shift, double delta, T* num_to_y) {
  const double abs_den = std::abs(double(den));
  const double log_den = abs_den > 0 ? std::log(abs_den) + log_shift : -INFINITY;
  if (!(log_den < std::log(delta))) {
    for (int d = 0; d < dv; ++d) num_to_y[d] /= den;
    return;
  }
  if (abs_den == 0) {
    // Every shifted feature product underflowed; the canonical numerator is as negligible.
    std::fill(num_to_y, num_to_y + dv, T(0));
    return;
  }
  const double rho = std::exp(log_den - std::log(delta));
  const T factor = T(rho / (rho + 2));
  for (int d = 0; d < dv; ++d) num_to_y[d] = num_to_y[d] / den * factor;
}

}  // namespace

void DeriveDarkW(const AttnShape& s, DarkParams* p) {
  const int m = p->features, r = p->rank, dk = s.head_dim;
  p->W.assign(size_t(s.kv_heads) * m * dk, 0.0f);
  for (int g = 0; g < s.kv_heads; ++g) {
    const float* G = p->G.data() + size_t(g) * m * r;
    const float* M = p->M.data() + size_t(g) * r * dk;
    float* W = p->W.data() + size_t(g) * m * dk;
    for (int f = 0; f < m; ++f) {
      for (int d = 0; d < dk; ++d) {
        double acc = 0;
        for (int i = 0; i < r; ++i) acc += double(G[size_t(f) * r + i]) * M[size_t(i) * dk + d];
        W[size_t(f) * dk + d] = float(acc);
      }
    }
  }
  const auto transpose = [&](const std::vector<float>& a, int rows, std::vector<float>* t) {
    t->assign(a.size(), 0.0f);
    for (int g = 0; g < s.kv_heads; ++g) {
      for (int i = 0; i < rows; ++i) {
        for (int d = 0; d < dk; ++d) (*t)[(size_t(g) * dk + d) * rows + i] = a[(size_t(g) * rows + i) * dk + d];
      }
    }
  };
  transpose(p->W, m, &p->Wt);
  transpose(p->M, r, &p->Mt);
}

namespace {

// The features of DarkQueryFeatures and DarkKeyFeatures from their logits, in place.
template <typename T>
T QueryFeaturesOfLogits(const DarkParams& p, T* phi) {
  const T top = cpu::MaxOf(phi, p.features);
  cpu::ExpFeatures(phi, p.features, top, T(1) / std::sqrt(T(p.features)));  // SIMD exps for fp32
  return top;
}
template <typename T>
void KeyFeaturesOfLogits(const DarkParams& p, T* c, T* phi) {
  *c = std::max(*c, cpu::MaxOf(phi, p.features));
  cpu::ExpFeatures(phi, p.features, *c, T(1) / std::sqrt(T(p.features)));  // SIMD exps for fp32
}

}  // namespace

template <typename T>
void DarkLogits(const DarkParams& p, const AttnShape& s, int g, int n, const T* x, T* logits) {
  const int m = p.features, r = p.rank, dk = s.head_dim;
  // |M x'|^2 = scale |M x|^2 and w.x' = sqrt(scale) w.x.
  thread_local std::vector<T> mx;
  mx.resize(size_t(n) * r);
  // M x and W x through their transposes (cpu::MatMulNN: SIMD in fp32, a plain loop in fp64).
  cpu::MatMulNN(x, n, dk, p.Mt.data() + size_t(g) * dk * r, r, mx.data());
  cpu::MatMulNN(x, n, dk, p.Wt.data() + size_t(g) * dk * m, m, logits);
  const T root_scale = std::sqrt(T(p.scale));
  for (int t = 0; t < n; ++t) {
    T mx2 = 0;
    for (int i = 0; i < r; ++i) mx2 += mx[size_t(t) * r + i] * mx[size_t(t) * r + i];
    const T half_norm = T(p.scale) * mx2 / 2;
    T* l = logits + size_t(t) * m;
    for (int f = 0; f < m; ++f) l[f] = root_scale * l[f] - half_norm;
  }
}

template <typename T>
T DarkQueryFeatures(const DarkParams& p, const AttnShape& s, int g, const T* q, T* phi) {
  DarkLogits(p, s, g, 1, q, phi);
  return QueryFeaturesOfLogits(p, phi);
}

template <typename T>
void DarkQueryFeatures(const DarkParams& p, const AttnShape& s, int g, int n, const T* q, T* phi, T* top) {
  DarkLogits(p, s, g, n, q, phi);
  for (int i = 0; i < n; ++i) top[i] = QueryFeaturesOfLogits(p, phi + size_t(i) * p.features);
}

template <typename T>
void DarkKeyFeatures(const DarkParams& p, const AttnShape& s, int g, const T* k, T* c, T* phi) {
  DarkLogits(p, s, g, 1, k, phi);
  KeyFeaturesOfLogits(p, c, phi);
}

absl::Status ParseParams(const nlohmann::json& j, const AttnShape& s, DarkParams* p) {
  if (absl::Status st = ParseScale(j, s, &p->scale); !st.ok()) return st;
  if (absl::Status st = GetInt(j, "features", 256, 1, 1 << 16, &p->features); !st.ok()) return st;
  if (absl::Status st = GetInt(j, "rank", s.head_dim, 1, s.head_dim, &p->rank); !st.ok()) return st;
  return GetDouble(j, "delta", 1e-6, 0, 1, &p->delta);
}

absl::Status LoadTensors(const SafeTensors& st, const std::string& prefix, const AttnShape& s,
                         DarkParams* p) {
  if (absl::Status e = ReadTensor(st, prefix + "dark.M", {s.kv_heads, p->rank, s.head_dim}, &p->M); !e.ok()) {
    return e;
  }
  if (absl::Status e = ReadTensor(st, prefix + "dark.G", {s.kv_heads, p->features, p->rank}, &p->G); !e.ok()) {
    return e;
  }
  DeriveDarkW(s, p);
  return absl::OkStatus();
}

void RandomInitTensors(uint64_t seed, const AttnShape& s, DarkParams* p) {
  const int m = p->features, r = p->rank, dk = s.head_dim;
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  // M: the identity (performer) at full rank; a truncated identity plus small noise below it, so
  // the r directions start as the first r coordinates and training can move them.
  p->M.assign(size_t(s.kv_heads) * r * dk, 0.0f);
  for (int g = 0; g < s.kv_heads; ++g) {
    for (int i = 0; i < r; ++i) {
      for (int d = 0; d < dk; ++d) {
        const double noise = r < dk ? 0.01 * normal(rng) : 0.0;
        p->M[(size_t(g) * r + i) * dk + d] = float((i == d ? 1.0 : 0.0) + noise);
      }
    }
  }
  // G: orthogonal r x r blocks with chi_r row norms, so each row is marginally N(0, I_r) but rows
  // within a block are orthogonal (lower estimator variance than i.i.d. rows).
  p->G.assign(size_t(s.kv_heads) * m * r, 0.0f);
  std::vector<double> block(size_t(r) * r);
  for (int g = 0; g < s.kv_heads; ++g) {
    for (int f0 = 0; f0 < m; f0 += r) {
      do {
        for (double& x : block) x = normal(rng);
      } while (!Orthonormalize(r, &block));
      for (int i = 0; i < r && f0 + i < m; ++i) {
        double norm2 = 0;
        for (int d = 0; d < r; ++d) {
          const double x = normal(rng);
          norm2 += x * x;
        }
        const double len = std::sqrt(norm2);
        for (int d = 0; d < r; ++d) {
          p->G[(size_t(g) * m + f0 + i) * r + d] = float(len * block[size_t(i) * r + d]);
        }
      }
    }
  }
  DeriveDarkW(s, p);
}

void AppendTensors(const DarkParams& p, const std::string& prefix, const AttnShape& s,
                   std::vector<TensorToWrite>* out) {
  // W is derived, never stored: a checkpoint cannot hold a W inconsistent with G M.
  out->push_back({prefix + "dark.M", DType::kF32, {s.kv_heads, p.rank, s.head_dim},
                  std::vector<double>(p.M.begin(), p.M.end())});
  out->push_back({prefix + "dark.G", DType::kF32, {s.kv_heads, p.features, p.rank},
                  std::vector<double>(p.G.begin(), p.G.end())});
}

nlohmann::json Describe(const DarkParams& p) {
  return {{"scale", p.scale}, {"features", p.features}, {"rank", p.rank}, {"delta", p.delta}};
}

size_t StateFloats(const LayerAttention& a, const DarkParams& p) {
  return size_t(a.shape.kv_heads) * HeadFloats(a, p);
}

template <typename T>
void InitState(const LayerAttention& a, const DarkParams& p, StateView<T> st) {
  std::fill(st.fixed, st.fixed + StateFloats(a, p), T(0));
  for (int g = 0; g < a.shape.kv_heads; ++g) *HeadAt(a, p, st.fixed, g).c = -T(INFINITY);
}

template <typename T>
void Step(const LayerAttention& a, const DarkParams& p, const T* q, const T* k, const T* v,
          StateView<T> st, T* y) {
  const AttnShape& s = a.shape;
  const int m = p.features, dv = s.value_dim;
  const int group = s.group();
  std::vector<T> phi_k(m), phi_q(size_t(group) * m), cq(group), den(group);
  for (int g = 0; g < s.kv_heads; ++g) {
    const HeadState<T> h = HeadAt(a, p, st.fixed, g);
    const T c_old = *h.c;
    DarkLogits(p, s, g, 1, k + g * s.head_dim, phi_k.data());
    KeyFeaturesOfLogits(p, h.c, phi_k.data());
    if (*h.c > c_old) ScaleState(m, dv, DarkShiftFactor(c_old, *h.c), h.sums);
    AddKey(m, dv, phi_k.data(), T(1), v + g * dv, h.sums);
    // The group's queries are adjacent in q: their logits in one pass over W and M.
    DarkQueryFeatures(p, s, g, group, q + g * group * s.head_dim, phi_q.data(), cq.data());
    T* yg = y + g * group * dv;
    std::fill(yg, yg + group * dv, T(0));
    ReadStateGroup(m, dv, group, phi_q.data(), T(1), h.sums, yg, den.data());  // the state read once per group
    for (int i = 0; i < group; ++i) GuardedRatio(dv, den[i], double(cq[i]) + double(*h.c), p.delta, yg + i * dv);
  }
}

// Per chunk of L tokens and kv head: every key's features (relative to c_j, the running max after
// key j: c_j is non-decreasing) and every query's, each in one pass over W and M; then the chunk's
// reads as matrix products (ChunkReads, feature_state.h): query t sees the carried state and keys
// j <= t, all brought to its reference c_run[t]. Then the state takes the chunk's keys.
template <typename T>
void Chunked(const LayerAttention& a, const DarkParams& p, int n, const T* q, const T* k, const T* v,
             StateView<T> st, T* y) {
  const AttnShape& s = a.shape;
  const int m = p.features, dv = s.value_dim, L = a.chunk_size;
  const int group = s.group(), dk = s.head_dim;
  std::vector<T> phi_q, phi_k(size_t(L) * m), c_run(L), cq, carried(L), decay, num, den, rows;
  for (int c0 = 0; c0 < n; c0 += L) {
    const int len = std::min(L, n - c0);
    phi_q.resize(size_t(len) * group * m);
    cq.resize(size_t(len) * group);
    decay.resize(size_t(len) * len);
    num.resize(size_t(len) * group * dv);
    den.resize(size_t(len) * group);
    for (int g = 0; g < s.kv_heads; ++g) {
      const HeadState<T> h = HeadAt(a, p, st.fixed, g);
      const T c_carried = *h.c;
      T c = c_carried;
      DarkLogits(p, s, g, len, Gather(len, dk, k + (size_t(c0) * s.kv_heads + g) * dk, s.kv_heads * dk, &rows),
                 phi_k.data());
      for (int j = 0; j < len; ++j) {
        KeyFeaturesOfLogits(p, &c, phi_k.data() + size_t(j) * m);
        c_run[j] = c;
      }
      // The group's queries of every token (row t * group + i) and their features.
      DarkQueryFeatures(p, s, g, len * group,
                        Gather(len, group * dk, q + (size_t(c0) * s.heads + g * group) * dk, s.heads * dk, &rows),
                        phi_q.data(), cq.data());
      for (int t = 0; t < len; ++t) {
        carried[t] = DarkShiftFactor(c_carried, c_run[t]);
        for (int j = 0; j <= t; ++j) decay[size_t(t) * len + j] = std::exp(c_run[j] - c_run[t]);
      }
      ChunkReads(m, dv, len, group, phi_q.data(), len, phi_k.data(), v + (size_t(c0) * s.kv_heads + g) * dv,
                 int64_t(s.kv_heads) * dv, nullptr, carried.data(), decay.data(), h.sums, num.data(), den.data());
      for (int t = 0; t < len; ++t) {
        for (int i = 0; i < group; ++i) {
          const int r = t * group + i;
          T* yh = y + (size_t(c0 + t) * s.heads + g * group + i) * dv;
          std::copy(num.data() + size_t(r) * dv, num.data() + size_t(r + 1) * dv, yh);
          GuardedRatio(dv, den[r], double(cq[r]) + double(c_run[t]), p.delta, yh);
        }
      }
      // State update: rescale the carried sums once to the chunk's final max, then add the chunk's
      // keys in token order, each brought from its own reference c_j to c_end.
      const T c_end = c_run[len - 1];
      if (c_end > c_carried) ScaleState(m, dv, DarkShiftFactor(c_carried, c_end), h.sums);
      for (int j = 0; j < len; ++j) {
        AddKey(m, dv, phi_k.data() + size_t(j) * m, std::exp(c_run[j] - c_end),
               v + (size_t(c0 + j) * s.kv_heads + g) * dv, h.sums);
      }
      *h.c = c_end;
    }
  }
}

template <typename T>
void Parallel(const LayerAttention& a, const DarkParams& p, int n, const T* q, const T* k, const T* v,
              T* y) {
  // The same estimator, phi(Q) phi(K)^T causally masked, with exact sums. For stability key j's
  // features are taken relative to c_j (the causal running max of key logits after j) and brought to
  // query t's reference by exp(c_j - c_t) <= 1, so nothing overflows and a late large key does not
  // flush early keys to zero for early queries.
  const AttnShape& s = a.shape;
  const int m = p.features, dv = s.value_dim;
  std::vector<T> phi_q(m), phi_k(size_t(n) * m), c_run(n), rows;
  for (int g = 0; g < s.kv_heads; ++g) {
    T c = -T(INFINITY);
    DarkLogits(p, s, g, n, Gather(n, s.head_dim, k + g * s.head_dim, s.kv_heads * s.head_dim, &rows), phi_k.data());
    for (int j = 0; j < n; ++j) {
      KeyFeaturesOfLogits(p, &c, phi_k.data() + size_t(j) * m);
      c_run[j] = c;
    }
    for (int t = 0; t < n; ++t) {
      for (int hq = g * s.group(); hq < (g + 1) * s.group(); ++hq) {
        const T cq = DarkQueryFeatures(p, s, g, q + (size_t(t) * s.heads + hq) * s.head_dim, phi_q.data());
        T* yh = y + (size_t(t) * s.heads + hq) * dv;
        std::fill(yh, yh + dv, T(0));
        T den = 0;
        for (int j = 0; j <= t; ++j) {
          const T w = std::exp(c_run[j] - c_run[t]) * Dot(m, phi_q.data(), phi_k.data() + size_t(j) * m);
          const T* vj = v + (size_t(j) * s.kv_heads + g) * dv;
          for (int d = 0; d < dv; ++d) yh[d] += w * vj[d];
          den += w;
        }
        GuardedRatio(dv, den, double(cq) + double(c_run[t]), p.delta, yh);
      }
    }
  }
}

template void DarkLogits<float>(const DarkParams&, const AttnShape&, int, int, const float*, float*);
template void DarkLogits<double>(const DarkParams&, const AttnShape&, int, int, const double*, double*);
template float DarkQueryFeatures<float>(const DarkParams&, const AttnShape&, int, const float*, float*);
template double DarkQueryFeatures<double>(const DarkParams&, const AttnShape&, int, const double*, double*);
template void DarkQueryFeatures<float>(const DarkParams&, const AttnShape&, int, int, const float*, float*, float*);
template void DarkQueryFeatures<double>(const DarkParams&, const AttnShape&, int, int, const double*, double*,
                                        double*);
template void DarkKeyFeatures<float>(const DarkParams&, const AttnShape&, int, const float*, float*, float*);
template void DarkKeyFeatures<double>(const DarkParams&, const AttnShape&, int, const double*, double*, double*);

// Step's arithmetic for n tokens, each state row read from memory once for them all
// (AddKeysAndReadInTurn). The one thing in Step that is not per row is c, the running max: it depends
// on the keys alone, so it is run through the n keys first, as Step would, noting after each key the
// factor Step rescales the whole state by (ScaleState, elementwise, so applied to each row just before
// that token's update of it) and the c its read and its output's guard see. The kv heads are
// independent: they go to the compute threads.
template <typename T>
void Steps(const LayerAttention& a, const DarkParams& p, int n, const T* q, const T* k, const T* v,
           StateView<T> st, T* y) {
  const AttnShape& s = a.shape;
  const int m = p.features, dv = s.value_dim, group = s.group();
  const int64_t q_row = int64_t(s.heads) * s.head_dim, k_row = int64_t(s.kv_heads) * s.head_dim,
                v_row = int64_t(s.kv_heads) * dv, y_row = int64_t(s.heads) * dv;
  ForEachKvHead(s.kv_heads, int64_t(n) * m * dv * (group + 1), [&](int g) {
    thread_local std::vector<T> phi_k, phi_q, cq, den;  // [n, m], [n, group, m], [n, group], [n, group]
    thread_local std::vector<T> c_after, rescale;      // [n]: c after token t's key; Step's ScaleState factor (1: none)
    phi_k.resize(size_t(n) * m);
    phi_q.resize(size_t(n) * group * m);
    cq.resize(size_t(n) * group);
    den.resize(size_t(n) * group);
    c_after.resize(n);
    rescale.resize(n);
    thread_local std::vector<T> rows;
    const HeadState<T> h = HeadAt(a, p, st.fixed, g);
    // Every key's logits, then every query's, in one pass each over W and M (c does not enter them).
    DarkLogits(p, s, g, n, Gather(n, s.head_dim, k + g * s.head_dim, k_row, &rows), phi_k.data());
    DarkLogits(p, s, g, n * group, Gather(n, group * s.head_dim, q + g * group * s.head_dim, q_row, &rows), phi_q.data());
    for (int t = 0; t < n; ++t) {
      const T c_old = *h.c;
      KeyFeaturesOfLogits(p, h.c, phi_k.data() + size_t(t) * m);
      rescale[t] = *h.c > c_old ? DarkShiftFactor(c_old, *h.c) : T(1);
      c_after[t] = *h.c;
      for (int i = 0; i < group; ++i) {
        cq[size_t(t) * group + i] = QueryFeaturesOfLogits(p, phi_q.data() + (size_t(t) * group + i) * m);
      }
      std::fill(y + t * y_row + g * group * dv, y + t * y_row + (g + 1) * group * dv, T(0));
    }
    AddKeysAndReadInTurn(m, dv, n, phi_k.data(), v + g * dv, v_row, rescale.data(), group, phi_q.data(), h.sums,
                         y + g * group * dv, y_row, den.data());
    for (int t = 0; t < n; ++t) {
      for (int i = 0; i < group; ++i) {
        GuardedRatio(dv, den[size_t(t) * group + i], double(cq[size_t(t) * group + i]) + double(c_after[t]), p.delta,
                     y + t * y_row + (g * group + i) * dv);
      }
    }
  });
}

STEADY_INSTANTIATE_MECHANISM(DarkParams)

}  // namespace steady
