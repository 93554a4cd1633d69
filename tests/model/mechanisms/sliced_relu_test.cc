// sliced_relu / sliced_relu_bump beyond the shared conformance suite: the exact decoder against a
// brute-force model of the definition (ties included), the bump identity, the bucketed decoder's
// error shrinking with bins and being exact when bins hold at most two keys, the exact decoder's
// O(log t) cost, and the refusals users rely on (config keys, non-positive bandwidths at load).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "model/mechanisms/attention.h"
#include "model/mechanisms/sliced_bins.h"
#include "model/mechanisms/sliced_tree.h"
#include "tests/testutil.h"

namespace steady {
namespace {

// Token streams with projection "none": head_dim 1, q and k are the scores.
struct Stream {
  AttnShape shape;
  std::vector<double> zq, zk, v;  // [n, heads], [n, kv_heads], [n, kv_heads, dv]
  int n = 0;
};

// Scores drawn as a mix that exercises ties: N(0, spread^2), a few fixed values, and repeats of
// earlier keys (so queries also land exactly on keys).
Stream MakeStream(int n, int heads, int kv_heads, int dv, double spread, uint64_t salt) {
  std::mt19937_64 rng(testing::TestSeed() + salt);
  std::normal_distribution<double> normal(0.0, spread);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  Stream s{{heads, kv_heads, 1, dv}, {}, {}, {}, n};
  auto draw = [&](const std::vector<double>& keys) {
    const double u = unit(rng);
    if (u < 0.2) return std::floor(unit(rng) * 5) * 0.5 - 1.0;  // -1, -0.5, 0, 0.5, 1
    if (u < 0.35 && !keys.empty()) return keys[size_t(unit(rng) * keys.size())];
    return normal(rng);
  };
  for (int t = 0; t < n; ++t) {
    for (int g = 0; g < kv_heads; ++g) s.zk.push_back(draw(s.zk));
    for (int h = 0; h < heads; ++h) s.zq.push_back(draw(s.zk));
  }
  s.v = testing::RandomNormal<double>(size_t(n) * kv_heads * dv, rng);
  return s;
}

LayerAttention Make(const std::string& mechanism, nlohmann::json params, const AttnShape& shape) {
  params["projection"] = "none";
  auto a = ParseLayerAttention({mechanism, params}, shape);
  EXPECT_TRUE(a.ok()) << a.status();
  return *a;
}

void SetBandwidth(LayerAttention* a, std::vector<float> b) { std::get<SlicedParams>(a->params).bandwidth = b; }

template <typename T>
std::vector<double> RunRecurrent(const LayerAttention& a, const Stream& s) {
  std::vector<T> q(s.zq.begin(), s.zq.end()), k(s.zk.begin(), s.zk.end()), v(s.v.begin(), s.v.end());
  std::vector<T> y(size_t(s.n) * s.shape.heads * s.shape.value_dim, T(NAN));
  std::vector<T> fixed(StateFloats(a), T(NAN)), growing;
  StateView<T> st{fixed.data(), &growing};
  InitState<T>(a, st);
  AttentionRecurrent<T>(a, s.n, q.data(), k.data(), v.data(), st, y.data());
  return std::vector<double>(y.begin(), y.end());
}

// The definitions, written out independently of the mechanism's own parallel form.
std::vector<double> BruteForce(const Stream& s, bool bump, const std::vector<float>& bandwidth) {
  const AttnShape& sh = s.shape;
  const int dv = sh.value_dim;
  std::vector<double> y;
  for (int t = 0; t < s.n; ++t) {
    for (int h = 0; h < sh.heads; ++h) {
      const int g = h / sh.group();
      const double x = s.zq[t * sh.heads + h];
      for (int d = 0; d < dv; ++d) {
        double mean = 0;
        for (int j = 0; j <= t; ++j) mean += s.v[(j * sh.kv_heads + g) * dv + d];
        mean /= t + 1;
        double num = 0, den = 0;
        for (int j = 0; j <= t; ++j) {
          const double z = s.zk[j * sh.kv_heads + g], vj = s.v[(j * sh.kv_heads + g) * dv + d];
          if (bump) {
            num += std::max(0.0, 1.0 - std::abs(x - z) / bandwidth[h]) * vj;
          } else {
            num += std::max(0.0, x - z) * (vj - mean);
            den += std::abs(x - z);
          }
        }
        y.push_back(bump ? num / (t + 1) : (den > 0 ? num / den : 0.0));
      }
    }
  }
  return y;
}

// Largest error of token t's outputs relative to their own scale, over tokens from `from` on. A token
// whose outputs are all ~0 (a bump window with no keys) is measured against 1e-4 of the global scale.
double WorstTokenError(const std::vector<double>& a, const std::vector<double>& ref, int per_token, int from) {
  double global = 0, worst = 0;
  for (double r : ref) global = std::max(global, std::abs(r));
  for (size_t t = from; t * per_token < ref.size(); ++t) {
    double err = 0, scale = 1e-4 * global;
    for (size_t i = t * per_token; i < (t + 1) * per_token; ++i) {
      err = std::max(err, std::isnan(a[i]) ? INFINITY : std::abs(a[i] - ref[i]));
      scale = std::max(scale, std::abs(ref[i]));
    }
    worst = std::max(worst, err / scale);
  }
  return worst;
}

TEST(SlicedExactDecoderTest, MatchesBruteForceWithTiesUpTo5000Tokens) {
  const Stream s = MakeStream(5000, 4, 2, 3, 1.0, 11);
  const int per_token = s.shape.heads * s.shape.value_dim;
  LayerAttention a = Make("sliced_relu", {{"decoder", "exact"}}, s.shape);
  const std::vector<double> ref = BruteForce(s, false, {});
  const std::vector<double> y = RunRecurrent<double>(a, s);
  EXPECT_LT(testing::MaxRelError(y, ref), 1e-10);
  // Late outputs are ~1/sqrt(t) of early ones; hold them to their own scale too.
  EXPECT_LT(WorstTokenError(y, ref, per_token, 4000), 1e-8);
  // fp32 serving path with compensated sums stays close to the fp64 definition.
  EXPECT_LT(testing::RelL2Error(RunRecurrent<float>(a, s), ref), 1e-5);
}

TEST(SlicedExactDecoderTest, BumpMatchesBruteForceWithTies) {
  const Stream s = MakeStream(3000, 4, 2, 3, 1.0, 12);
  LayerAttention a = Make("sliced_relu_bump", {{"decoder", "exact"}}, s.shape);
  const std::vector<float> b = {0.05f, 0.5f, 1.0f, 3.0f};
  SetBandwidth(&a, b);
  const std::vector<double> ref = BruteForce(s, true, b);
  const std::vector<double> y = RunRecurrent<double>(a, s);
  EXPECT_LT(testing::MaxRelError(y, ref), 1e-10);
  EXPECT_LT(WorstTokenError(y, ref, s.shape.heads * s.shape.value_dim, 2000), 1e-7);
}

TEST(SlicedDecodersTest, AllScoresEqualGivesZeroNotNan) {
  // Every |x - z_j| is 0: the sliced ratio is 0/0, defined as 0.
  Stream s = MakeStream(50, 2, 1, 2, 1.0, 13);
  std::fill(s.zq.begin(), s.zq.end(), 0.37);
  std::fill(s.zk.begin(), s.zk.end(), 0.37);
  for (const char* decoder : {"exact", "bucketed"}) {
    LayerAttention a = Make("sliced_relu", {{"decoder", decoder}}, s.shape);
    for (double y : RunRecurrent<double>(a, s)) EXPECT_EQ(y, 0.0) << decoder;
    for (double y : RunRecurrent<float>(a, s)) EXPECT_EQ(y, 0.0) << decoder;
  }
}

TEST(SlicedDecodersTest, CenteringMakesOutputsInvariantToAValueShift) {
  Stream s = MakeStream(400, 2, 2, 3, 1.0, 14);
  for (const char* decoder : {"exact", "bucketed"}) {
    LayerAttention a = Make("sliced_relu", {{"decoder", decoder}}, s.shape);
    const std::vector<double> before = RunRecurrent<double>(a, s);
    Stream shifted = s;
    for (double& x : shifted.v) x += 5.0;
    EXPECT_LT(testing::MaxRelError(RunRecurrent<double>(a, shifted), before), 1e-9) << decoder;
  }
}

// F(x) = sum_{z_j < x} (x - z_j) v_j, directly.
double ReluPrefix(const std::vector<double>& z, const std::vector<double>& v, double x) {
  double f = 0;
  for (size_t j = 0; j < z.size(); ++j) f += std::max(0.0, x - z[j]) * v[j];
  return f;
}

TEST(SlicedBumpTest, SecondDifferenceOfReluPrefixIsTheHatKernel) {
  std::mt19937_64 rng(testing::TestSeed() + 15);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> width(0.01, 3.0);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + trial;
    std::vector<double> z(n), v(n);
    for (int j = 0; j < n; ++j) z[j] = j % 4 == 0 ? std::round(normal(rng)) : normal(rng), v[j] = normal(rng);
    const double b = width(rng);
    // Queries at random points and exactly b away from a key (the kernel's corners).
    for (double x : {normal(rng), z[0] + b, z[n - 1] - b, z[n / 2]}) {
      double hat = 0, scale = 0;
      for (int j = 0; j < n; ++j) {
        hat += std::max(0.0, 1.0 - std::abs(x - z[j]) / b) * v[j];
        scale += std::abs(v[j]);
      }
      const double identity = (ReluPrefix(z, v, x + b) - 2 * ReluPrefix(z, v, x) + ReluPrefix(z, v, x - b)) / b;
      EXPECT_NEAR(identity, hat, 1e-12 * (1 + scale * (1 + std::abs(x) / b)));
    }
  }
}

TEST(SlicedBucketedTest, ErrorShrinksAsBinsGrow) {
  const Stream s = MakeStream(4000, 2, 2, 4, 1.0, 16);
  LayerAttention exact = Make("sliced_relu", {{"decoder", "exact"}}, s.shape);
  const std::vector<double> ref = RunRecurrent<double>(exact, s);
  std::vector<double> errors;
  for (int bins : {4, 16, 64, 256}) {
    LayerAttention a = Make("sliced_relu", {{"decoder", "bucketed"}, {"bins", bins}}, s.shape);
    errors.push_back(testing::RelL2Error(RunRecurrent<double>(a, s), ref));
    std::cerr << "bins " << bins << ": relative L2 error " << errors.back() << "\n";
  }
  for (size_t i = 1; i < errors.size(); ++i) EXPECT_LT(errors[i], errors[i - 1]);
  EXPECT_LT(errors.back(), errors.front() / 10);
}

TEST(SlicedBucketedTest, ExactWhenNoBinHoldsMoreThanTwoKeys) {
  // Two keys in each tail, then two keys in each of the first interior bins: every bin's two-point
  // model is then its keys themselves, so the bucketed decoder equals the exact one for any query.
  const int n = 60, bins = 32;
  Stream s{{2, 1, 1, 3}, {}, {}, {}, n};
  std::mt19937_64 rng(testing::TestSeed() + 17);
  std::uniform_real_distribution<double> unit(0.05, 0.95);
  std::normal_distribution<double> normal(0.0, 3.0);
  const double tails[4] = {-6.0, -9.5, 5.0, 7.25};
  for (int t = 0; t < n; ++t) {
    s.zk.push_back(t < 4 ? tails[t] : -4.0 + ((t - 4) / 2 + unit(rng)) * 8.0 / bins);
    s.zq.push_back(normal(rng));
    s.zq.push_back(t % 3 == 0 ? s.zk.back() : normal(rng));  // some queries exactly on a key
  }
  s.v = testing::RandomNormal<double>(size_t(n) * 3, rng);
  for (const char* mechanism : {"sliced_relu", "sliced_relu_bump"}) {
    LayerAttention exact = Make(mechanism, {{"decoder", "exact"}}, s.shape);
    LayerAttention bucketed = Make(mechanism, {{"decoder", "bucketed"}, {"bins", bins}}, s.shape);
    SetBandwidth(&exact, {0.2f, 0.9f});
    SetBandwidth(&bucketed, {0.2f, 0.9f});
    const std::vector<double> want = RunRecurrent<double>(exact, s);
    EXPECT_LT(WorstTokenError(RunRecurrent<double>(bucketed, s), want, 2 * 3, 0), 1e-9) << mechanism;
  }
}

TEST(SlicedExactDecoderTest, PerTokenCostGrowsLogarithmically) {
  // Nodes visited by one insert plus one readout, averaged over tokens [2^k, 2^(k+1)): an AVL tree
  // visits at most ~1.44 log2(t) per path. A sorted array would move O(t) entries per insert.
  for (const bool sorted : {false, true}) {
    const SlicedTreeLayout layout{1, 2, true};
    std::vector<double> nodes;
    double root = 0;
    std::mt19937_64 rng(testing::TestSeed() + 19);
    std::normal_distribution<double> normal(0.0, 1.0);
    const double v[2] = {1.0, -1.0};
    SlicedReluMoments m;
    std::vector<double> per_window;
    int64_t visits = 0;
    for (int64_t t = 1; t < (int64_t(1) << 17); ++t) {
      const double z = sorted ? double(t) : normal(rng);  // increasing keys: worst case for a plain BST
      TreeAppendToken(layout, &z, v, &root, &nodes, &visits);
      TreeReluMoments(layout, 0, sorted ? double(t) / 2 : normal(rng), &root, nodes, &m, &visits);
      if (((t + 1) & t) == 0) {  // t + 1 is a power of two: close the window [(t + 1) / 2, t]
        per_window.push_back(double(visits) / double((t + 1) / 2));
        visits = 0;
      }
    }
    for (size_t k = 0; k < per_window.size(); ++k) {
      // Window k holds t in [2^k, 2^(k+1)); two paths of at most 1.44 log2(t + 2) + 1 nodes.
      EXPECT_LE(per_window[k], 2 * (1.45 * (k + 2) + 1)) << "window " << k << (sorted ? " sorted" : "");
    }
    // From t ~ 1e3 to t ~ 6.5e4 (64x more keys) the cost grows by ~16/10, not 64x.
    EXPECT_LT(per_window[16] / per_window[10], 2.0) << (sorted ? "sorted" : "random");
    std::cerr << (sorted ? "sorted" : "random") << " keys: nodes visited per token at t~2^10 "
              << per_window[10] << ", t~2^16 " << per_window[16] << "\n";
  }
}

// A decode step scores every row of the batch in one call (AttentionTokenValues) and hands each
// session its rows' scores: outputs and states are the same bits as each session scoring its own
// rows, through AttentionForward (Step at one row, Chunked at several) and AttentionSteps, for both
// projections, both decoders and the bump; the other mechanisms have no token values.
TEST(SlicedTokenValuesTest, ABatchsScoresGiveEachSegmentItsOwnBits) {
  const AttnShape shape{4, 2, 8, 6};
  const std::vector<int> lengths = {1, 3, 1, 2};  // the segments' rows, one session each
  const int rows = 7;
  for (const char* mechanism : {"sliced_relu", "sliced_relu_bump"}) {
    for (const char* projection : {"mlp", "linear"}) {
      for (const char* decoder : {"bucketed", "exact"}) {
        auto a = ParseLayerAttention({mechanism, {{"projection", projection}, {"decoder", decoder}}}, shape);
        ASSERT_TRUE(a.ok()) << a.status();
        RandomInitAttentionTensors(testing::TestSeed() ^ 0x5c0e, &*a);
        const int per_token = AttentionTokenValueCount(*a);
        ASSERT_EQ(per_token, shape.heads + shape.kv_heads);
        std::mt19937_64 rng(testing::TestSeed() + 77);
        const std::vector<float> q = testing::RandomNormal<float>(size_t(rows) * shape.heads * shape.head_dim, rng);
        const std::vector<float> k = testing::RandomNormal<float>(size_t(rows) * shape.kv_heads * shape.head_dim, rng);
        const std::vector<float> v = testing::RandomNormal<float>(size_t(rows) * shape.kv_heads * shape.value_dim, rng);
        std::vector<double> values(size_t(rows) * per_token, NAN);
        AttentionTokenValues<float>(*a, rows, q.data(), k.data(), values.data());
        for (bool steps : {false, true}) {
          int row = 0;
          for (int n : lengths) {
            // Two sessions with a few tokens of history each, one given the batch's scores.
            std::vector<float> fixed[2], growing[2], y[2];
            for (int i = 0; i < 2; ++i) {
              fixed[i].assign(StateFloats(*a), NAN);
              StateView<float> st{fixed[i].data(), &growing[i]};
              InitState<float>(*a, st);
              std::vector<float> hy(size_t(rows) * shape.heads * shape.value_dim);
              AttentionForward<float>(*a, rows, q.data(), k.data(), v.data(), st, hy.data());  // the history
              y[i].assign(size_t(n) * shape.heads * shape.value_dim, NAN);
              const float* qr = q.data() + size_t(row) * shape.heads * shape.head_dim;
              const float* kr = k.data() + size_t(row) * shape.kv_heads * shape.head_dim;
              const float* vr = v.data() + size_t(row) * shape.kv_heads * shape.value_dim;
              const double* given = i == 1 ? values.data() + size_t(row) * per_token : nullptr;
              if (steps) {
                AttentionSteps<float>(*a, n, qr, kr, vr, st, y[i].data(), given);
              } else {
                AttentionForward<float>(*a, n, qr, kr, vr, st, y[i].data(), given);
              }
            }
            const std::string where = std::string(mechanism) + " " + projection + " " + decoder +
                                      (steps ? " steps" : " forward") + " at row " + std::to_string(row);
            EXPECT_EQ(0, std::memcmp(y[0].data(), y[1].data(), y[0].size() * sizeof(float))) << where;
            EXPECT_EQ(0, std::memcmp(fixed[0].data(), fixed[1].data(), fixed[0].size() * sizeof(float))) << where;
            EXPECT_EQ(growing[0], growing[1]) << where;
            EXPECT_FALSE(std::isnan(y[1][0])) << where;
            row += n;
          }
        }
      }
    }
  }
  auto taylor = ParseLayerAttention({"taylor", nlohmann::json::object()}, shape);
  ASSERT_TRUE(taylor.ok());
  EXPECT_EQ(AttentionTokenValueCount(*taylor), 0);
}

// The "mlp" projection's hidden layers are the layer's token matrices (q_fc1 then k_fc1): a caller
// holding copies of them in its own precision (the CPU backend's --cpu-weights) multiplies through
// its product. Given the fp32 kernel's own product, the scores are the same bits as without one;
// a product that changes matrix 0's result moves the queries' scores only, matrix 1's the keys'
// only; the other projections and mechanisms have none.
TEST(SlicedTokenValuesTest, TheHiddenLayersGoThroughTheCallersProduct) {
  const AttnShape shape{4, 2, 8, 6};
  const int rows = 37;  // above kSmallRowsMax: the rows go to the product at once
  auto a = ParseLayerAttention({"sliced_relu", {{"projection", "mlp"}}}, shape);
  ASSERT_TRUE(a.ok()) << a.status();
  RandomInitAttentionTensors(testing::TestSeed() ^ 0x70c, &*a);
  const std::vector<TokenMatrix> matrices = AttentionTokenMatrices(*a);
  ASSERT_EQ(matrices.size(), 2u);
  const SlicedParams& p = std::get<SlicedParams>(a->params);
  EXPECT_EQ(matrices[0].w, p.q.fc1_weight.data());
  EXPECT_EQ(matrices[0].out, shape.heads * shape.head_dim);
  EXPECT_EQ(matrices[0].in, shape.heads * shape.head_dim);
  EXPECT_EQ(matrices[1].w, p.k.fc1_weight.data());
  EXPECT_EQ(matrices[1].out, shape.kv_heads * shape.head_dim);
  EXPECT_EQ(matrices[1].in, shape.kv_heads * shape.head_dim);

  std::mt19937_64 rng(testing::TestSeed() + 78);
  const std::vector<float> q = testing::RandomNormal<float>(size_t(rows) * shape.heads * shape.head_dim, rng);
  const std::vector<float> k = testing::RandomNormal<float>(size_t(rows) * shape.kv_heads * shape.head_dim, rng);
  const int per_token = AttentionTokenValueCount(*a);
  auto scores = [&](const TokenMatrixProduct* product) {
    std::vector<double> values(size_t(rows) * per_token, NAN);
    AttentionTokenValues<float>(*a, rows, q.data(), k.data(), values.data(), product);
    return values;
  };
  const std::vector<double> own = scores(nullptr);
  std::vector<std::pair<int, int>> calls;  // (matrix, rows)
  float scale[2] = {1.0f, 1.0f};
  const TokenMatrixProduct product = [&](int i, const float* x, int n, float* y) {
    calls.emplace_back(i, n);
    const TokenMatrix& m = matrices[size_t(i)];
    for (int r = 0; r < n; r += cpu::kSmallRowsMax) {
      const int chunk = std::min(cpu::kSmallRowsMax, n - r);
      cpu::MatMulNTSmallRows(x + int64_t(r) * m.in, chunk, int(m.in), m.w, int(m.out), y + int64_t(r) * m.out);
    }
    for (int64_t e = 0; e < int64_t(n) * m.out; ++e) y[e] *= scale[i];
  };
  const std::vector<double> same = scores(&product);
  EXPECT_EQ(0, std::memcmp(own.data(), same.data(), own.size() * sizeof(double)));
  EXPECT_EQ(calls, (std::vector<std::pair<int, int>>{{0, rows}, {1, rows}}));
  for (int moved : {0, 1}) {
    scale[0] = scale[1] = 1.0f;
    scale[moved] = 1.5f;
    const std::vector<double> got = scores(&product);
    for (int t = 0; t < rows; ++t) {
      for (int j = 0; j < per_token; ++j) {
        const size_t e = size_t(t) * per_token + size_t(j);
        const bool query = j < shape.heads;
        if (query == (moved == 0)) {
          EXPECT_NE(got[e], own[e]) << "matrix " << moved << " token " << t << " score " << j;
        } else {
          EXPECT_EQ(got[e], own[e]) << "matrix " << moved << " token " << t << " score " << j;
        }
      }
    }
  }

  auto linear = ParseLayerAttention({"sliced_relu", {{"projection", "linear"}}}, shape);
  ASSERT_TRUE(linear.ok());
  EXPECT_TRUE(AttentionTokenMatrices(*linear).empty());
  auto taylor = ParseLayerAttention({"taylor", nlohmann::json::object()}, shape);
  ASSERT_TRUE(taylor.ok());
  EXPECT_TRUE(AttentionTokenMatrices(*taylor).empty());
}

// The bucketed decoder's snapshot keeps the running sums at its points' bins only, in one pass over
// the bins: every readout and the totals equal, bit for bit, those from every bin's widened row and
// their prefixes over all bins (the snapshot as it was), for points in the tails, beyond the keys,
// several in one bin and in empty bins, compensated and plain, fp32 and fp64.
template <typename T>
void CheckSnapshotAgainstAllPrefixes(bool compensated) {
  const SlicedBinsLayout layout{16, -2.0, 2.0, 5, compensated};
  const int dv = layout.value_dim, m = SlicedMomentCount(dv), row_floats = layout.BinFloats();
  std::vector<T> head(layout.HeadFloats());
  BinsInit(layout, head.data());
  std::mt19937_64 rng(testing::TestSeed() + (compensated ? 5 : 6));
  std::normal_distribution<double> z(0.3, 1.4);
  for (int t = 0; t < 400; ++t) {
    const std::vector<T> v = testing::RandomNormal<T>(size_t(dv), rng);
    BinsInsert(layout, z(rng), v.data(), head.data());
  }
  const std::vector<double> points = {-9.0, -2.5, -2.0, -1.99, 0.01, 0.02, 0.3, 0.3, 1.2, 1.999, 2.0, 3.7, 50.0};
  SlicedBinsSnapshot snap;
  BinsSnapshot(layout, head.data(), points.data(), int(points.size()), &snap);
  EXPECT_LT(snap.at.size(), points.size()) << "points in one bin share it";

  // The reference: every bin read out, prefixes over all of them.
  const size_t cells = size_t(layout.bins + 2) * row_floats;
  std::vector<double> rows(cells), cum(size_t(layout.bins + 3) * m, 0.0);
  for (size_t i = 0; i < cells; ++i) rows[i] = ReadSum(head.data() + i, compensated ? head.data() + cells + i : nullptr);
  for (int b = 0; b < layout.bins + 2; ++b) {
    for (int i = 0; i < m; ++i) cum[size_t(b + 1) * m + i] = cum[size_t(b) * m + i] + rows[size_t(b) * row_floats + i];
  }
  const double* all = cum.data() + size_t(layout.bins + 2) * m;
  SlicedTotals totals;
  BinsTotals(layout, snap, &totals);
  EXPECT_EQ(totals.count, all[0]);
  EXPECT_EQ(totals.count, 400.0);
  EXPECT_EQ(totals.sum_z, all[1]);
  EXPECT_EQ(totals.sum_v, std::vector<double>(all + 2, all + 2 + dv));
  const double lowest = double(head[layout.HeadFloats() - 2]), highest = double(head[layout.HeadFloats() - 1]);
  for (double x : points) {
    SlicedReluMoments got;
    BinsReluMoments(layout, snap, x, &got);
    const int b = sliced_bins::BinOf(layout, x);
    const double* below = cum.data() + size_t(b) * m;
    double r1 = x * below[0] - below[1];
    std::vector<double> rv(static_cast<size_t>(dv));
    for (int d = 0; d < dv; ++d) rv[size_t(d)] = x * below[2 + d] - below[2 + dv + d];
    const double* own = rows.data() + size_t(b) * row_floats;
    if (own[0] != 0) {
      const sliced_bins::OwnBin split = sliced_bins::SplitOwnBin(layout, b, x, own[0], own[1], own[m], lowest, highest,
                                                                 sliced_bins::Resolution<T>(compensated));
      if (split.kind != sliced_bins::OwnBin::kNone) {
        r1 += sliced_bins::OwnBinR1(split, x, own[0], own[1]);
        for (int d = 0; d < dv; ++d) rv[size_t(d)] += sliced_bins::OwnBinRv(split, x, own[2 + d], own[2 + dv + d]);
      }
    }
    EXPECT_EQ(got.r1, r1) << "x " << x;
    EXPECT_EQ(got.rv, rv) << "x " << x;
  }
}

TEST(SlicedBinsTest, ASnapshotAtItsPointsEqualsPrefixesOfEveryBin) {
  for (bool compensated : {true, false}) {
    CheckSnapshotAgainstAllPrefixes<float>(compensated);
    CheckSnapshotAgainstAllPrefixes<double>(compensated);
  }
}

TEST(SlicedParamsTest, ProjectionNoneNeedsHeadDimOne) {
  auto bad = ParseLayerAttention({"sliced_relu", {{"projection", "none"}}}, AttnShape{2, 1, 4, 4});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(bad.status().message()).find("projection"), std::string::npos) << bad.status();
  EXPECT_TRUE(ParseLayerAttention({"sliced_relu", {{"projection", "none"}}}, AttnShape{2, 1, 1, 4}).ok());
  EXPECT_TRUE(ParseLayerAttention({"sliced_relu_bump", {{"projection", "none"}}}, AttnShape{2, 1, 1, 4}).ok());
}

TEST(SlicedParamsTest, BadKeysAreRefusedByName) {
  const AttnShape shape{2, 1, 4, 4};
  const std::vector<std::pair<nlohmann::json, std::string>> cases = {
      {{{"projection", "cubic"}}, "projection"}, {{{"decoder", "fast"}}, "decoder"},
      {{{"bins", 0}}, "bins"},                   {{{"bins", 2.5}}, "bins"},
      {{{"z_min", 1.0}, {"z_max", 1.0}}, "z_max"}, {{{"z_min", NAN}}, "z_min"},
  };
  for (const auto& [params, key] : cases) {
    auto a = ParseLayerAttention({"sliced_relu", params}, shape);
    ASSERT_FALSE(a.ok()) << params.dump();
    EXPECT_NE(std::string(a.status().message()).find(key), std::string::npos) << a.status();
  }
}

TEST(SlicedParamsTest, DefaultsAndStateSize) {
  const AttnShape shape{4, 2, 8, 6};
  auto relu = ParseLayerAttention({"sliced_relu", nlohmann::json::object()}, shape);
  auto bump = ParseLayerAttention({"sliced_relu_bump", nlohmann::json::object()}, shape);
  ASSERT_TRUE(relu.ok() && bump.ok());
  EXPECT_EQ(DescribeAttention(*relu)["projection"], "mlp");
  EXPECT_EQ(DescribeAttention(*relu)["decoder"], "bucketed");
  EXPECT_EQ(DescribeAttention(*bump)["projection"], "linear");
  EXPECT_EQ(DescribeAttention(*bump)["decoder"], "bucketed");
  // Per kv head: (bins + 2) x (2 dv + 3) sums, doubled for compensation, plus lowest/highest z.
  EXPECT_EQ(StateFloats(*relu), 2u * ((64 + 2) * (2 * 6 + 3) * 2 + 2));
  relu->accumulation = Accumulation::kPlain;
  EXPECT_EQ(StateFloats(*relu), 2u * ((64 + 2) * (2 * 6 + 3) + 2));
}

// A safetensors file's bytes (F32 tensors), written here so the loader is tested on its own.
std::string SafetensorsBytes(const std::vector<TensorToWrite>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const TensorToWrite& t : tensors) {
    const size_t begin = data.size();
    for (double x : t.values) {
      const float f = float(x);
      data.append(reinterpret_cast<const char*>(&f), sizeof f);
    }
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = char((uint64_t(text.size()) >> (8 * i)) & 0xff);
  return out + text + data;
}

// Parses `bytes` (a whole safetensors file) into `var`.
#define PARSE_OR_FAIL(var, bytes)                                \
  auto var = SafeTensors::Parse(bytes, "test.safetensors");      \
  ASSERT_TRUE(var.ok()) << var.status()

TEST(SlicedTensorsTest, NonPositiveOrNonFiniteBandwidthIsRefusedAtLoad) {
  const AttnShape shape{2, 1, 1, 2};
  const std::string prefix = "model.layers.0.self_attn.";
  for (float bad : {0.0f, -0.5f, NAN}) {
    LayerAttention a = Make("sliced_relu_bump", nlohmann::json::object(), shape);
    PARSE_OR_FAIL(st, SafetensorsBytes({{prefix + "sliced.bandwidth", DType::kF32, {2}, {0.7, bad}}}));
    absl::Status s = LoadAttentionTensors(*st, prefix, &a);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_NE(std::string(s.message()).find("self_attn.sliced.bandwidth"), std::string::npos) << s;
  }
  LayerAttention a = Make("sliced_relu_bump", nlohmann::json::object(), shape);
  PARSE_OR_FAIL(st, SafetensorsBytes({{prefix + "sliced.bandwidth", DType::kF32, {2}, {0.7, 1e-4}}}));
  EXPECT_TRUE(LoadAttentionTensors(*st, prefix, &a).ok());
}

TEST(SlicedTensorsTest, DocumentedNamesRoundTripThroughSafetensors) {
  const AttnShape shape{4, 2, 3, 2};
  const std::string prefix = "model.layers.5.self_attn.";
  for (const char* mechanism : {"sliced_relu", "sliced_relu_bump"}) {
    auto a = ParseLayerAttention({mechanism, nlohmann::json::object()}, shape);
    ASSERT_TRUE(a.ok());
    RandomInitAttentionTensors(testing::TestSeed(), &*a);
    std::vector<TensorToWrite> tensors;
    AppendAttentionTensors(*a, prefix, &tensors);
    std::vector<std::string> names;
    for (const TensorToWrite& t : tensors) names.push_back(t.name.substr(prefix.size()));
    std::sort(names.begin(), names.end());
    if (std::string(mechanism) == "sliced_relu") {
      EXPECT_EQ(names, (std::vector<std::string>{"sliced.k_fc1.bias", "sliced.k_fc1.weight", "sliced.k_fc2.bias",
                                                 "sliced.k_fc2.weight", "sliced.q_fc1.bias", "sliced.q_fc1.weight",
                                                 "sliced.q_fc2.bias", "sliced.q_fc2.weight"}));
    } else {
      EXPECT_EQ(names, (std::vector<std::string>{"sliced.bandwidth", "sliced.k_proj.bias", "sliced.k_proj.weight",
                                                 "sliced.q_proj.bias", "sliced.q_proj.weight"}));
    }
    PARSE_OR_FAIL(st, SafetensorsBytes(tensors));
    auto b = ParseLayerAttention({mechanism, nlohmann::json::object()}, shape);
    ASSERT_TRUE(b.ok());
    ASSERT_TRUE(LoadAttentionTensors(*st, prefix, &*b).ok());
    std::vector<TensorToWrite> again;
    AppendAttentionTensors(*b, prefix, &again);
    ASSERT_EQ(again.size(), tensors.size());
    for (size_t i = 0; i < again.size(); ++i) EXPECT_EQ(again[i].values, tensors[i].values) << again[i].name;
  }
}

}  // namespace
}  // namespace steady
