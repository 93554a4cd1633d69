// Conformance of every attention mechanism through the shared table (model/mechanisms/attention.h):
// the recurrent decode path, the chunked prefill path and the parallel reference compute the same
// function; fixed state does not grow with context; GQA state is shared within a group.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "model/mechanisms/attention.h"
#include "tests/testutil.h"

namespace steady {
namespace {

struct MechanismCase {
  std::string name;       // test name
  std::string mechanism;  // config name
  nlohmann::json params;
  bool constant_state;    // fixed-size state only (no growing part)
  double input_scale;     // stddev of q and k entries (keeps Taylor logits bounded)
  // Tolerance (max error relative to the output's scale) of float paths vs the fp64 parallel
  // reference. fp32 has ~6e-8 resolution; feature maps with exp() and sums over ~100 tokens lose a
  // few more digits, so 1e-4 unless a case says otherwise.
  double float_tol = 1e-4;
  // The recurrent state approximates the parallel reference (a bucketed decoder): fp64 recurrent and
  // chunked are then held to float_tol against the reference, and to 1e-9 against each other.
  bool approximate = false;
};

void PrintTo(const MechanismCase& c, std::ostream* os) { *os << c.name; }

std::vector<MechanismCase> Cases() {
  return {
      {"softmax", "softmax", nlohmann::json::object(), false, 1.0},
      {"taylor_p2", "taylor", {{"order", 2}}, true, 0.5},
      {"taylor_p3", "taylor", {{"order", 3}}, true, 0.5},
      {"taylor_p4", "taylor", {{"order", 4}}, true, 0.5},
      {"taylor_p3_plain", "taylor", {{"order", 3}, {"accumulation", "plain"}}, true, 0.5},
      {"slay", "slay", nlohmann::json::object(), true, 1.0},
      {"slay_r3", "slay", {{"nodes", 3}, {"anchors", 4}, {"features", 8}}, true, 1.0},
      {"dark", "dark", {{"features", 64}}, true, 1.0},
      {"dark_lowrank", "dark", {{"features", 32}, {"rank", 4}}, true, 1.0},
      {"sliced_relu", "sliced_relu", {{"decoder", "exact"}}, false, 1.0},
      // Bucketed decoders, 64 bins: max error up to 2.1e-2 over 61 seeds (docs/mechanisms/sliced_relu.md).
      {"sliced_relu_bucketed", "sliced_relu", {{"decoder", "bucketed"}}, true, 1.0, 5e-2, true},
      {"sliced_relu_bump", "sliced_relu_bump", nlohmann::json::object(), true, 1.0, 5e-2, true},
      {"sliced_relu_bump_exact", "sliced_relu_bump", {{"decoder", "exact"}}, false, 1.0},
      // Windows of one token, of fewer than the chunk (16) and the tests' contexts (20..100), of one
      // longer than every context here (then it is softmax).
      {"sliding_window_w1", "sliding_window", {{"window", 1}}, true, 1.0},
      {"sliding_window_w5", "sliding_window", {{"window", 5}}, true, 1.0},
      {"sliding_window_w37", "sliding_window", {{"window", 37}}, true, 1.0},
      {"sliding_window_w200", "sliding_window", {{"window", 200}}, true, 1.0},
      // window + dark state over the evicted keys: a window inside one chunk (16), one across chunks,
      // one longer than every context (then softmax), and a low-rank M.
      {"window_dark_w5", "window_dark", {{"window", 5}, {"features", 32}}, true, 1.0},
      {"window_dark_w37", "window_dark", {{"window", 37}, {"features", 24}}, true, 1.0},
      {"window_dark_w200", "window_dark", {{"window", 200}, {"features", 16}}, true, 1.0},
      {"window_dark_w1_lowrank", "window_dark", {{"window", 1}, {"features", 32}, {"rank", 4}}, true, 1.0},
  };
}

class MechanismTest : public ::testing::TestWithParam<MechanismCase> {
 protected:
  static constexpr int kHeads = 4, kKvHeads = 2, kDim = 8, kValueDim = 6;

  absl::StatusOr<LayerAttention> Make(int heads = kHeads, int kv_heads = kKvHeads) {
    AttnShape shape{heads, kv_heads, kDim, kValueDim};
    AttentionConfig config{GetParam().mechanism, GetParam().params};
    auto a = ParseLayerAttention(config, shape);
    if (a.ok()) RandomInitAttentionTensors(testing::TestSeed() ^ 0x5eed, &*a);
    return a;
  }

  struct Inputs {
    std::vector<double> q, k, v;
  };
  Inputs RandomInputs(const LayerAttention& a, int n, uint64_t salt) {
    std::mt19937_64 rng(testing::TestSeed() + salt);
    const AttnShape& s = a.shape;
    return {testing::RandomNormal<double>(size_t(n) * s.heads * s.head_dim, rng, GetParam().input_scale),
            testing::RandomNormal<double>(size_t(n) * s.kv_heads * s.head_dim, rng, GetParam().input_scale),
            testing::RandomNormal<double>(size_t(n) * s.kv_heads * s.value_dim, rng)};
  }

  template <typename T>
  static std::vector<T> Cast(const std::vector<double>& x) {
    return std::vector<T>(x.begin(), x.end());
  }

  // Runs `form` ("recurrent" / "chunked" / "split") in precision T from an empty state.
  template <typename T>
  std::vector<double> Run(const LayerAttention& a, const Inputs& in, int n, const std::string& form) {
    const AttnShape& s = a.shape;
    std::vector<T> q = Cast<T>(in.q), k = Cast<T>(in.k), v = Cast<T>(in.v);
    std::vector<T> y(size_t(n) * s.heads * s.value_dim, T(NAN));
    std::vector<T> fixed(StateFloats(a), T(NAN));
    std::vector<T> growing;
    StateView<T> st{fixed.data(), &growing};
    InitState<T>(a, st);
    if (form == "recurrent") {
      AttentionRecurrent<T>(a, n, q.data(), k.data(), v.data(), st, y.data());
    } else if (form == "chunked") {
      AttentionChunked<T>(a, n, q.data(), k.data(), v.data(), st, y.data());
    } else {  // "split": two prefill calls carrying state, then decode steps through AttentionForward
      const int first = n / 3, second = n / 2;
      AttentionForward<T>(a, first, q.data(), k.data(), v.data(), st, y.data());
      AttentionForward<T>(a, second - first, q.data() + first * s.heads * s.head_dim,
                          k.data() + first * s.kv_heads * s.head_dim, v.data() + first * s.kv_heads * s.value_dim,
                          st, y.data() + first * s.heads * s.value_dim);
      for (int t = second; t < n; ++t) {
        AttentionForward<T>(a, 1, q.data() + t * s.heads * s.head_dim, k.data() + t * s.kv_heads * s.head_dim,
                            v.data() + t * s.kv_heads * s.value_dim, st, y.data() + t * s.heads * s.value_dim);
      }
    }
    return std::vector<double>(y.begin(), y.end());
  }

  std::vector<double> Reference(const LayerAttention& a, const Inputs& in, int n) {
    std::vector<double> y(size_t(n) * a.shape.heads * a.shape.value_dim, NAN);
    AttentionParallel<double>(a, n, in.q.data(), in.k.data(), in.v.data(), y.data());
    return y;
  }
};

TEST_P(MechanismTest, RecurrentChunkedAndParallelAgree) {
  auto a = Make();
  ASSERT_TRUE(a.ok()) << a.status();
  a->chunk_size = 16;
  const int n = 100;  // not a multiple of the chunk size
  const Inputs in = RandomInputs(*a, n, 1);
  const std::vector<double> ref = Reference(*a, in, n);
  for (double x : ref) ASSERT_TRUE(std::isfinite(x));
  // fp64 recurrence vs fp64 parallel: the same arithmetic reordered, so ~1e-12 (1e-9 allows for
  // mechanisms whose features pass through exp()).
  const std::vector<double> recurrent = Run<double>(*a, in, n, "recurrent");
  const double fp64_tol = GetParam().approximate ? GetParam().float_tol : 1e-9;
  EXPECT_LT(testing::MaxRelError(recurrent, ref), fp64_tol);
  EXPECT_LT(testing::MaxRelError(Run<double>(*a, in, n, "chunked"), ref), fp64_tol);
  // Approximate or not, the decode and prefill paths compute one function.
  EXPECT_LT(testing::MaxRelError(Run<double>(*a, in, n, "chunked"), recurrent), 1e-9);
  EXPECT_LT(testing::MaxRelError(Run<double>(*a, in, n, "split"), recurrent), 1e-9);
  const double tol = GetParam().float_tol;
  EXPECT_LT(testing::MaxRelError(Run<float>(*a, in, n, "recurrent"), ref), tol);
  EXPECT_LT(testing::MaxRelError(Run<float>(*a, in, n, "chunked"), ref), tol);
  EXPECT_LT(testing::MaxRelError(Run<float>(*a, in, n, "split"), ref), tol);
}

// Steps (speculative verification and its rollback, model/decoder/verify.cc) is n Steps in turn bit
// for bit: the rows' outputs and the state they leave, from a state some tokens in, for fp32 and fp64.
template <typename T>
void ExpectStepsEqualStepInTurn(const LayerAttention& a, const std::vector<double>& q64,
                                const std::vector<double>& k64, const std::vector<double>& v64, int before) {
  const AttnShape& s = a.shape;
  const std::vector<T> q(q64.begin(), q64.end()), k(k64.begin(), k64.end()), v(v64.begin(), v64.end());
  const int total = int(k.size()) / (s.kv_heads * s.head_dim);
  const size_t q_row = size_t(s.heads) * s.head_dim, kv_row = size_t(s.kv_heads) * s.head_dim,
               v_row = size_t(s.kv_heads) * s.value_dim, y_row = size_t(s.heads) * s.value_dim;
  std::vector<T> y_before(size_t(before) * y_row);
  for (int n = 1; n <= total - before; ++n) {
    std::vector<T> fixed[2], growing[2], y[2];
    for (int form = 0; form < 2; ++form) {
      fixed[form].assign(StateFloats(a), T(NAN));
      StateView<T> st{fixed[form].data(), &growing[form]};
      InitState<T>(a, st);
      AttentionRecurrent<T>(a, before, q.data(), k.data(), v.data(), st, y_before.data());
      y[form].assign(size_t(n) * y_row, T(NAN));
      const T *qn = q.data() + before * q_row, *kn = k.data() + before * kv_row, *vn = v.data() + before * v_row;
      if (form == 0) {
        AttentionRecurrent<T>(a, n, qn, kn, vn, st, y[form].data());
      } else {
        AttentionSteps<T>(a, n, qn, kn, vn, st, y[form].data());
      }
    }
    const std::string where = std::string(sizeof(T) == 4 ? "fp32" : "fp64") + " heads " + std::to_string(s.heads) +
                              " kv_heads " + std::to_string(s.kv_heads) + " dv " + std::to_string(s.value_dim) +
                              (a.accumulation == Accumulation::kKahan ? " kahan" : " plain") + " before " +
                              std::to_string(before) + " n " + std::to_string(n);
    EXPECT_EQ(0, std::memcmp(y[0].data(), y[1].data(), y[0].size() * sizeof(T))) << where;
    EXPECT_TRUE(fixed[0].empty() || std::memcmp(fixed[0].data(), fixed[1].data(), fixed[0].size() * sizeof(T)) == 0)
        << where;
    EXPECT_EQ(growing[0], growing[1]) << where;
  }
}

TEST_P(MechanismTest, StepsAreStepInTurnBitForBit) {
  auto a = Make();
  ASSERT_TRUE(a.ok()) << a.status();
  const int before = 23, n = 9;
  const Inputs in = RandomInputs(*a, before + n, 5);
  ExpectStepsEqualStepInTurn<float>(*a, in.q, in.k, in.v, before);
  ExpectStepsEqualStepInTurn<double>(*a, in.q, in.k, in.v, before);
}

// dark's running max c, where Step rescales the whole state, as it stands after each key of `k`
// for kv head g (fp64 logits: they only need to show where c grows).
std::vector<double> DarkRunningMax(const LayerAttention& a, const std::vector<double>& k, int g) {
  const DarkParams& p = std::get<DarkParams>(a.params);
  const AttnShape& s = a.shape;
  std::vector<double> logits(p.features), c_after;
  double c = -INFINITY;
  for (size_t t = 0; t * s.kv_heads * s.head_dim < k.size(); ++t) {
    DarkLogits<double>(p, s, g, 1, k.data() + (t * s.kv_heads + g) * s.head_dim, logits.data());
    c = std::max(c, *std::max_element(logits.begin(), logits.end()));
    c_after.push_back(c);
  }
  return c_after;
}

// Keys of rows `rows` (ascending) made dark's largest logits so far, each above the one before, so
// that c grows there: for the feature f with the largest reachable logit, x = lambda w_f reaches
// max_lambda l_f = A, and the earlier rows take 0.9 and 0.95 of the best lambda (0.99 A, 0.9975 A).
void RaiseDarkMaxAt(const LayerAttention& a, const std::vector<int>& rows, std::vector<double>* k) {
  const DarkParams& p = std::get<DarkParams>(a.params);
  const AttnShape& s = a.shape;
  std::vector<double> logits(p.features), x(s.head_dim);
  for (int g = 0; g < s.kv_heads; ++g) {
    double best = -INFINITY;
    std::vector<double> best_x;
    for (int f = 0; f < p.features; ++f) {
      for (double lambda = 0.05; lambda < 4; lambda *= 1.05) {
        for (int d = 0; d < s.head_dim; ++d) x[d] = lambda * p.W[(size_t(g) * p.features + f) * s.head_dim + d];
        DarkLogits<double>(p, s, g, 1, x.data(), logits.data());
        if (logits[f] > best) best = logits[f], best_x = x;
      }
    }
    for (size_t i = 0; i < rows.size(); ++i) {
      const double shrink = i + 1 == rows.size() ? 1.0 : i + 2 == rows.size() ? 0.95 : 0.9;
      for (int d = 0; d < s.head_dim; ++d) (*k)[(size_t(rows[i]) * s.kv_heads + g) * s.head_dim + d] = shrink * best_x[d];
    }
  }
}

// The same over GQA groups of 1, 2 and 4, a value width of SIMD lanes plus a tail, both
// accumulations, every n in 1..9, from an empty state and from 23 tokens in. dark's keys raise its
// running max inside the rows (asserted), so its rescale of the state meets the row-by-row order.
TEST_P(MechanismTest, StepsAreStepInTurnOverGroupsWidthsAndAccumulations) {
  const bool dark = GetParam().mechanism == "dark";
  for (const auto& [heads, kv_heads] : {std::pair{2, 2}, std::pair{4, 2}, std::pair{8, 2}}) {
    for (int value_dim : {6, 35}) {
      for (const char* accumulation : {"kahan", "plain"}) {
        AttnShape shape{heads, kv_heads, kDim, value_dim};
        nlohmann::json params = GetParam().params;
        params["accumulation"] = accumulation;
        auto a = ParseLayerAttention({GetParam().mechanism, params}, shape);
        ASSERT_TRUE(a.ok()) << a.status();
        RandomInitAttentionTensors(testing::TestSeed() ^ 0x5eed, &*a);
        for (int before : {0, 23}) {
          const int n = 9;
          Inputs in = RandomInputs(*a, before + n, 6);
          if (dark) {
            RaiseDarkMaxAt(*a, {before + 2, before + 5, before + 6}, &in.k);
            for (int g = 0; g < kv_heads; ++g) {
              const std::vector<double> c = DarkRunningMax(*a, in.k, g);
              for (int row : {before + 2, before + 5, before + 6}) {
                ASSERT_GT(c[row], row > 0 ? c[row - 1] : -INFINITY) << "kv head " << g << " row " << row;
              }
            }
          }
          ExpectStepsEqualStepInTurn<float>(*a, in.q, in.k, in.v, before);
          ExpectStepsEqualStepInTurn<double>(*a, in.q, in.k, in.v, before);
        }
      }
    }
  }
}

TEST_P(MechanismTest, ChunkSizeDoesNotChangeResult) {
  auto a = Make();
  ASSERT_TRUE(a.ok()) << a.status();
  const int n = 70;
  const Inputs in = RandomInputs(*a, n, 2);
  a->chunk_size = 1;
  const std::vector<double> one = Run<double>(*a, in, n, "chunked");
  for (int chunk : {7, 32, 128}) {
    a->chunk_size = chunk;
    EXPECT_LT(testing::MaxRelError(Run<double>(*a, in, n, "chunked"), one), 1e-9) << "chunk " << chunk;
  }
}

TEST_P(MechanismTest, FixedStateDoesNotGrowWithContext) {
  auto a = Make();
  ASSERT_TRUE(a.ok()) << a.status();
  const size_t floats = StateFloats(*a);
  std::vector<float> fixed(floats);
  std::vector<float> growing;
  StateView<float> st{fixed.data(), &growing};
  InitState<float>(*a, st);
  const Inputs in = RandomInputs(*a, 1, 3);
  std::vector<float> q = Cast<float>(in.q), k = Cast<float>(in.k), v = Cast<float>(in.v);
  std::vector<float> y(a->shape.heads * a->shape.value_dim);
  size_t growing_at_1 = 0;
  // 100,000 tokens for constant-state mechanisms; the KV-cache baseline is quadratic, so fewer.
  const int steps = GetParam().constant_state ? 100000 : 3000;
  for (int t = 1; t <= steps; ++t) {
    AttentionForward<float>(*a, 1, q.data(), k.data(), v.data(), st, y.data());
    if (t == 1) growing_at_1 = growing.size();
  }
  EXPECT_EQ(StateFloats(*a), floats);
  for (float x : y) EXPECT_TRUE(std::isfinite(x));
  if (GetParam().constant_state) {
    EXPECT_GT(floats, 0u);
    EXPECT_EQ(growing.size(), growing_at_1) << "state grew between t = 1 and t = " << steps;
  } else {
    EXPECT_GE(growing.size(), growing_at_1 * steps);  // the baseline's cache grows with t
  }
}

TEST_P(MechanismTest, GqaStateIsPerKvHeadAndSharedWithinGroup) {
  auto grouped = Make(4, 2);
  auto mha = Make(2, 2);
  ASSERT_TRUE(grouped.ok() && mha.ok());
  if (GetParam().mechanism != "sliced_relu" && GetParam().mechanism != "sliced_relu_bump") {
    // The state is per kv head: doubling the query heads of a group adds nothing. (The sliced
    // mechanisms' projection mixes all heads, so their per-head score tables differ by design.)
    EXPECT_EQ(StateFloats(*grouped), StateFloats(*mha));
  }
  // Query heads 0 and 1 share kv head 0: with the same query they read the same state.
  const int n = 20;
  Inputs in = RandomInputs(*grouped, n, 4);
  const AttnShape& s = grouped->shape;
  for (int t = 0; t < n; ++t) {
    for (int d = 0; d < s.head_dim; ++d) in.q[(t * s.heads + 1) * s.head_dim + d] = in.q[(t * s.heads + 0) * s.head_dim + d];
  }
  if (GetParam().mechanism == "sliced_relu" || GetParam().mechanism == "sliced_relu_bump") return;
  const std::vector<double> y = Run<double>(*grouped, in, n, "recurrent");
  for (int t = 0; t < n; ++t) {
    for (int d = 0; d < s.value_dim; ++d) {
      EXPECT_NEAR(y[(t * s.heads + 0) * s.value_dim + d], y[(t * s.heads + 1) * s.value_dim + d], 1e-12);
    }
  }
}

TEST_P(MechanismTest, DescribeRoundTripsThroughParse) {
  auto a = Make();
  ASSERT_TRUE(a.ok()) << a.status();
  nlohmann::json d = DescribeAttention(*a);
  AttentionConfig again{d["mechanism"].get<std::string>(), d};
  again.params.erase("mechanism");
  auto b = ParseLayerAttention(again, a->shape);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(DescribeAttention(*b), d);
  EXPECT_EQ(StateFloats(*b), StateFloats(*a));
}

INSTANTIATE_TEST_SUITE_P(All, MechanismTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

// The window mechanisms' Steps at a row of 1 KB, where the SIMD kernel chunks a window 256 rows at a
// time: windows of two and three chunks, the ring full and its cursor part way round, on three compute
// threads (the rows' work is past the threshold for handing it out). Each verify row's window then
// begins at its own row and its chunks at their own edges, and the rows are read by several tasks.
TEST(WindowStepsTest, StepsAreStepInTurnOverLongWindowsAndThreads) {
  const AttnShape shape{8, 2, 64, 64};
  cpu::SetComputeThreads(3);
  for (const auto& [mechanism, window] : {std::pair{"sliding_window", 300}, std::pair{"sliding_window", 520},
                                          std::pair{"window_dark", 300}}) {
    nlohmann::json params = {{"window", window}};
    auto a = ParseLayerAttention({mechanism, params}, shape);
    ASSERT_TRUE(a.ok()) << a.status();
    RandomInitAttentionTensors(testing::TestSeed() ^ 0x5eed, &*a);
    const int before = window + 37, n = 9;
    std::mt19937_64 rng(testing::TestSeed() + 7);
    const std::vector<double> q = testing::RandomNormal<double>(size_t(before + n) * shape.heads * shape.head_dim, rng, 0.3);
    const std::vector<double> k = testing::RandomNormal<double>(size_t(before + n) * shape.kv_heads * shape.head_dim, rng, 0.3);
    const std::vector<double> v = testing::RandomNormal<double>(size_t(before + n) * shape.kv_heads * shape.value_dim, rng);
    SCOPED_TRACE(std::string(mechanism) + " window " + std::to_string(window));
    ExpectStepsEqualStepInTurn<float>(*a, q, k, v, before);
  }
  cpu::SetComputeThreads(0);
}

TEST(MechanismRegistryTest, UnknownMechanismAndBadParamsAreRefused) {
  AttnShape shape{2, 2, 4, 4};
  auto a = ParseLayerAttention({"flash", {}}, shape);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(std::string(a.status().message()).find("flash"), std::string::npos);
  auto b = ParseLayerAttention({"taylor", {{"order", 0}}}, shape);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(std::string(b.status().message()).find("order"), std::string::npos);
  auto c = ParseLayerAttention({"softmax", {{"accumulation", "fp16"}}}, shape);
  ASSERT_FALSE(c.ok());
  auto d = ParseLayerAttention({"softmax", {{"scale", NAN}}}, shape);
  ASSERT_FALSE(d.ok());
  for (const std::string& name : MechanismNames()) {
    nlohmann::json params = {{"featurez", 64}};
    if (name == "sliding_window" || name == "window_dark") params["window"] = 8;  // required: checked first
    auto typo = ParseLayerAttention({name, params}, shape);
    ASSERT_FALSE(typo.ok()) << name;
    EXPECT_NE(std::string(typo.status().message()).find("featurez"), std::string::npos) << typo.status();
  }
}

}  // namespace
}  // namespace steady
