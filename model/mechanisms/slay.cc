#include "model/mechanisms/slay.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "kernels/cpu/matmul.h"
#include "model/mechanisms/attention.h"
#include "model/mechanisms/feature_state.h"
#include "model/mechanisms/params_util.h"

namespace steady {

namespace {

// L_n(z) and L_{n-1}(z) by the three-term recurrence (j L_j = (2j-1-z) L_{j-1} - (j-1) L_{j-2}).
void Laguerre(int n, double z, double* ln, double* ln_1) {
  double p1 = 1, p2 = 0;
  for (int j = 1; j <= n; ++j) {
    const double p3 = p2;
    p2 = p1;
    p1 = ((2 * j - 1 - z) * p2 - (j - 1) * p3) / j;
  }
  *ln = p1;
  *ln_1 = p2;
}

// Anchor rows renormalized in double (stored float rows drift from unit length by ~1e-7); a zero or
// non-finite row cannot be normalized and is refused.
absl::Status NormalizeAnchors(int rows, int dim, const std::string& name, std::vector<float>* a) {
  for (int p = 0; p < rows; ++p) {
    float* row = a->data() + size_t(p) * dim;
    double norm2 = 0;
    for (int d = 0; d < dim; ++d) norm2 += double(row[d]) * row[d];
    const double norm = std::sqrt(norm2);
    if (!(norm > 0) || !std::isfinite(norm)) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": anchor row ", p, " has norm ", norm,
                                                     " and cannot be normalized"));
    }
    for (int d = 0; d < dim; ++d) row[d] = float(row[d] / norm);
  }
  return absl::OkStatus();
}

// psi of `rows` keys or queries u [rows, head_dim] of kv head g into psi [rows, R * P * M] (each row
// [R, P, M]). Each row's values do not depend on the others: its anchor dot products run in order of
// d (the anchors side by side, so they vectorize as independent sums), its projections by omega are
// cpu::MatMulNN's, whose bits do not depend on the number of rows; several rows share one call a node.
template <typename T>
void FeaturesOfRows(const SlayParams& p, const AttnShape& s, int g, int rows, const T* u, T* psi) {
  const int dk = s.head_dim, P = p.anchors, M = p.features;
  const int64_t m = p.num_features();
  thread_local std::vector<T> inv_norm, poly, proj;  // [rows], [rows, P], [rows, M]
  inv_norm.resize(rows);
  poly.resize(size_t(rows) * P);
  proj.resize(size_t(rows) * M);
  const T inv_sqrt_p = T(1) / std::sqrt(T(P));
  for (int i = 0; i < rows; ++i) {
    const T* ui = u + int64_t(i) * dk;
    T norm2 = 0;
    for (int d = 0; d < dk; ++d) norm2 += ui[d] * ui[d];
    inv_norm[i] = T(1) / std::max(std::sqrt(norm2), T(1e-12));  // u^ = u * inv_norm
    T* dot = poly.data() + size_t(i) * P;
    std::fill(dot, dot + P, T(0));
    for (int d = 0; d < dk; ++d) {
      for (int a = 0; a < P; ++a) dot[a] += T(p.anchor_dirs[size_t(a) * dk + d]) * ui[d];
    }
    for (int a = 0; a < P; ++a) {
      const T x = dot[a] * inv_norm[i];
      dot[a] = x * x * inv_sqrt_p;
    }
  }
  const T inv_sqrt_m = T(1) / std::sqrt(T(M));
  for (int r = 0; r < p.nodes; ++r) {
    // u . omega [head_dim, M] for every row: SIMD in fp32, a plain loop in fp64 (cpu::MatMulNN).
    cpu::MatMulNN(u, rows, dk, p.omega.data() + (size_t(r) * s.kv_heads + g) * dk * M, M, proj.data());
    const T sr = T(p.node_s[r]);
    const T amp = std::sqrt(T(p.node_w[r])) * inv_sqrt_m;
    for (int i = 0; i < rows; ++i) {
      const T gain = std::sqrt(T(2) * sr) * inv_norm[i];
      const T* pr = proj.data() + size_t(i) * M;
      T* block = psi + i * m + size_t(r) * P * M;  // this node's [P, M]
      const T* pa = poly.data() + size_t(i) * P;
      // prf values go to the p = 0 row of the block first and are spread over the P rows from the
      // last row back, so the p = 0 row is overwritten last.
      for (int j = 0; j < M; ++j) block[j] = amp * std::exp(std::clamp(gain * pr[j] - sr, T(-20), T(20)));
      for (int a = P - 1; a >= 0; --a) {
        T* row = block + size_t(a) * M;
        for (int j = 0; j < M; ++j) row[j] = pa[a] * block[j];
      }
    }
  }
}

// psi(u) of one key or query into `psi` [R, P, M].
template <typename T>
void FeaturesInto(const SlayParams& p, const AttnShape& s, int g, const T* u, T* psi) {
  FeaturesOfRows(p, s, g, 1, u, psi);
}

size_t HeadFloats(const LayerAttention& a, const SlayParams& p) {
  return FeatureStateFloats(p.num_features(), a.shape.value_dim, a.accumulation);
}

template <typename T>
FeatureState<T> HeadAt(const LayerAttention& a, const SlayParams& p, T* fixed, int g) {
  return FeatureStateAt(fixed + g * HeadFloats(a, p), p.num_features(), a.shape.value_dim, a.accumulation);
}

}  // namespace

void GaussLaguerre(int n, std::vector<double>* t, std::vector<double>* a) {
  STEADY_CHECK(n >= 1);
  t->assign(n, 0.0);
  a->assign(n, 0.0);
  double z = 0;
  for (int i = 0; i < n; ++i) {
    // Starting points from Numerical Recipes' gaulag (alpha = 0), then Newton on L_n.
    if (i == 0) {
      z = 3.0 / (1.0 + 2.4 * n);
    } else if (i == 1) {
      z += 15.0 / (1.0 + 2.5 * n);
    } else {
      const double ai = i - 1;
      z += (1.0 + 2.55 * ai) / (1.9 * ai) * (z - (*t)[i - 2]);
    }
    double ln = 0, ln_1 = 0;
    for (int iter = 0; iter < 100; ++iter) {
      Laguerre(n, z, &ln, &ln_1);
      const double step = ln / (n * (ln - ln_1) / z);  // L_n' = n (L_n - L_{n-1}) / z
      z -= step;
      if (std::abs(step) <= 1e-15 * z) break;
    }
    Laguerre(n, z, &ln, &ln_1);
    const double deriv = n * (ln - ln_1) / z;
    (*t)[i] = z;
    (*a)[i] = 1.0 / (z * deriv * deriv);  // a_i = 1 / (t_i L_n'(t_i)^2)
  }
}

absl::Status ParseParams(const nlohmann::json& j, const AttnShape& s, SlayParams* p) {
  if (absl::Status st = GetInt(j, "nodes", 2, 1, 8, &p->nodes); !st.ok()) return st;
  if (absl::Status st = GetInt(j, "anchors", 8, 1, 4096, &p->anchors); !st.ok()) return st;
  if (absl::Status st = GetInt(j, "features", 16, 1, 4096, &p->features); !st.ok()) return st;
  if (absl::Status st = GetDouble(j, "eps", 1e-3, 1e-9, 1e3, &p->eps); !st.ok()) return st;
  if (absl::Status st = GetDouble(j, "delta", 1e-6, 0, 1, &p->delta); !st.ok()) return st;
  std::vector<double> t, w;
  GaussLaguerre(p->nodes, &t, &w);
  const double c = 2 + p->eps;
  p->node_s.resize(p->nodes);
  p->node_w.resize(p->nodes);
  for (int r = 0; r < p->nodes; ++r) {
    p->node_s[r] = t[r] / c;
    p->node_w[r] = w[r] / c;
  }
  return absl::OkStatus();
}

absl::Status LoadTensors(const SafeTensors& st, const std::string& prefix, const AttnShape& s,
                         SlayParams* p) {
  const std::string anchors = prefix + "slay.anchors";
  if (absl::Status e = ReadTensor(st, anchors, {p->anchors, s.head_dim}, &p->anchor_dirs); !e.ok()) return e;
  if (absl::Status e = NormalizeAnchors(p->anchors, s.head_dim, anchors, &p->anchor_dirs); !e.ok()) return e;
  return ReadTensor(st, prefix + "slay.omega", {p->nodes, s.kv_heads, s.head_dim, p->features}, &p->omega);
}

void RandomInitTensors(uint64_t seed, const AttnShape& s, SlayParams* p) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  p->anchor_dirs.resize(size_t(p->anchors) * s.head_dim);
  for (float& x : p->anchor_dirs) x = float(normal(rng));
  // A zero row has probability zero; a failure here is a broken generator.
  STEADY_CHECK(NormalizeAnchors(p->anchors, s.head_dim, "slay.anchors", &p->anchor_dirs).ok());
  p->omega.resize(size_t(p->nodes) * s.kv_heads * s.head_dim * p->features);
  for (float& x : p->omega) x = float(normal(rng));
}

void AppendTensors(const SlayParams& p, const std::string& prefix, const AttnShape& s,
                   std::vector<TensorToWrite>* out) {
  out->push_back({prefix + "slay.anchors", DType::kF32, {p.anchors, s.head_dim},
                  std::vector<double>(p.anchor_dirs.begin(), p.anchor_dirs.end())});
  out->push_back({prefix + "slay.omega", DType::kF32, {p.nodes, s.kv_heads, s.head_dim, p.features},
                  std::vector<double>(p.omega.begin(), p.omega.end())});
}

nlohmann::json Describe(const SlayParams& p) {
  return {{"nodes", p.nodes}, {"anchors", p.anchors}, {"features", p.features}, {"eps", p.eps},
          {"delta", p.delta}};
}

size_t StateFloats(const LayerAttention& a, const SlayParams& p) {
  return size_t(a.shape.kv_heads) * HeadFloats(a, p);
}

template <typename T>
void SlayFeatures(const SlayParams& p, const AttnShape& s, int kv_head, const T* u, T* psi) {
  FeaturesInto(p, s, kv_head, u, psi);
}

template <typename T>
void InitState(const LayerAttention& a, const SlayParams& p, StateView<T> st) {
  std::fill(st.fixed, st.fixed + StateFloats(a, p), T(0));
}

template <typename T>
void Step(const LayerAttention& a, const SlayParams& p, const T* q, const T* k, const T* v,
          StateView<T> st, T* y) {
  const AttnShape& s = a.shape;
  const int m = p.num_features(), dv = s.value_dim;
  const int group = s.group();
  std::vector<T> psi_k(m), psi_q(size_t(group) * m), den(group);
  for (int g = 0; g < s.kv_heads; ++g) {
    const FeatureState<T> h = HeadAt(a, p, st.fixed, g);
    FeaturesInto(p, s, g, k + g * s.head_dim, psi_k.data());
    AddKey(m, dv, psi_k.data(), T(1), v + g * dv, h);
    FeaturesOfRows(p, s, g, group, q + g * group * s.head_dim, psi_q.data());  // the group's heads
    T* yg = y + g * group * dv;
    std::fill(yg, yg + group * dv, T(0));
    ReadStateGroup(m, dv, group, psi_q.data(), T(1), h, yg, den.data());  // the state read once per group
    for (int i = 0; i < group; ++i) {
      const T d_i = den[i] + T(p.delta);
      for (int d = 0; d < dv; ++d) yg[i * dv + d] /= d_i;
    }
  }
}

// Per chunk of L tokens and kv head: every key's and query's features, then the chunk's reads as
// matrix products (ChunkReads, feature_state.h): query t sees the carried state and keys j <= t.
template <typename T>
void Chunked(const LayerAttention& a, const SlayParams& p, int n, const T* q, const T* k, const T* v,
             StateView<T> st, T* y) {
  const AttnShape& s = a.shape;
  const int m = p.num_features(), dv = s.value_dim, L = a.chunk_size, group = s.group();
  const int64_t k_row = int64_t(s.kv_heads) * s.head_dim, q_row = int64_t(s.heads) * s.head_dim;
  std::vector<T> psi_q, psi_k(size_t(L) * m), carried(L, T(1)), num, den, rows;
  for (int c0 = 0; c0 < n; c0 += L) {
    const int len = std::min(L, n - c0);
    psi_q.resize(size_t(len) * group * m);
    num.resize(size_t(len) * group * dv);
    den.resize(size_t(len) * group);
    for (int g = 0; g < s.kv_heads; ++g) {
      const FeatureState<T> h = HeadAt(a, p, st.fixed, g);
      FeaturesOfRows(p, s, g, len, Gather(len, s.head_dim, k + c0 * k_row + g * s.head_dim, k_row, &rows), psi_k.data());
      // Row t * group + i: token t, the group's head i.
      FeaturesOfRows(p, s, g, len * group,
                     Gather(len, group * s.head_dim, q + c0 * q_row + g * group * s.head_dim, q_row, &rows), psi_q.data());
      // Outputs: carried state (keys before the chunk) plus the causal intra-chunk part.
      ChunkReads(m, dv, len, group, psi_q.data(), len, psi_k.data(), v + (size_t(c0) * s.kv_heads + g) * dv,
                 int64_t(s.kv_heads) * dv, nullptr, carried.data(), static_cast<const T*>(nullptr), h, num.data(),
                 den.data());
      for (int t = 0; t < len; ++t) {
        for (int i = 0; i < group; ++i) {
          const int r = t * group + i;
          T* yh = y + (size_t(c0 + t) * s.heads + g * group + i) * dv;
          const T d = den[r] + T(p.delta);
          for (int e = 0; e < dv; ++e) yh[e] = num[size_t(r) * dv + e] / d;
        }
      }
      // State update, key by key in token order: the state after a chunk is the one Step leaves.
      for (int j = 0; j < len; ++j) {
        AddKey(m, dv, psi_k.data() + size_t(j) * m, T(1), v + (size_t(c0 + j) * s.kv_heads + g) * dv, h);
      }
    }
  }
}

template <typename T>
void Parallel(const LayerAttention& a, const SlayParams& p, int n, const T* q, const T* k, const T* v,
              T* y) {
  // The same estimator as the recurrence, psi(Q) psi(K)^T causally masked, not the exact kernel.
  const AttnShape& s = a.shape;
  const int m = p.num_features(), dv = s.value_dim;
  const int64_t k_row = int64_t(s.kv_heads) * s.head_dim;
  std::vector<T> psi_q(m), psi_k(size_t(n) * m), rows;
  for (int g = 0; g < s.kv_heads; ++g) {
    FeaturesOfRows(p, s, g, n, Gather(n, s.head_dim, k + g * s.head_dim, k_row, &rows), psi_k.data());
    for (int t = 0; t < n; ++t) {
      for (int hq = g * s.group(); hq < (g + 1) * s.group(); ++hq) {
        FeaturesInto(p, s, g, q + (size_t(t) * s.heads + hq) * s.head_dim, psi_q.data());
        T* yh = y + (size_t(t) * s.heads + hq) * dv;
        std::fill(yh, yh + dv, T(0));
        T den = 0;
        for (int j = 0; j <= t; ++j) {
          const T w = Dot(m, psi_q.data(), psi_k.data() + size_t(j) * m);
          const T* vj = v + (size_t(j) * s.kv_heads + g) * dv;
          for (int d = 0; d < dv; ++d) yh[d] += w * vj[d];
          den += w;
        }
        den += T(p.delta);
        for (int d = 0; d < dv; ++d) yh[d] /= den;
      }
    }
  }
}

template void SlayFeatures<float>(const SlayParams&, const AttnShape&, int, const float*, float*);
template void SlayFeatures<double>(const SlayParams&, const AttnShape&, int, const double*, double*);

// Step's arithmetic for n tokens, each state row read from memory once for them all
// (AddKeysAndReadInTurn): the features are per token and do not depend on the state. The kv heads
// are independent: they go to the compute threads.
template <typename T>
void Steps(const LayerAttention& a, const SlayParams& p, int n, const T* q, const T* k, const T* v,
           StateView<T> st, T* y) {
  const AttnShape& s = a.shape;
  const int m = p.num_features(), dv = s.value_dim, group = s.group();
  const int64_t q_row = int64_t(s.heads) * s.head_dim, k_row = int64_t(s.kv_heads) * s.head_dim,
                v_row = int64_t(s.kv_heads) * dv, y_row = int64_t(s.heads) * dv;
  ForEachKvHead(s.kv_heads, int64_t(n) * m * dv * (group + 1), [&](int g) {
    thread_local std::vector<T> psi_k, psi_q, den, rows;  // [n, m], [n, group, m], [n, group], gathered rows
    psi_k.resize(size_t(n) * m);
    psi_q.resize(size_t(n) * group * m);
    den.resize(size_t(n) * group);
    const FeatureState<T> h = HeadAt(a, p, st.fixed, g);
    // Every key's features, then every query's (row t * group + i: token t, the group's head i).
    FeaturesOfRows(p, s, g, n, Gather(n, s.head_dim, k + g * s.head_dim, k_row, &rows), psi_k.data());
    FeaturesOfRows(p, s, g, n * group, Gather(n, group * s.head_dim, q + g * group * s.head_dim, q_row, &rows),
                   psi_q.data());
    for (int t = 0; t < n; ++t) std::fill(y + t * y_row + g * group * dv, y + t * y_row + (g + 1) * group * dv, T(0));
    AddKeysAndReadInTurn(m, dv, n, psi_k.data(), v + g * dv, v_row, static_cast<const T*>(nullptr), group,
                         psi_q.data(), h, y + g * group * dv, y_row, den.data());
    for (int t = 0; t < n; ++t) {
      T* yg = y + t * y_row + g * group * dv;
      for (int i = 0; i < group; ++i) {
        const T d_i = den[size_t(t) * group + i] + T(p.delta);
        for (int d = 0; d < dv; ++d) yg[i * dv + d] /= d_i;
      }
    }
  });
}

STEADY_INSTANTIATE_MECHANISM(SlayParams)

}  // namespace steady
