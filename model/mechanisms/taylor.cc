#include "model/mechanisms/taylor.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/state_update.h"
#include "model/mechanisms/attention.h"
#include "model/mechanisms/params_util.h"

namespace steady {

namespace {

// |denominator| below this is replaced by +-kTinyDenominator (sign kept, +0 -> +): only to avoid
// 0/0. Odd P never gets near it (T_P > 0); even P can reach 0 or go negative for logits below the
// root of T_P, and is then divided as is (docs/mechanisms/taylor.md, "Negative weights").
constexpr double kTinyDenominator = 1e-30;

double GuardDenominator(double den) {
  if (std::abs(den) >= kTinyDenominator) return den;
  return den < 0 ? -kTinyDenominator : kTinyDenominator;
}

// The degree-p monomial table over dk indices (see TaylorMonomials); `lower` is degree p-1's.
TaylorMonomials BuildDegree(int p, int dk, int offset, const TaylorMonomials* lower) {
  TaylorMonomials d;
  d.degree = p;
  d.offset = offset;
  std::vector<int> idx(p, 0);
  int parent = 0;
  double p_factorial = 1;
  for (int i = 2; i <= p; ++i) p_factorial *= i;
  while (true) {
    d.index.insert(d.index.end(), idx.begin(), idx.end());
    // Prefixes of lexicographically ordered tuples are ordered too: the parent only moves forward.
    if (p >= 2) {
      while (!std::equal(idx.begin(), idx.end() - 1, lower->index.begin() + size_t(parent) * (p - 1))) {
        ++parent;
        STEADY_CHECK(parent < lower->rows);
      }
    }
    d.parent.push_back(parent);
    double perms = p_factorial;  // p! / prod (run length)! over the runs of equal indices
    for (int j = 1, run = 1; j <= p; ++j) {
      if (j < p && idx[j] == idx[j - 1]) {
        ++run;
        continue;
      }
      for (int f = 2; f <= run; ++f) perms /= f;
      run = 1;
    }
    d.multiplicity.push_back(perms);
    ++d.rows;
    int j = p - 1;
    while (j >= 0 && idx[j] == dk - 1) --j;
    if (j < 0) break;
    ++idx[j];
    for (int l = j + 1; l < p; ++l) idx[l] = idx[j];
  }
  return d;
}

template <typename T>
T Kernel(int order, T x) {
  T term = 1, sum = 1;
  for (int p = 1; p < order; ++p) {
    term *= x / T(p);
    sum += term;
  }
  return sum;
}

void CheckShape(const LayerAttention& a, const TaylorParams& p) {
  // Tables are built for one head size at ParseParams.
  STEADY_CHECK(p.head_dim == a.shape.head_dim && p.features > 0 && int(p.degrees.size()) == p.order);
}

// One kv head's rows of the fixed state (layout in taylor.h); comp is null with kPlain.
template <typename T>
struct HeadState {
  T* sums;
  T* comp;
};

template <typename T>
HeadState<T> StateOfHead(const LayerAttention& a, const TaylorParams& p, StateView<T> st, int g) {
  const size_t head = size_t(p.features) * (a.shape.value_dim + 1);
  T* comp = a.accumulation == Accumulation::kKahan ? st.fixed + a.shape.kv_heads * head + g * head : nullptr;
  return {st.fixed + g * head, comp};
}

// alpha_p Phi_p(k): what a key adds to z (and, times v, to H).
template <typename T>
void KeyFeatures(const TaylorParams& p, const T* k, T* fk) {
  TaylorFeatures(p, k, fk);
  for (const TaylorMonomials& d : p.degrees) {
    const T alpha = T(p.alpha[d.degree]);
    for (int r = 0; r < d.rows; ++r) fk[d.offset + r] *= alpha;
  }
}

// g_p = C_p (.) Phi_p(q): the query's readout weights.
template <typename T>
void QueryFeatures(const TaylorParams& p, const T* q, T* gq) {
  TaylorFeatures(p, q, gq);
  for (const TaylorMonomials& d : p.degrees) {
    for (int r = 0; r < d.rows; ++r) gq[d.offset + r] *= T(d.multiplicity[r]);
  }
}

// Row r's part of a key's update: H[r] += f v, z[r] += f.
template <typename T>
void AddToRow(int r, int dv, T f, const T* v, HeadState<T> hs) {
  const int width = dv + 1;
  T* row = hs.sums + size_t(r) * width;
  if (hs.comp != nullptr) {
    T* comp = hs.comp + size_t(r) * width;
    cpu::KahanAxpy(f, v, row, comp, dv);  // SIMD for fp32, bit for bit its scalar reference
    KahanAdd(row[dv], comp[dv], f);
  } else {
    cpu::Axpy(f, v, row, dv);
    row[dv] += f;
  }
}

// H += fk v^T, z += fk.
template <typename T>
void AddKey(const TaylorParams& p, int dv, const T* fk, const T* v, HeadState<T> hs) {
  for (int r = 0; r < p.features; ++r) AddToRow(r, dv, fk[r], v, hs);
}

// Row r's part of ReadState: acc [group, dv + 1] += g_i[r] (H[r] | z[r]) for the group's queries.
template <typename T>
void ReadRow(const TaylorParams& p, int r, int dv, int group, const T* gq, HeadState<T> hs, double* acc) {
  const size_t at = size_t(r) * (dv + 1);
  // SIMD for fp32, bit for bit its scalar reference (kernels/cpu/state_update.h)
  cpu::ReadRowGroup(gq + r, p.features, group, hs.sums + at, hs.comp != nullptr ? hs.comp + at : nullptr, acc,
                    dv + 1);
}

// For `group` query heads with weights gq [group, features]: acc [group, dv + 1] = (H^T g | z . g),
// each head's numerator then its denominator, reading each state row once. Sums over rows in double.
template <typename T>
void ReadState(const TaylorParams& p, int dv, int group, const T* gq, HeadState<T> hs, double* acc) {
  std::fill(acc, acc + size_t(group) * (dv + 1), 0.0);
  for (int r = 0; r < p.features; ++r) ReadRow(p, r, dv, group, gq, hs, acc);
}

// acc [group, dv + 1] (numerators | denominators) to the group's outputs y [group, dv].
template <typename T>
void Finish(int dv, int group, const double* acc, T* y) {
  for (int i = 0; i < group; ++i) {
    const double* num = acc + size_t(i) * (dv + 1);
    const double d = GuardDenominator(num[dv]);
    for (int e = 0; e < dv; ++e) y[i * dv + e] = T(num[e] / d);
  }
}

}  // namespace

double TaylorKernel(int order, double x) { return Kernel<double>(order, x); }

template <typename T>
void TaylorFeatures(const TaylorParams& p, const T* x, T* phi) {
  phi[0] = T(1);
  for (int deg = 1; deg < p.order; ++deg) {
    const TaylorMonomials& d = p.degrees[deg];
    const T* lower = phi + p.degrees[deg - 1].offset;
    T* out = phi + d.offset;
    for (int r = 0; r < d.rows; ++r) out[r] = lower[d.parent[r]] * x[d.index[size_t(r) * deg + deg - 1]];
  }
}
template void TaylorFeatures<float>(const TaylorParams&, const float*, float*);
template void TaylorFeatures<double>(const TaylorParams&, const double*, double*);

absl::Status ParseParams(const nlohmann::json& j, const AttnShape& s, TaylorParams* p) {
  *p = TaylorParams{};
  if (absl::Status st = GetInt(j, "order", 4, 1, 8, &p->order); !st.ok()) return st;
  if (absl::Status st = ParseScale(j, s, &p->scale); !st.ok()) return st;
  if (s.head_dim < 1) return absl::InvalidArgumentError("head_dim must be positive");
  // m_p = C(dk+p-1, p) = m_{p-1} (dk+p-1) / p, exact in integers; stop before anything overflows.
  int64_t rows = 1, total = 1;
  for (int deg = 1; deg < p->order && total <= kTaylorMaxFeatures; ++deg) {
    rows = rows * (s.head_dim + deg - 1) / deg;
    total += rows;
  }
  if (total > kTaylorMaxFeatures) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attention.order: ", p->order, " terms with head_dim ", s.head_dim, " need more than ",
        kTaylorMaxFeatures, " feature rows per kv head; lower the order or use smaller heads"));
  }
  p->head_dim = s.head_dim;
  int offset = 0;
  for (int deg = 0; deg < p->order; ++deg) {
    p->degrees.push_back(BuildDegree(deg, s.head_dim, offset, deg > 0 ? &p->degrees.back() : nullptr));
    offset += p->degrees.back().rows;
    double factorial = 1;
    for (int f = 2; f <= deg; ++f) factorial *= f;
    p->alpha.push_back(std::pow(p->scale, deg) / factorial);
  }
  p->features = offset;
  STEADY_CHECK(p->features == total);
  return absl::OkStatus();
}

absl::Status LoadTensors(const SafeTensors&, const std::string&, const AttnShape&, TaylorParams*) {
  return absl::OkStatus();
}
void RandomInitTensors(uint64_t, const AttnShape&, TaylorParams*) {}
void AppendTensors(const TaylorParams&, const std::string&, const AttnShape&, std::vector<TensorToWrite>*) {}

nlohmann::json Describe(const TaylorParams& p) { return {{"order", p.order}, {"scale", p.scale}}; }

size_t StateFloats(const LayerAttention& a, const TaylorParams& p) {
  const size_t sums = size_t(a.shape.kv_heads) * p.features * (a.shape.value_dim + 1);
  return a.accumulation == Accumulation::kKahan ? 2 * sums : sums;
}

template <typename T>
void InitState(const LayerAttention& a, const TaylorParams& p, StateView<T> st) {
  CheckShape(a, p);
  std::fill(st.fixed, st.fixed + StateFloats(a, p), T(0));
}

template <typename T>
void Step(const LayerAttention& a, const TaylorParams& p, const T* q, const T* k, const T* v,
          StateView<T> st, T* y) {
  CheckShape(a, p);
  const AttnShape& s = a.shape;
  const int group = s.group(), dk = s.head_dim, dv = s.value_dim;
  std::vector<T> fk(p.features), gq(size_t(group) * p.features);
  const int width = dv + 1;
  std::vector<double> acc(size_t(group) * width);  // [group, numerator | denominator]
  for (int g = 0; g < s.kv_heads; ++g) {
    const HeadState<T> hs = StateOfHead(a, p, st, g);
    KeyFeatures(p, k + g * dk, fk.data());
    AddKey(p, dv, fk.data(), v + g * dv, hs);
    for (int i = 0; i < group; ++i) QueryFeatures(p, q + (g * group + i) * dk, gq.data() + size_t(i) * p.features);
    ReadState(p, dv, group, gq.data(), hs, acc.data());
    Finish(dv, group, acc.data(), y + g * group * dv);
  }
}

// Per chunk and kv head: each token's group reads the carried state (every token before the chunk),
// then the exact kernel values inside the chunk, causal, in fp64 as matrix products: the logits
// Q K^T of the group's queries (row t * group + i) and the chunk's keys, their kernel values masked,
// times the values with a column of ones (the normalizer). SIMD in fp64 on the fp32 path
// (cpu::MatMulNNF64), plain loops on the fp64 one. Then the state takes the chunk's keys.
template <typename T>
void Chunked(const LayerAttention& a, const TaylorParams& p, int n, const T* q, const T* k, const T* v,
             StateView<T> st, T* y) {
  CheckShape(a, p);
  const AttnShape& s = a.shape;
  const int group = s.group(), dk = s.head_dim, dv = s.value_dim;
  const int qrow = s.heads * dk, krow = s.kv_heads * dk, vrow = s.kv_heads * dv, yrow = s.heads * dv;
  // y [rows, out] = x [rows, in] w [in, out] (w input-major) in fp64: SIMD on the fp32 path, the plain
  // loop on the fp64 one (the reference).
  const auto product = [](const double* x, int rows, int in, const double* w, int out, double* y) {
    if constexpr (std::is_same_v<T, float>) {
      cpu::MatMulNNF64(x, rows, in, w, out, y);
    } else {
      cpu::MatMulNN(x, rows, in, w, out, y);
    }
  };
  std::vector<T> fk(p.features), gq(size_t(group) * p.features);
  const int width = dv + 1;
  // The chunk's queries [rows, dk], keys transposed [dk, len], values and ones [len, width], kernel
  // values [rows, len] and their sums [rows, width], in fp64.
  std::vector<double> qd, kt, vd, w, intra, acc(size_t(group) * width);
  for (int c0 = 0; c0 < n; c0 += a.chunk_size) {
    const int len = std::min(n, c0 + a.chunk_size) - c0, rows = len * group;
    qd.resize(size_t(rows) * dk);
    kt.resize(size_t(dk) * len);
    vd.resize(size_t(len) * width);
    w.resize(size_t(rows) * len);
    intra.resize(size_t(rows) * width);
    for (int g = 0; g < s.kv_heads; ++g) {
      const HeadState<T> hs = StateOfHead(a, p, st, g);
      for (int t = 0; t < len; ++t) {
        const T* qt = q + int64_t(c0 + t) * qrow + g * group * dk;
        for (int e = 0; e < group * dk; ++e) qd[size_t(t) * group * dk + e] = double(qt[e]);
        const T* kj = k + int64_t(c0 + t) * krow + g * dk;
        for (int d = 0; d < dk; ++d) kt[size_t(d) * len + t] = double(kj[d]);
        const T* vj = v + int64_t(c0 + t) * vrow + g * dv;
        for (int e = 0; e < dv; ++e) vd[size_t(t) * width + e] = double(vj[e]);
        vd[size_t(t) * width + dv] = 1.0;
      }
      product(qd.data(), rows, dk, kt.data(), len, w.data());
      for (int r = 0; r < rows; ++r) {
        double* wr = w.data() + size_t(r) * len;
        for (int j = 0; j < len; ++j) wr[j] = j <= r / group ? Kernel<double>(p.order, p.scale * wr[j]) : 0.0;
      }
      product(w.data(), rows, len, vd.data(), width, intra.data());
      for (int t = 0; t < len; ++t) {
        // Carried state: every token before the chunk; then the chunk's own part.
        for (int i = 0; i < group; ++i) {
          QueryFeatures(p, q + int64_t(c0 + t) * qrow + (g * group + i) * dk, gq.data() + size_t(i) * p.features);
        }
        ReadState(p, dv, group, gq.data(), hs, acc.data());
        const double* own = intra.data() + size_t(t) * group * width;
        for (size_t e = 0; e < acc.size(); ++e) acc[e] += own[e];
        Finish(dv, group, acc.data(), y + int64_t(c0 + t) * yrow + g * group * dv);
      }
      for (int j = 0; j < len; ++j) {
        KeyFeatures(p, k + int64_t(c0 + j) * krow + g * dk, fk.data());
        AddKey(p, dv, fk.data(), v + int64_t(c0 + j) * vrow + g * dv, hs);
      }
    }
  }
}

template <typename T>
void Parallel(const LayerAttention& a, const TaylorParams& p, int n, const T* q, const T* k, const T* v,
              T* y) {
  const AttnShape& s = a.shape;
  const int dk = s.head_dim, dv = s.value_dim;
  std::vector<T> num(dv);
  for (int t = 0; t < n; ++t) {
    for (int h = 0; h < s.heads; ++h) {
      const int g = h / s.group();
      const T* qt = q + (int64_t(t) * s.heads + h) * dk;
      std::fill(num.begin(), num.end(), T(0));
      T den = 0;
      for (int j = 0; j <= t; ++j) {
        const T* kj = k + (int64_t(j) * s.kv_heads + g) * dk;
        const T* vj = v + (int64_t(j) * s.kv_heads + g) * dv;
        T dot = 0;
        for (int d = 0; d < dk; ++d) dot += qt[d] * kj[d];
        const T w = Kernel<T>(p.order, T(p.scale) * dot);
        for (int e = 0; e < dv; ++e) num[e] += w * vj[e];
        den += w;
      }
      const T d = T(GuardDenominator(double(den)));
      for (int e = 0; e < dv; ++e) y[(int64_t(t) * s.heads + h) * dv + e] = num[e] / d;
    }
  }
}

// Step's arithmetic for n tokens, each state row read from memory once for them all: the features
// depend on the token alone, and the update is per row, so row r can take token t's update and
// token t's read of it for t = 0..n-1 before row r + 1 is touched; each token's sums still run over
// the rows in Step's order. The kv heads are independent: they go to the compute threads.
template <typename T>
void Steps(const LayerAttention& a, const TaylorParams& p, int n, const T* q, const T* k, const T* v,
           StateView<T> st, T* y) {
  CheckShape(a, p);
  const AttnShape& s = a.shape;
  const int group = s.group(), dk = s.head_dim, dv = s.value_dim, features = p.features;
  const int64_t q_row = int64_t(s.heads) * dk, k_row = int64_t(s.kv_heads) * dk, v_row = int64_t(s.kv_heads) * dv,
                y_row = int64_t(s.heads) * dv;
  const size_t acc_floats = size_t(group) * (dv + 1);
  ForEachKvHead(s.kv_heads, int64_t(n) * features * (dv + 1) * (group + 1), [&](int g) {
    thread_local std::vector<T> fk, gq;  // [n, features], [n, group, features]
    thread_local std::vector<double> acc;  // [n, group, numerator | denominator]
    fk.resize(size_t(n) * features);
    gq.resize(size_t(n) * group * features);
    acc.assign(size_t(n) * acc_floats, 0.0);
    const HeadState<T> hs = StateOfHead(a, p, st, g);
    for (int t = 0; t < n; ++t) {
      KeyFeatures(p, k + t * k_row + g * dk, fk.data() + size_t(t) * features);
      for (int i = 0; i < group; ++i) {
        QueryFeatures(p, q + t * q_row + (g * group + i) * dk, gq.data() + (size_t(t) * group + i) * features);
      }
    }
    for (int r = 0; r < features; ++r) {
      for (int t = 0; t < n; ++t) {
        AddToRow(r, dv, fk[size_t(t) * features + r], v + t * v_row + g * dv, hs);
        ReadRow(p, r, dv, group, gq.data() + size_t(t) * group * features, hs, acc.data() + t * acc_floats);
      }
    }
    for (int t = 0; t < n; ++t) Finish(dv, group, acc.data() + t * acc_floats, y + t * y_row + g * group * dv);
  });
}

STEADY_INSTANTIATE_MECHANISM(TaylorParams)

}  // namespace steady
