// window_dark beyond the shared conformance suite: the forms agree whatever the calls' boundaries (before,
// on and across the ring's wrap, chunks shorter and longer than W); with every gate 0 it is
// sliding_window and with W past the context it is softmax; each gate weighs only its own query
// head's dark part; with M = I, gate 1 and many features it approaches softmax over the whole
// context; the state's size; loading refuses a negative or NaN gate naming the tensor; "window" is
// required. (The trainer's PyTorch form against this one: tests/train/convert_smoke_test.py.)
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "base/check.h"
#include "model/mechanisms/attention.h"
#include "tests/testutil.h"

namespace steady {
namespace {

LayerAttention Make(const std::string& mechanism, nlohmann::json params, AttnShape shape, int chunk = 64) {
  params["chunk_size"] = chunk;
  auto a = ParseLayerAttention({mechanism, params}, shape);
  STEADY_CHECK(a.ok());
  RandomInitAttentionTensors(testing::TestSeed() ^ 0xda4c, &*a);
  return *a;
}

LayerAttention Hybrid(int w, AttnShape shape, int chunk = 64, int features = 32) {
  return Make("window_dark", {{"window", w}, {"features", features}}, shape, chunk);
}

struct Inputs {
  std::vector<double> q, k, v;
};

Inputs RandomInputs(const AttnShape& s, int n, uint64_t salt, double scale = 1.0) {
  std::mt19937_64 rng(testing::TestSeed() + salt);
  return {testing::RandomNormal<double>(size_t(n) * s.heads * s.head_dim, rng, scale),
          testing::RandomNormal<double>(size_t(n) * s.kv_heads * s.head_dim, rng, scale),
          testing::RandomNormal<double>(size_t(n) * s.kv_heads * s.value_dim, rng)};
}

// Tokens [0, n) from an empty state as calls of the given lengths (1: a decode step, more: a chunked
// prefill), repeated until n tokens are done.
template <typename T>
std::vector<double> RunCalls(const LayerAttention& a, const Inputs& in, int n, const std::vector<int>& calls) {
  const AttnShape& s = a.shape;
  const std::vector<T> q(in.q.begin(), in.q.end()), k(in.k.begin(), in.k.end()), v(in.v.begin(), in.v.end());
  std::vector<T> y(size_t(n) * s.heads * s.value_dim, T(NAN));
  std::vector<T> fixed(StateFloats(a), T(NAN));
  std::vector<T> growing;
  const StateView<T> st{fixed.data(), &growing};
  InitState<T>(a, st);
  for (int t = 0, c = 0; t < n; c = (c + 1) % int(calls.size())) {
    const int len = std::min(calls[c], n - t);
    AttentionForward<T>(a, len, q.data() + size_t(t) * s.heads * s.head_dim,
                        k.data() + size_t(t) * s.kv_heads * s.head_dim, v.data() + size_t(t) * s.kv_heads * s.value_dim,
                        st, y.data() + size_t(t) * s.heads * s.value_dim);
    t += len;
  }
  EXPECT_TRUE(growing.empty());
  return std::vector<double>(y.begin(), y.end());
}

std::vector<double> Parallel(const LayerAttention& a, const Inputs& in, int n) {
  std::vector<double> y(size_t(n) * a.shape.heads * a.shape.value_dim, NAN);
  AttentionParallel<double>(a, n, in.q.data(), in.k.data(), in.v.data(), y.data());
  return y;
}

void SetGates(LayerAttention* a, const std::vector<float>& gates) {
  std::get<WindowDarkParams>(a->params).gate = gates;
}

const AttnShape kShapes[] = {{1, 1, 8, 8}, {8, 2, 16, 9}};

TEST(WindowDarkTest, EveryCallPatternMatchesTheParallelForm) {
  for (const AttnShape& shape : kShapes) {
    for (int w : {1, 3, 20}) {
      for (int chunk : {1, 7, 64}) {
        LayerAttention a = Hybrid(w, shape, chunk);
        std::vector<float> gates(size_t(shape.heads));
        for (size_t h = 0; h < gates.size(); ++h) gates[h] = 0.25f + 0.5f * float(h);  // distinct per head
        SetGates(&a, gates);
        const int n = 3 * w + 29;
        SCOPED_TRACE(::testing::Message() << "heads " << shape.heads << "/" << shape.kv_heads << " W " << w
                                          << " chunk " << chunk);
        const Inputs in = RandomInputs(shape, n, uint64_t(w) * 100 + chunk);
        const std::vector<double> ref = Parallel(a, in, n);
        for (const std::vector<int>& calls : {std::vector<int>{1}, {n}, {3, 1, w + 2, 1}, {w}, {2 * w + 1, 1, 1}}) {
          EXPECT_LT(testing::MaxRelError(RunCalls<double>(a, in, n, calls), ref), 1e-11) << "calls " << calls[0];
          EXPECT_LT(testing::MaxRelError(RunCalls<float>(a, in, n, calls), ref), 2e-5) << "calls " << calls[0];
        }
      }
    }
  }
}

TEST(WindowDarkTest, GatesOffIsTheSlidingWindowAndALongWindowIsSoftmax) {
  const AttnShape shape{8, 2, 16, 9};
  const int n = 90;
  const Inputs in = RandomInputs(shape, n, 5);
  LayerAttention hybrid = Hybrid(12, shape, 16);
  SetGates(&hybrid, std::vector<float>(8, 0.0f));
  const std::vector<double> window = Parallel(Make("sliding_window", {{"window", 12}}, shape), in, n);
  EXPECT_LT(testing::MaxRelError(RunCalls<double>(hybrid, in, n, {1}), window), 1e-13);
  EXPECT_LT(testing::MaxRelError(RunCalls<double>(hybrid, in, n, {n}), window), 1e-13);
  const std::vector<double> softmax = Parallel(Make("softmax", {}, shape), in, n);
  EXPECT_LT(testing::MaxRelError(RunCalls<double>(Hybrid(n, shape, 16), in, n, {1}), softmax), 1e-13);
  // and the dark part changes the output once tokens leave the window
  EXPECT_GT(testing::MaxRelError(RunCalls<double>(Hybrid(12, shape, 16), in, n, {1}), window), 1e-3);
}

TEST(WindowDarkTest, EachGateWeighsOnlyItsOwnHead) {
  const AttnShape shape{4, 2, 8, 8};
  const int n = 40;
  const Inputs in = RandomInputs(shape, n, 9);
  LayerAttention a = Hybrid(5, shape);
  SetGates(&a, {1, 1, 1, 1});
  const std::vector<double> base = RunCalls<double>(a, in, n, {1});
  SetGates(&a, {1, 3, 1, 1});
  const std::vector<double> changed = RunCalls<double>(a, in, n, {1});
  for (int t = 0; t < n; ++t) {
    for (int h = 0; h < 4; ++h) {
      double diff = 0;
      for (int d = 0; d < 8; ++d) diff = std::max(diff, std::abs(base[(t * 4 + h) * 8 + d] - changed[(t * 4 + h) * 8 + d]));
      if (h != 1 || t < 5) EXPECT_EQ(diff, 0) << "t " << t << " head " << h;  // nothing evicted before t = 5
      if (h == 1 && t >= 5) EXPECT_GT(diff, 0) << "t " << t;
    }
  }
}

// With M = I the features estimate exp(s q.k) without bias, so with many of them and gate 1 the hybrid
// approaches softmax over the whole context, much closer than the window alone.
TEST(WindowDarkTest, WithManyFeaturesApproachesSoftmax) {
  const AttnShape shape{2, 2, 8, 8};
  const int n = 60;
  const Inputs in = RandomInputs(shape, n, 11, 0.5);
  const std::vector<double> softmax = Parallel(Make("softmax", {}, shape), in, n);
  const std::vector<double> window = Parallel(Make("sliding_window", {{"window", 8}}, shape), in, n);
  const std::vector<double> hybrid = RunCalls<double>(Hybrid(8, shape, 64, 8192), in, n, {1});
  const double err_hybrid = testing::MaxRelError(hybrid, softmax), err_window = testing::MaxRelError(window, softmax);
  EXPECT_LT(err_hybrid, 0.2 * err_window) << "hybrid " << err_hybrid << ", window alone " << err_window;
}

TEST(WindowDarkTest, StateIsTheRingPlusDarkSumsAndWindowIsRequired) {
  const AttnShape shape{8, 2, 16, 9};
  const LayerAttention a = Hybrid(10, shape, 64, 32);
  // ring 10 x 2 x (16 + 9) + cursor 2, then per kv head (32 x 10 sums, Kahan doubled) + c
  EXPECT_EQ(StateFloats(a), size_t(10 * 2 * 25 + 2 + 2 * (2 * 32 * 10 + 1)));
  auto missing = ParseLayerAttention({"window_dark", {{"features", 8}}}, shape);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(std::string(missing.status().message()).find("attention.window"), std::string::npos) << missing.status();
  auto zero = ParseLayerAttention({"window_dark", {{"window", 0}}}, shape);
  ASSERT_FALSE(zero.ok());
  auto delta = ParseLayerAttention({"window_dark", {{"window", 4}, {"delta", 1e-6}}}, shape);
  ASSERT_FALSE(delta.ok());  // no guard, so no delta: a typo-like key is refused
  EXPECT_NE(std::string(delta.status().message()).find("delta"), std::string::npos);
}

TEST(WindowDarkLoadTest, RoundTripsAndRefusesABadGateNamingTheTensor) {
  const AttnShape shape{4, 2, 8, 8};
  LayerAttention a = Hybrid(6, shape, 64, 12);
  SetGates(&a, {0.5f, 1.0f, 0.0f, 2.0f});
  std::vector<TensorToWrite> tensors;
  AppendAttentionTensors(a, "model.layers.2.self_attn.", &tensors);
  ASSERT_EQ(tensors.size(), 3u);
  EXPECT_EQ(tensors[2].name, "model.layers.2.self_attn.dark.gate");
  const auto load = [&](const std::vector<TensorToWrite>& ts) -> absl::StatusOr<LayerAttention> {
    const std::string path = testing::MakeTempDir("window_dark_load") + "/attn.safetensors";
    if (absl::Status s = WriteSafeTensors(path, ts); !s.ok()) return s;
    auto st = SafeTensors::Open(path);
    if (!st.ok()) return st.status();
    auto fresh = ParseLayerAttention({"window_dark", {{"window", 6}, {"features", 12}}}, shape);
    STEADY_CHECK(fresh.ok());
    if (absl::Status s = LoadAttentionTensors(*st, "model.layers.2.self_attn.", &*fresh); !s.ok()) return s;
    return *fresh;
  };
  auto loaded = load(tensors);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(std::get<WindowDarkParams>(loaded->params).gate, (std::vector<float>{0.5f, 1.0f, 0.0f, 2.0f}));
  const Inputs in = RandomInputs(shape, 30, 3);
  EXPECT_EQ(RunCalls<double>(*loaded, in, 30, {1}), RunCalls<double>(a, in, 30, {1}));
  for (double bad : {-0.5, double(NAN)}) {
    std::vector<TensorToWrite> ts = tensors;
    ts[2].values[1] = bad;
    auto refused = load(ts);
    ASSERT_FALSE(refused.ok());
    // (NaN is already refused by the safetensors reader, also naming the tensor)
    EXPECT_NE(std::string(refused.status().message()).find("model.layers.2.self_attn.dark.gate"), std::string::npos)
        << refused.status();
  }
  std::vector<TensorToWrite> no_gate(tensors.begin(), tensors.begin() + 2);
  auto missing = load(no_gate);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(std::string(missing.status().message()).find("dark.gate"), std::string::npos) << missing.status();
}

}  // namespace
}  // namespace steady
