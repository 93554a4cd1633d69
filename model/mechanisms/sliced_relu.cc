#include "model/mechanisms/sliced_relu.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/parallel.h"
#include "model/mechanisms/attention.h"
#include "model/mechanisms/params_util.h"
#include "model/mechanisms/sliced_bins.h"
#include "model/mechanisms/sliced_moments.h"
#include "model/mechanisms/sliced_tree.h"

namespace steady {
namespace {

const char* ProjectionName(SlicedProjection x) {
  switch (x) {
    case SlicedProjection::kMlp: return "mlp";
    case SlicedProjection::kLinear: return "linear";
    case SlicedProjection::kNone: return "none";
  }
  return "?";
}

const char* DecoderName(SlicedDecoder x) { return x == SlicedDecoder::kExact ? "exact" : "bucketed"; }

// Calls fn(name, shape, values, init_stddev) for every projection tensor (names relative to
// "<prefix>sliced."). `Params` is SlicedParams or const SlicedParams. Random init draws weights with
// variance gain / fan_in so that unit-variance inputs give scores of about unit variance (GELU keeps
// ~0.42 of the variance, hence gain 2 after it); biases ~N(0, 0.1^2).
template <typename Params, typename Fn>
void ForEachProjectionTensor(const AttnShape& s, Params& p, Fn fn) {
  auto side = [&](const std::string& who, int groups, auto& w) {
    const int64_t width = int64_t(groups) * s.head_dim;
    const double fan = 1.0 / std::sqrt(double(width));
    if (p.projection == SlicedProjection::kMlp) {
      fn(who + "_fc1.weight", std::vector<int64_t>{width, width}, w.fc1_weight, fan);
      fn(who + "_fc1.bias", std::vector<int64_t>{width}, w.fc1_bias, 0.1);
      fn(who + "_fc2.weight", std::vector<int64_t>{groups, width}, w.out_weight, std::sqrt(2.0) * fan);
      fn(who + "_fc2.bias", std::vector<int64_t>{groups}, w.out_bias, 0.1);
    } else if (p.projection == SlicedProjection::kLinear) {
      fn(who + "_proj.weight", std::vector<int64_t>{groups, width}, w.out_weight, fan);
      fn(who + "_proj.bias", std::vector<int64_t>{groups}, w.out_bias, 0.1);
    }
  };
  side("q", s.heads, p.q);
  side("k", s.kv_heads, p.k);
}

constexpr char kBandwidth[] = "bandwidth";

}  // namespace

absl::Status ParseParams(const nlohmann::json& j, const AttnShape& s, SlicedParams* p) {
  p->projection = p->bump ? SlicedProjection::kLinear : SlicedProjection::kMlp;
  if (j.contains("projection")) {
    const nlohmann::json& v = j.at("projection");
    if (v == "mlp") {
      p->projection = SlicedProjection::kMlp;
    } else if (v == "linear") {
      p->projection = SlicedProjection::kLinear;
    } else if (v == "none") {
      p->projection = SlicedProjection::kNone;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("attention.projection: expected \"mlp\", \"linear\" or \"none\", got ", v.dump()));
    }
  }
  if (p->projection == SlicedProjection::kNone && s.head_dim != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attention.projection: \"none\" takes q and k as the scores and needs head_dim 1, got head_dim ",
        s.head_dim));
  }
  if (j.contains("decoder")) {
    const nlohmann::json& v = j.at("decoder");
    if (v == "exact") {
      p->decoder = SlicedDecoder::kExact;
    } else if (v == "bucketed") {
      p->decoder = SlicedDecoder::kBucketed;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("attention.decoder: expected \"exact\" or \"bucketed\", got ", v.dump()));
    }
  }
  if (absl::Status st = GetInt(j, "bins", 64, 1, 1 << 16, &p->bins); !st.ok()) return st;
  if (absl::Status st = GetDouble(j, "z_min", -4.0, -1e6, 1e6, &p->z_min); !st.ok()) return st;
  if (absl::Status st = GetDouble(j, "z_max", 4.0, -1e6, 1e6, &p->z_max); !st.ok()) return st;
  if (!(p->z_min < p->z_max)) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention.z_max: ", p->z_max, " must exceed attention.z_min (", p->z_min, ")"));
  }
  return absl::OkStatus();
}

absl::Status LoadTensors(const SafeTensors& st, const std::string& prefix, const AttnShape& s,
                         SlicedParams* p) {
  absl::Status status;
  ForEachProjectionTensor(s, *p, [&](const std::string& name, const std::vector<int64_t>& shape,
                                     std::vector<float>& values, double) {
    if (!status.ok()) return;
    auto read = st.ReadFloat(prefix + "sliced." + name, shape);
    if (!read.ok()) {
      status = read.status();
    } else {
      values = *std::move(read);
    }
  });
  if (!status.ok() || !p->bump) return status;
  const std::string name = prefix + "sliced." + kBandwidth;
  auto read = st.ReadFloat(name, {s.heads});
  if (!read.ok()) return read.status();
  for (int h = 0; h < s.heads; ++h) {
    const float b = (*read)[h];
    if (!std::isfinite(b) || b <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          st.display_name(), ": tensor ", name, ": bandwidth of head ", h, " is ", b,
          "; it must be finite and > 0 (the trainer exports softplus(theta) + 1e-4)"));
    }
  }
  p->bandwidth = *std::move(read);
  return absl::OkStatus();
}

void RandomInitTensors(uint64_t seed, const AttnShape& s, SlicedParams* p) {
  std::mt19937_64 rng(seed ^ 0x51d3d5e1u);
  ForEachProjectionTensor(s, *p, [&](const std::string&, const std::vector<int64_t>& shape,
                                     std::vector<float>& values, double stddev) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::normal_distribution<double> dist(0.0, stddev);
    values.resize(n);
    for (float& x : values) x = float(dist(rng));
  });
  if (p->bump) {
    // b = softplus(theta) + 1e-4 with theta ~ N(0, 0.3^2): about 0.7, the trainer's initial value.
    std::normal_distribution<double> theta(0.0, 0.3);
    p->bandwidth.resize(s.heads);
    for (float& b : p->bandwidth) b = float(std::log1p(std::exp(theta(rng))) + 1e-4);
  }
}

void AppendTensors(const SlicedParams& p, const std::string& prefix, const AttnShape& s,
                   std::vector<TensorToWrite>* out) {
  ForEachProjectionTensor(s, p, [&](const std::string& name, const std::vector<int64_t>& shape,
                                    const std::vector<float>& values, double) {
    out->push_back({prefix + "sliced." + name, DType::kF32, shape,
                    std::vector<double>(values.begin(), values.end())});
  });
  if (p.bump) {
    out->push_back({prefix + "sliced." + kBandwidth, DType::kF32, {s.heads},
                    std::vector<double>(p.bandwidth.begin(), p.bandwidth.end())});
  }
}

nlohmann::json Describe(const SlicedParams& p) {
  return {{"projection", ProjectionName(p.projection)},
          {"decoder", DecoderName(p.decoder)},
          {"bins", p.bins},
          {"z_min", p.z_min},
          {"z_max", p.z_max}};
}

namespace {

SlicedTreeLayout TreeLayout(const LayerAttention& a) {
  return {a.shape.kv_heads, a.shape.value_dim, a.accumulation == Accumulation::kKahan};
}

SlicedBinsLayout BinsLayout(const LayerAttention& a, const SlicedParams& p) {
  return {p.bins, p.z_min, p.z_max, a.shape.value_dim, a.accumulation == Accumulation::kKahan};
}

double Gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
// Elements of the hidden layer's GELU a thread takes at least: about 20 microseconds of erf.
constexpr int64_t kGeluGrain = 1024;

// One score per group for each of n tokens from their concatenated heads x [n, groups * head_dim]:
// z [n, groups]. Each weight row is read once for the n tokens; each token's scores are the same bits
// whatever n (kernels/cpu/matmul.h). The fp64 path: fp32 weights times fp64 activations, summed in
// fp64 SIMD lanes.
void ProjectScores(const SlicedProjectionWeights& w, SlicedProjection kind, int groups, int head_dim, int n,
                   const double* x, double* z, const TokenMatrixProduct* product, int /*index*/) {
  STEADY_CHECK(product == nullptr);  // a caller's copies are for the fp32 path
  const int width = groups * head_dim;
  // Broken invariant, not bad input: the layer's tensors were neither loaded nor initialized.
  STEADY_CHECK(kind == SlicedProjection::kNone || int(w.out_bias.size()) == groups);
  if (kind == SlicedProjection::kNone) {  // head_dim == 1 (ParseParams)
    for (int64_t i = 0; i < int64_t(n) * groups; ++i) z[i] = double(x[i]);
    return;
  }
  std::vector<double> hidden;
  const double* in = x;
  if (kind == SlicedProjection::kMlp) {
    hidden.resize(size_t(n) * width);
    cpu::MatVecsF64(w.fc1_weight.data(), width, width, n, x, w.fc1_bias.data(), hidden.data());
    for (double& h : hidden) h = Gelu(h);
    in = hidden.data();
  }
  cpu::MatVecsF64(w.out_weight.data(), groups, width, n, in, w.out_bias.data(), z);
}

// The fp32 path: fp32 products (the small-row kernel, kSmallRowsMax rows at a time, so that a
// token's scores are the same bits whatever n), the hidden layer's through `product` (token matrix
// `index`) when the caller holds its own copy; the biases added in double, the hidden layer's GELU
// taken in double and rounded to fp32.
void ProjectScores(const SlicedProjectionWeights& w, SlicedProjection kind, int groups, int head_dim, int n,
                   const float* x, double* z, const TokenMatrixProduct* product, int index) {
  const int width = groups * head_dim;
  STEADY_CHECK(kind == SlicedProjection::kNone || int(w.out_bias.size()) == groups);
  if (kind == SlicedProjection::kNone) {
    for (int64_t i = 0; i < int64_t(n) * groups; ++i) z[i] = double(x[i]);
    return;
  }
  auto matmul = [&](const float* in, const std::vector<float>& weight, int out, float* y) {
    for (int r = 0; r < n; r += cpu::kSmallRowsMax) {
      const int rows = std::min(cpu::kSmallRowsMax, n - r);
      cpu::MatMulNTSmallRows(in + int64_t(r) * width, rows, width, weight.data(), out, y + int64_t(r) * out);
    }
  };
  std::vector<float> hidden;
  const float* in = x;
  if (kind == SlicedProjection::kMlp) {
    hidden.resize(size_t(n) * width);
    if (product != nullptr) {
      (*product)(index, x, n, hidden.data());
    } else {
      matmul(x, w.fc1_weight, width, hidden.data());
    }
    // Each element on its own (the same bits on any split), a double erf each: on the threads.
    cpu::ParallelRange(int64_t(hidden.size()), kGeluGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) hidden[i] = float(Gelu(double(hidden[i]) + double(w.fc1_bias[i % width])));
    });
    in = hidden.data();
  }
  std::vector<float> out(size_t(n) * groups);
  matmul(in, w.out_weight, groups, out.data());
  for (int64_t i = 0; i < int64_t(out.size()); ++i) z[i] = double(out[i]) + double(w.out_bias[i % groups]);
}

// Scores of n tokens (q [n, heads, head_dim], k [n, kv_heads, head_dim]): zq [n, heads], zk
// [n, kv_heads]. Keys are rounded to T, as the state holds them.
template <typename T>
void TokenScores(const LayerAttention& a, const SlicedParams& p, int n, const T* q, const T* k, double* zq,
                 double* zk, const TokenMatrixProduct* product = nullptr) {
  const AttnShape& s = a.shape;
  ProjectScores(p.q, p.projection, s.heads, s.head_dim, n, q, zq, product, 0);
  ProjectScores(p.k, p.projection, s.kv_heads, s.head_dim, n, k, zk, product, 1);
  for (int64_t i = 0; i < int64_t(n) * s.kv_heads; ++i) zk[i] = double(T(zk[i]));
}

// Outputs of the query heads reading kv head g, y [heads, dv], from the decoder's answers:
// `totals` over the keys so far and moments_at(x, &m) giving the ReLU moments at any point x.
//   sliced_relu: y = (rv - vbar r1) / (2 r1 - (x t - sum z)), since sum |x - z_j| = 2 r1(x) - sum (x - z_j);
//                0 when that denominator is not positive (all keys equal to x: 0/0, numerator exactly 0).
//   bump:        y = (rv(x + b) - 2 rv(x) + rv(x - b)) / (b t).
template <typename T, typename MomentsAt>
void ReadKvHead(const LayerAttention& a, const SlicedParams& p, int g, const SlicedTotals& totals,
                const double* zq, MomentsAt moments_at, T* y) {
  const AttnShape& s = a.shape;
  const int dv = s.value_dim;
  STEADY_CHECK(!p.bump || int(p.bandwidth.size()) == s.heads);
  SlicedReluMoments at, lo, hi;
  for (int h = g * s.group(); h < (g + 1) * s.group(); ++h) {
    const double x = zq[h];
    T* yh = y + int64_t(h) * dv;
    moments_at(x, &at);
    if (p.bump) {
      const double b = p.bandwidth[h];
      moments_at(x - b, &lo);
      moments_at(x + b, &hi);
      for (int d = 0; d < dv; ++d) yh[d] = T((hi.rv[d] - 2 * at.rv[d] + lo.rv[d]) / (b * totals.count));
      continue;
    }
    const double den = 2 * at.r1 - (x * totals.count - totals.sum_z);
    for (int d = 0; d < dv; ++d) {
      const double num = at.rv[d] - totals.sum_v[d] / totals.count * at.r1;
      yh[d] = den > 0 ? T(num / den) : T(0);
    }
  }
}

// The points at which ReadKvHead asks kv head g's moments: each query score of its GQA group, and
// for the bump x - b and x + b too (the bucketed decoder's snapshot is read out at these only).
void ReadoutPoints(const LayerAttention& a, const SlicedParams& p, int g, const double* zq,
                   std::vector<double>* points) {
  STEADY_CHECK(!p.bump || int(p.bandwidth.size()) == a.shape.heads);
  points->clear();
  for (int h = g * a.shape.group(); h < (g + 1) * a.shape.group(); ++h) {
    points->push_back(zq[h]);
    if (p.bump) {
      points->push_back(zq[h] - p.bandwidth[h]);
      points->push_back(zq[h] + p.bandwidth[h]);
    }
  }
}

}  // namespace

size_t StateFloats(const LayerAttention& a, const SlicedParams& p) {
  if (p.decoder == SlicedDecoder::kExact) return a.shape.kv_heads;  // tree roots; nodes grow
  return a.shape.kv_heads * BinsLayout(a, p).HeadFloats();
}

template <typename T>
void InitState(const LayerAttention& a, const SlicedParams& p, StateView<T> st) {
  if (p.decoder == SlicedDecoder::kExact) {
    STEADY_CHECK(st.growing != nullptr);
    std::fill(st.fixed, st.fixed + a.shape.kv_heads, T(0));
    st.growing->clear();
    return;
  }
  const SlicedBinsLayout layout = BinsLayout(a, p);
  for (int g = 0; g < a.shape.kv_heads; ++g) BinsInit(layout, st.fixed + g * layout.HeadFloats());
  if (st.growing) st.growing->clear();
}

std::vector<TokenMatrix> SlicedTokenMatrices(const SlicedParams& p, const AttnShape& s) {
  if (p.projection != SlicedProjection::kMlp) return {};
  const int64_t wq = int64_t(s.heads) * s.head_dim, wk = int64_t(s.kv_heads) * s.head_dim;
  STEADY_CHECK(int64_t(p.q.fc1_weight.size()) == wq * wq && int64_t(p.k.fc1_weight.size()) == wk * wk);
  return {{p.q.fc1_weight.data(), wq, wq}, {p.k.fc1_weight.data(), wk, wk}};
}

template <typename T>
void SlicedTokenScores(const LayerAttention& a, const SlicedParams& p, int n, const T* q, const T* k,
                       double* scores, const TokenMatrixProduct* product) {
  const AttnShape& s = a.shape;
  std::vector<double> zq(size_t(n) * s.heads), zk(size_t(n) * s.kv_heads);
  TokenScores(a, p, n, q, k, zq.data(), zk.data(), product);
  for (int t = 0; t < n; ++t) {
    double* out = scores + int64_t(t) * SlicedScoresPerToken(s);
    std::copy_n(zq.data() + int64_t(t) * s.heads, s.heads, out);
    std::copy_n(zk.data() + int64_t(t) * s.kv_heads, s.kv_heads, out + s.heads);
  }
}

template <typename T>
void Step(const LayerAttention& a, const SlicedParams& p, const T* q, const T* k, const T* v,
          StateView<T> st, T* y) {
  const AttnShape& s = a.shape;
  std::vector<double> scores(SlicedScoresPerToken(s));
  SlicedTokenScores(a, p, 1, q, k, scores.data());
  const double *zq = scores.data(), *zk = scores.data() + s.heads;
  SlicedTotals totals;
  if (p.decoder == SlicedDecoder::kExact) {
    const SlicedTreeLayout layout = TreeLayout(a);
    TreeAppendToken(layout, zk, v, st.fixed, st.growing);
    for (int g = 0; g < s.kv_heads; ++g) {
      TreeTotals(layout, g, st.fixed, *st.growing, &totals);
      ReadKvHead(a, p, g, totals, zq, [&](double x, SlicedReluMoments* m) {
        TreeReluMoments(layout, g, x, st.fixed, *st.growing, m);
      }, y);
    }
    return;
  }
  const SlicedBinsLayout layout = BinsLayout(a, p);
  SlicedBinsSnapshot snap;
  std::vector<double> points;
  for (int g = 0; g < s.kv_heads; ++g) {
    T* head = st.fixed + g * layout.HeadFloats();
    BinsInsert(layout, zk[g], v + g * s.value_dim, head);
    ReadoutPoints(a, p, g, zq, &points);
    BinsSnapshot(layout, head, points.data(), int(points.size()), &snap);
    BinsTotals(layout, snap, &totals);
    ReadKvHead(a, p, g, totals, zq, [&](double x, SlicedReluMoments* m) {
      BinsReluMoments(layout, snap, x, m);
    }, y);
  }
}

// Steps over each chunk of a.chunk_size tokens: Step token by token, the same bits (both decoders cost
// O(log t) or O(bins) per token already, and the bucketed decoder must compute exactly its recurrent
// function), with each projection weight read once a chunk.
template <typename T>
void Chunked(const LayerAttention& a, const SlicedParams& p, int n, const T* q, const T* k, const T* v,
             StateView<T> st, T* y) {
  const AttnShape& s = a.shape;
  for (int t = 0; t < n; t += a.chunk_size) {
    Steps(a, p, std::min(a.chunk_size, n - t), q + int64_t(t) * s.heads * s.head_dim,
          k + int64_t(t) * s.kv_heads * s.head_dim, v + int64_t(t) * s.kv_heads * s.value_dim, st,
          y + int64_t(t) * s.heads * s.value_dim);
  }
}

// The exact causal definitions, O(n^2), in double:
//   sliced_relu: y_t = sum_{j<=t} ReLU(x - z_j)(v_j - vbar_t) / sum_{j<=t} |x - z_j|  (0 when 0/0)
//   bump:        y_t = (1/t) sum_{j<=t} max(0, 1 - |x - z_j| / b_h) v_j
template <typename T>
void Parallel(const LayerAttention& a, const SlicedParams& p, int n, const T* q, const T* k, const T* v,
              T* y) {
  const AttnShape& s = a.shape;
  const int dv = s.value_dim;
  std::vector<double> zq(size_t(n) * s.heads), zk(size_t(n) * s.kv_heads);
  for (int t = 0; t < n; ++t) {  // a token at a time: n may be a long context
    TokenScores(a, p, 1, q + int64_t(t) * s.heads * s.head_dim, k + int64_t(t) * s.kv_heads * s.head_dim,
                zq.data() + int64_t(t) * s.heads, zk.data() + int64_t(t) * s.kv_heads);
  }
  auto value = [&](int j, int g, int d) { return double(v[(int64_t(j) * s.kv_heads + g) * dv + d]); };
  std::vector<double> vsum(int64_t(s.kv_heads) * dv, 0.0), num(dv);
  for (int t = 0; t < n; ++t) {
    for (int g = 0; g < s.kv_heads; ++g) {
      for (int d = 0; d < dv; ++d) vsum[g * dv + d] += value(t, g, d);
    }
    for (int h = 0; h < s.heads; ++h) {
      const int g = h / s.group();
      const double x = zq[int64_t(t) * s.heads + h];
      std::fill(num.begin(), num.end(), 0.0);
      double den = 0;
      for (int j = 0; j <= t; ++j) {
        const double z = zk[int64_t(j) * s.kv_heads + g];
        if (p.bump) {
          const double w = std::max(0.0, 1.0 - std::abs(x - z) / p.bandwidth[h]);
          for (int d = 0; d < dv; ++d) num[d] += w * value(j, g, d);
        } else {
          const double w = std::max(0.0, x - z);
          for (int d = 0; d < dv; ++d) num[d] += w * (value(j, g, d) - vsum[g * dv + d] / (t + 1));
          den += std::abs(x - z);
        }
      }
      T* yt = y + (int64_t(t) * s.heads + h) * dv;
      for (int d = 0; d < dv; ++d) {
        if (p.bump) {
          yt[d] = T(num[d] / (t + 1));
        } else {
          yt[d] = den > 0 ? T(num[d] / den) : T(0);
        }
      }
    }
  }
}

// Step for each token in turn, per kv head: the scores of all n tokens first (they read no state; each
// projection weight is read once for the n), then each kv head's keys enter its own tree or histogram
// and its query heads read it, token by token, one kv head per compute thread (ForEachKvHead): a kv
// head's state and outputs are its own.
// The same operations in the same order per kv head as n Steps, so the same bits.
template <typename T>
void Steps(const LayerAttention& a, const SlicedParams& p, int n, const T* q, const T* k, const T* v,
           StateView<T> st, T* y) {
  std::vector<double> scores(size_t(n) * SlicedScoresPerToken(a.shape));
  SlicedTokenScores(a, p, n, q, k, scores.data());
  SlicedStepsGiven(a, p, n, scores.data(), v, st, y);
}

template <typename T>
void SlicedStepsGiven(const LayerAttention& a, const SlicedParams& p, int n, const double* token_scores,
                      const T* v, StateView<T> st, T* y) {
  const AttnShape& s = a.shape;
  const int dv = s.value_dim, per_token = SlicedScoresPerToken(s);
  const auto value = [&](int t, int g) { return v + (int64_t(t) * s.kv_heads + g) * dv; };
  const auto scores = [&](int t) { return token_scores + int64_t(t) * per_token; };
  const auto key_score = [&](int t, int g) { return token_scores[int64_t(t) * per_token + s.heads + g]; };
  const auto out = [&](int t) { return y + int64_t(t) * s.heads * dv; };
  if (p.decoder == SlicedDecoder::kExact) {
    const SlicedTreeLayout layout = TreeLayout(a);
    const int64_t before = TreeTokens(layout, *st.growing);
    TreeReserveTokens(layout, n, st.growing);
    // About 1.44 log2(t) nodes of O(dv) on each insert and read path.
    const int64_t depth = int64_t(1.44 * std::log2(double(before + n + 2))) + 1;
    ForEachKvHead(s.kv_heads, int64_t(n) * (s.heads + s.kv_heads) * depth * dv * 3, [&](int g) {
      SlicedTotals totals;
      for (int t = 0; t < n; ++t) {
        TreeInsertKey(layout, g, before + t, key_score(t, g), value(t, g), st.fixed, st.growing);
        TreeTotals(layout, g, st.fixed, *st.growing, &totals);
        ReadKvHead(a, p, g, totals, scores(t), [&](double x, SlicedReluMoments* m) {
          TreeReluMoments(layout, g, x, st.fixed, *st.growing, m);
        }, out(t));
      }
    });
    return;
  }
  const SlicedBinsLayout layout = BinsLayout(a, p);
  ForEachKvHead(s.kv_heads, int64_t(n) * s.kv_heads * (p.bins + 3) * (2 * dv + 2) * 2, [&](int g) {
    T* head = st.fixed + g * layout.HeadFloats();
    SlicedBinsSnapshot snap;
    SlicedTotals totals;
    std::vector<double> points;
    for (int t = 0; t < n; ++t) {
      BinsInsert(layout, key_score(t, g), value(t, g), head);
      ReadoutPoints(a, p, g, scores(t), &points);
      BinsSnapshot(layout, head, points.data(), int(points.size()), &snap);
      BinsTotals(layout, snap, &totals);
      ReadKvHead(a, p, g, totals, scores(t), [&](double x, SlicedReluMoments* m) {
        BinsReluMoments(layout, snap, x, m);
      }, out(t));
    }
  });
}

STEADY_INSTANTIATE_MECHANISM(SlicedParams)
template void SlicedTokenScores<float>(const LayerAttention&, const SlicedParams&, int, const float*, const float*,
                                       double*, const TokenMatrixProduct*);
template void SlicedTokenScores<double>(const LayerAttention&, const SlicedParams&, int, const double*,
                                        const double*, double*, const TokenMatrixProduct*);
template void SlicedStepsGiven<float>(const LayerAttention&, const SlicedParams&, int, const double*, const float*,
                                      StateView<float>, float*);
template void SlicedStepsGiven<double>(const LayerAttention&, const SlicedParams&, int, const double*,
                                       const double*, StateView<double>, double*);

}  // namespace steady
