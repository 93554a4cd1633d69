// slay beyond the shared conformance suite: the quadrature, the feature map's exact form and its
// expectation, the tensors' load/save contract.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "base/check.h"
#include "model/mechanisms/attention.h"
#include "tests/testutil.h"

namespace steady {
namespace {

absl::StatusOr<LayerAttention> MakeSlay(const nlohmann::json& params, AttnShape shape = {4, 2, 8, 6}) {
  auto a = ParseLayerAttention({"slay", params}, shape);
  if (a.ok()) RandomInitAttentionTensors(testing::TestSeed() ^ 0x51a7, &*a);
  return a;
}

std::vector<double> Normalized(std::vector<double> u) {
  double n2 = 0;
  for (double x : u) n2 += x * x;
  for (double& x : u) x /= std::sqrt(n2);
  return u;
}

// Unit vectors q, k in R^d with q.k = x.
void UnitPair(int d, double x, std::mt19937_64& rng, std::vector<double>* q, std::vector<double>* k) {
  *q = Normalized(testing::RandomNormal<double>(d, rng));
  std::vector<double> r = testing::RandomNormal<double>(d, rng);
  double dot = 0;
  for (int i = 0; i < d; ++i) dot += r[i] * (*q)[i];
  for (int i = 0; i < d; ++i) r[i] -= dot * (*q)[i];
  r = Normalized(r);
  k->resize(d);
  for (int i = 0; i < d; ++i) (*k)[i] = x * (*q)[i] + std::sqrt(1 - x * x) * r[i];
}

double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// sum_p poly_p(q) poly_p(k) = (1/P) sum_p (a_p.q^)^2 (a_p.k^)^2: the anchor factor of psi(q).psi(k).
double AnchorFactor(const SlayParams& p, int d, const std::vector<double>& q, const std::vector<double>& k) {
  const std::vector<double> qn = Normalized(q), kn = Normalized(k);
  double sum = 0;
  for (int a = 0; a < p.anchors; ++a) {
    double dq = 0, dk = 0;
    for (int i = 0; i < d; ++i) {
      dq += p.anchor_dirs[a * d + i] * qn[i];
      dk += p.anchor_dirs[a * d + i] * kn[i];
    }
    sum += dq * dq * dk * dk;
  }
  return sum / p.anchors;
}

TEST(SlayQuadratureTest, NodesAndWeightsMatchMechanismsMd) {
  // MECHANISMS.md, C = 2.001: s_r = t_r / C, w_r = a_r / C.
  struct Expected {
    int nodes;
    std::vector<double> s, w;
  };
  const std::vector<Expected> expected = {
      {2, {0.29274685, 1.70625365}, {0.42656341, 0.07318671}},
      {3, {0.20778339, 1.14656690, 3.14340084}, {0.35536882, 0.13918927, 0.00519203}},
  };
  for (const Expected& e : expected) {
    auto a = ParseLayerAttention({"slay", {{"nodes", e.nodes}}}, {2, 2, 8, 8});
    ASSERT_TRUE(a.ok()) << a.status();
    const SlayParams& p = std::get<SlayParams>(a->params);
    ASSERT_EQ(p.node_s.size(), size_t(e.nodes));
    for (int r = 0; r < e.nodes; ++r) {
      EXPECT_NEAR(p.node_s[r], e.s[r], 1e-6) << "R=" << e.nodes << " r=" << r;
      EXPECT_NEAR(p.node_w[r], e.w[r], 1e-6) << "R=" << e.nodes << " r=" << r;
    }
  }
}

TEST(SlayQuadratureTest, GaussLaguerreIsExactForPolynomialsUpToDegree2nMinus1) {
  // int_0^inf e^{-t} t^k dt = k!
  for (int n = 1; n <= 8; ++n) {
    std::vector<double> t, a;
    GaussLaguerre(n, &t, &a);
    for (int i = 1; i < n; ++i) EXPECT_LT(t[i - 1], t[i]);
    double factorial = 1;
    for (int deg = 0; deg <= 2 * n - 1; ++deg) {
      if (deg > 0) factorial *= deg;
      double sum = 0;
      for (int i = 0; i < n; ++i) sum += a[i] * std::pow(t[i], deg);
      EXPECT_NEAR(sum / factorial, 1.0, 1e-11) << "n=" << n << " degree " << deg;
    }
  }
}

TEST(SlayParamsTest, RangesAreCheckedAndNamed) {
  AttnShape shape{2, 2, 8, 8};
  for (const auto& [key, value] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"nodes", 0}, {"nodes", 9}, {"anchors", 0}, {"features", 0}, {"eps", 0.0}, {"delta", -1.0}}) {
    auto a = ParseLayerAttention({"slay", {{key, value}}}, shape);
    ASSERT_FALSE(a.ok()) << key << "=" << value;
    EXPECT_NE(std::string(a.status().message()).find(key), std::string::npos) << a.status();
  }
  auto d = ParseLayerAttention({"slay", nlohmann::json::object()}, shape);
  ASSERT_TRUE(d.ok());
  const SlayParams& p = std::get<SlayParams>(d->params);
  EXPECT_EQ(p.num_features(), 256);  // m = R P M = 2 * 8 * 16
  EXPECT_EQ(StateFloats(*d), size_t(2) * 256 * (8 + 1) * 2);  // kv heads * m (dv + 1), x2 for Kahan
  auto plain = ParseLayerAttention({"slay", {{"accumulation", "plain"}}}, shape);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(StateFloats(*plain), size_t(2) * 256 * (8 + 1));
}

// psi[r, p, i](u) = poly_p(u) prf_{r,i}(u), written out from MECHANISMS.md independently of slay.cc.
std::vector<double> ReferencePsi(const SlayParams& p, const AttnShape& s, int g, const std::vector<double>& u) {
  const int d = s.head_dim, P = p.anchors, M = p.features;
  const std::vector<double> un = Normalized(u);
  std::vector<double> psi;
  for (int r = 0; r < p.nodes; ++r) {
    for (int a = 0; a < P; ++a) {
      double ad = 0;
      for (int i = 0; i < d; ++i) ad += p.anchor_dirs[a * d + i] * un[i];
      const double poly = ad * ad / std::sqrt(double(P));
      for (int i = 0; i < M; ++i) {
        double od = 0;
        for (int j = 0; j < d; ++j) od += p.omega[((size_t(r) * s.kv_heads + g) * d + j) * M + i] * un[j];
        const double e = std::clamp(std::sqrt(2 * p.node_s[r]) * od - p.node_s[r], -20.0, 20.0);
        psi.push_back(poly * std::sqrt(p.node_w[r]) * std::exp(e) / std::sqrt(double(M)));
      }
    }
  }
  return psi;
}

TEST(SlayFeaturesTest, MatchTheFormulaIncludingLayoutAndClamp) {
  for (const nlohmann::json& params : {nlohmann::json::object(), nlohmann::json{{"nodes", 8}, {"anchors", 3}, {"features", 5}}}) {
    auto a = MakeSlay(params);
    ASSERT_TRUE(a.ok()) << a.status();
    const SlayParams& p = std::get<SlayParams>(a->params);
    std::mt19937_64 rng(testing::TestSeed());
    for (int g = 0; g < a->shape.kv_heads; ++g) {
      const std::vector<double> u = testing::RandomNormal<double>(a->shape.head_dim, rng, 3.0);
      std::vector<double> psi(p.num_features());
      SlayFeatures<double>(p, a->shape, g, u.data(), psi.data());
      EXPECT_LT(testing::MaxRelError(psi, ReferencePsi(p, a->shape, g, u)), 1e-12) << params;
    }
  }
}

TEST(SlayFeaturesTest, ClampBoundsThePrfExponent) {
  auto a = MakeSlay({{"nodes", 2}, {"anchors", 2}, {"features", 2}}, {1, 1, 4, 4});
  ASSERT_TRUE(a.ok());
  SlayParams& p = std::get<SlayParams>(a->params);
  // omega . u^ = +-1000 for u = e_0: exponents far outside [-20, 20].
  std::fill(p.omega.begin(), p.omega.end(), 0.0f);
  for (int r = 0; r < 2; ++r) {
    p.omega[(size_t(r) * 4 + 0) * 2 + 0] = 1000.0f;   // d = 0, i = 0
    p.omega[(size_t(r) * 4 + 0) * 2 + 1] = -1000.0f;  // d = 0, i = 1
  }
  const std::vector<double> u = {5.0, 0, 0, 0};  // any length: features see u^ only
  std::vector<double> psi(p.num_features());
  SlayFeatures<double>(p, a->shape, 0, u.data(), psi.data());
  for (int r = 0; r < 2; ++r) {
    for (int an = 0; an < 2; ++an) {
      const double a0 = p.anchor_dirs[an * 4];
      const double poly = a0 * a0 / std::sqrt(2.0);
      const double amp = poly * std::sqrt(p.node_w[r]) / std::sqrt(2.0);
      EXPECT_NEAR(psi[(r * 2 + an) * 2 + 0], amp * std::exp(20.0), 1e-12 * amp * std::exp(20.0));
      EXPECT_NEAR(psi[(r * 2 + an) * 2 + 1], amp * std::exp(-20.0), 1e-12 * amp * std::exp(-20.0));
    }
  }
}

TEST(SlayFeaturesTest, InnerProductIsAnchorFactorTimesPrfFactorAndPrfFactorIsUnbiased) {
  // Exactly, psi(q).psi(k) = A(q,k) B(q,k) with A the anchor factor (1/P) sum_p (a_p.q^)^2 (a_p.k^)^2
  // and B = sum_{r,i} prf_{r,i}(q) prf_{r,i}(k). Over omega ~ N(0, I),
  //   E[B] = sum_r w_r exp(2 s_r x),  x = q^.k^,
  // the R-node quadrature of 1 / (C - 2x) (the clamp at +-20 fires with probability < 1e-20 here).
  // B is lognormal-tailed for x > 0, so the Monte Carlo check stays at x <= 0 where it converges.
  const int d = 8, draws = 60;
  const nlohmann::json params = {{"features", 4096}};
  std::mt19937_64 rng(testing::TestSeed() + 7);
  for (double x : {-0.9, -0.5, 0.0}) {
    std::vector<double> q, k;
    UnitPair(d, x, rng, &q, &k);
    for (double& e : q) e *= 2.5;  // norms do not matter
    double sum = 0, sum2 = 0, expected = 0;
    for (int n = 0; n < draws; ++n) {
      auto a = ParseLayerAttention({"slay", params}, {1, 1, d, 4});
      ASSERT_TRUE(a.ok());
      RandomInitAttentionTensors(rng(), &*a);
      const SlayParams& p = std::get<SlayParams>(a->params);
      std::vector<double> pq(p.num_features()), pk(p.num_features());
      SlayFeatures<double>(p, a->shape, 0, q.data(), pq.data());
      SlayFeatures<double>(p, a->shape, 0, k.data(), pk.data());
      const double anchor = AnchorFactor(p, d, q, k);
      const double b = Dot(pq, pk) / anchor;
      sum += b;
      sum2 += b * b;
      expected = 0;
      for (int r = 0; r < p.nodes; ++r) expected += p.node_w[r] * std::exp(2 * p.node_s[r] * x);
    }
    const double mean = sum / draws;
    const double stderr_mean = std::sqrt(std::max(0.0, sum2 / draws - mean * mean) / (draws - 1));
    EXPECT_NEAR(mean, expected, 5 * stderr_mean + 1e-3 * expected) << "x=" << x;
  }
}

TEST(SlayFeaturesTest, AnchorFactorExpectationIsOnePlusTwoXSquaredNotXSquared) {
  // For anchors uniform on the sphere, E[(a.q)^2 (a.k)^2] = (1 + 2x^2) / (d (d + 2)): the anchor
  // features are biased away from x^2 (MECHANISMS.md, "Honest expectations").
  const int d = 6, draws = 6000;
  std::mt19937_64 rng(testing::TestSeed() + 11);
  for (double x : {0.0, 0.6, 1.0}) {
    std::vector<double> q, k;
    UnitPair(d, x, rng, &q, &k);
    double sum = 0;
    for (int n = 0; n < draws; ++n) {
      auto a = ParseLayerAttention({"slay", {{"features", 1}, {"nodes", 1}}}, {1, 1, d, 1});
      ASSERT_TRUE(a.ok());
      RandomInitAttentionTensors(rng(), &*a);
      sum += AnchorFactor(std::get<SlayParams>(a->params), d, q, k);
    }
    const double expected = (1 + 2 * x * x) / (d * (d + 2));
    EXPECT_NEAR(sum / draws, expected, 0.06 * expected) << "x=" << x;
  }
}

TEST(SlayTensorsTest, RandomInitNormalizesAnchorsAndAppendsBothTensors) {
  auto a = MakeSlay({{"nodes", 3}, {"anchors", 5}, {"features", 7}}, {6, 3, 8, 4});
  ASSERT_TRUE(a.ok());
  const SlayParams& p = std::get<SlayParams>(a->params);
  for (int an = 0; an < 5; ++an) {
    double n2 = 0;
    for (int i = 0; i < 8; ++i) n2 += double(p.anchor_dirs[an * 8 + i]) * p.anchor_dirs[an * 8 + i];
    EXPECT_NEAR(n2, 1.0, 1e-6);
  }
  std::vector<TensorToWrite> out;
  AppendAttentionTensors(*a, "model.layers.2.self_attn.", &out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].name, "model.layers.2.self_attn.slay.anchors");
  EXPECT_EQ(out[0].shape, (std::vector<int64_t>{5, 8}));
  EXPECT_EQ(out[1].name, "model.layers.2.self_attn.slay.omega");
  EXPECT_EQ(out[1].shape, (std::vector<int64_t>{3, 3, 8, 7}));
  EXPECT_EQ(out[1].values.size(), p.omega.size());
}

TEST(SlayStateTest, PlainAccumulationAgreesWithParallel) {
  auto a = MakeSlay({{"accumulation", "plain"}, {"nodes", 4}});
  ASSERT_TRUE(a.ok());
  a->chunk_size = 5;
  const int n = 33;
  const AttnShape& s = a->shape;
  std::mt19937_64 rng(testing::TestSeed() + 3);
  const auto q = testing::RandomNormal<double>(n * s.heads * s.head_dim, rng);
  const auto k = testing::RandomNormal<double>(n * s.kv_heads * s.head_dim, rng);
  const auto v = testing::RandomNormal<double>(n * s.kv_heads * s.value_dim, rng);
  std::vector<double> ref(n * s.heads * s.value_dim), rec(ref.size()), chunk(ref.size());
  AttentionParallel<double>(*a, n, q.data(), k.data(), v.data(), ref.data());
  std::vector<double> fixed(StateFloats(*a), NAN);
  InitState<double>(*a, {fixed.data(), nullptr});
  AttentionRecurrent<double>(*a, n, q.data(), k.data(), v.data(), {fixed.data(), nullptr}, rec.data());
  InitState<double>(*a, {fixed.data(), nullptr});
  AttentionChunked<double>(*a, n, q.data(), k.data(), v.data(), {fixed.data(), nullptr}, chunk.data());
  EXPECT_LT(testing::MaxRelError(rec, ref), 1e-12);
  EXPECT_LT(testing::MaxRelError(chunk, ref), 1e-12);
}

// --- Loading through model/safetensors.cc.

class SlayLoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto a = MakeSlay({{"anchors", 3}, {"features", 4}}, {2, 2, 4, 2});
    ASSERT_TRUE(a.ok());
    layer_ = *std::move(a);
    AppendAttentionTensors(layer_, "model.layers.0.self_attn.", &tensors_);
    ASSERT_EQ(tensors_.size(), 2u);
  }

  // Writes `tensors` and loads them into a fresh copy of the layer's params.
  absl::Status WriteAndLoad(const std::vector<TensorToWrite>& tensors, SlayParams* loaded) {
    const std::string path = testing::MakeTempDir("slay_load") + "/attn.safetensors";
    if (absl::Status s = WriteSafeTensors(path, tensors); !s.ok()) return s;
    auto st = SafeTensors::Open(path);
    if (!st.ok()) return st.status();
    auto fresh = ParseLayerAttention({"slay", {{"anchors", 3}, {"features", 4}}}, layer_.shape);
    STEADY_CHECK(fresh.ok());
    *loaded = std::get<SlayParams>(fresh->params);
    return LoadTensors(*st, "model.layers.0.self_attn.", layer_.shape, loaded);
  }

  LayerAttention layer_;
  std::vector<TensorToWrite> tensors_;
};

TEST_F(SlayLoadTest, RoundTripsAndRenormalizesAnchors) {
  std::vector<TensorToWrite> scaled = tensors_;
  for (double& x : scaled[0].values) x *= 3.0;  // anchors stored unnormalized
  SlayParams loaded;
  absl::Status s = WriteAndLoad(scaled, &loaded);
  ASSERT_TRUE(s.ok()) << s;
  const SlayParams& orig = std::get<SlayParams>(layer_.params);
  ASSERT_EQ(loaded.anchor_dirs.size(), orig.anchor_dirs.size());
  for (size_t i = 0; i < orig.anchor_dirs.size(); ++i) EXPECT_NEAR(loaded.anchor_dirs[i], orig.anchor_dirs[i], 1e-6);
  EXPECT_EQ(loaded.omega, orig.omega);
}

TEST_F(SlayLoadTest, RefusesWrongShapeMissingTensorAndZeroAnchorNamingTheTensor) {
  SlayParams loaded;
  std::vector<TensorToWrite> bad_shape = tensors_;
  bad_shape[1].shape = {2, 2, 4, 2};  // features 2, config says 4
  bad_shape[1].values.resize(2 * 2 * 4 * 2);
  absl::Status s = WriteAndLoad(bad_shape, &loaded);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("model.layers.0.self_attn.slay.omega"), std::string::npos) << s;

  s = WriteAndLoad({tensors_[1]}, &loaded);  // no anchors
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("model.layers.0.self_attn.slay.anchors"), std::string::npos) << s;

  std::vector<TensorToWrite> zero_row = tensors_;
  for (int i = 0; i < 4; ++i) zero_row[0].values[4 + i] = 0.0;  // anchor row 1
  s = WriteAndLoad(zero_row, &loaded);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("model.layers.0.self_attn.slay.anchors"), std::string::npos) << s;
  EXPECT_NE(std::string(s.message()).find("row 1"), std::string::npos) << s;
}

}  // namespace
}  // namespace steady
