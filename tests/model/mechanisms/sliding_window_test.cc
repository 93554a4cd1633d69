// sliding_window beyond the shared conformance suite: recurrent == chunked == the masked reference at
// contexts below, at and well beyond W (W = 1 included, GQA, prefill chunks longer and shorter than W
// that straddle the ring's wrap); plain softmax, bit for bit, while the context fits the window;
// softmax over the last W tokens, bit for bit, after it; the state's size and its cursor read back
// from arbitrary floats; the parameter's errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "model/mechanisms/attention.h"
#include "tests/testutil.h"

namespace steady {
namespace {

LayerAttention Make(const std::string& mechanism, nlohmann::json params, AttnShape shape, int chunk = 64) {
  params["chunk_size"] = chunk;
  auto a = ParseLayerAttention({mechanism, params}, shape);
  EXPECT_TRUE(a.ok()) << a.status();
  return a.ok() ? *a : LayerAttention{};
}

LayerAttention Window(int w, AttnShape shape, int chunk = 64) {
  return Make("sliding_window", {{"window", w}}, shape, chunk);
}

struct Inputs {
  std::vector<double> q, k, v;
};

Inputs RandomInputs(const AttnShape& s, int n, uint64_t salt) {
  std::mt19937_64 rng(testing::TestSeed() + salt);
  return {testing::RandomNormal<double>(size_t(n) * s.heads * s.head_dim, rng),
          testing::RandomNormal<double>(size_t(n) * s.kv_heads * s.head_dim, rng),
          testing::RandomNormal<double>(size_t(n) * s.kv_heads * s.value_dim, rng)};
}

template <typename T>
std::vector<T> Cast(const std::vector<double>& x) {
  return std::vector<T>(x.begin(), x.end());
}

// Runs tokens [0, n) from an empty state as calls of the given lengths through AttentionForward (1:
// a decode step, more: a chunked prefill), repeated until n tokens are done.
template <typename T>
std::vector<T> RunCalls(const LayerAttention& a, const Inputs& in, int n, const std::vector<int>& calls) {
  const AttnShape& s = a.shape;
  const std::vector<T> q = Cast<T>(in.q), k = Cast<T>(in.k), v = Cast<T>(in.v);
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
  return y;
}

template <typename T>
std::vector<double> ToDouble(const std::vector<T>& x) {
  return std::vector<double>(x.begin(), x.end());
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Shapes: one head; GQA groups of 4 (head_dim ending inside a SIMD vector); three kv heads of 2.
const AttnShape kShapes[] = {{1, 1, 8, 8}, {8, 2, 17, 9}, {6, 3, 16, 16}};

// The decode path (the ring's two spans through the SIMD kernel) and prefill calls of every length
// (chunks of a.chunk_size inside them) against the masked reference, at contexts below, at and past
// W: in fp64 to rounding, and in fp32 the same bits whichever way the tokens arrive, because every
// path reads the same rows in the same order through the same kernel.
TEST(SlidingWindowTest, EveryFormMatchesTheMaskedReference) {
  for (const AttnShape& shape : kShapes) {
    for (int w : {1, 2, 7, 64, 130}) {
      for (int chunk : {1, 5, 64}) {
        const LayerAttention a = Window(w, shape, chunk);
        for (int n : {std::max(1, w - 1), w, w + 1, 3 * w + 11}) {
          SCOPED_TRACE(::testing::Message() << "heads " << shape.heads << "/" << shape.kv_heads << " W " << w
                                            << " chunk " << chunk << " n " << n);
          const Inputs in = RandomInputs(shape, n, uint64_t(w) * 1000 + n);
          std::vector<double> ref(size_t(n) * shape.heads * shape.value_dim, NAN);
          AttentionParallel<double>(a, n, in.q.data(), in.k.data(), in.v.data(), ref.data());
          EXPECT_LT(testing::MaxRelError(RunCalls<double>(a, in, n, {1}), ref), 1e-12);
          EXPECT_LT(testing::MaxRelError(RunCalls<double>(a, in, n, {n}), ref), 1e-12);
          const std::vector<float> recurrent = RunCalls<float>(a, in, n, {1});
          // fp32 against fp64: a softmax over at most 130 keys of unit-scale logits, rounding only.
          EXPECT_LT(testing::MaxRelError(ToDouble(recurrent), ref), 2e-6);
          // Whole, and in calls whose boundaries fall before, on and across the ring's wrap.
          for (const std::vector<int>& calls : {std::vector<int>{n}, {3, 1, w + 2, 1}, {w}, {2 * w + 1, 1, 1}}) {
            EXPECT_TRUE(SameBits(RunCalls<float>(a, in, n, calls), recurrent)) << "calls " << calls[0] << ", ...";
          }
        }
      }
    }
  }
}

// While the context fits the window, sliding_window is softmax: the same rows, in the same order,
// through the same code (the SIMD kernel in fp32, the plain loop in fp64), so the same bits.
TEST(SlidingWindowTest, IsSoftmaxBitForBitWhileTheContextFits) {
  for (const AttnShape& shape : kShapes) {
    const int w = 40;
    const LayerAttention window = Window(w, shape, 16), softmax = Make("softmax", {}, shape, 16);
    const Inputs in = RandomInputs(shape, w, 7);
    for (const std::vector<int>& calls : {std::vector<int>{1}, {w}, {9, 1}}) {
      EXPECT_TRUE(SameBits(RunCalls<float>(window, in, w, calls), [&] {
        const AttnShape& s = softmax.shape;
        const std::vector<float> q = Cast<float>(in.q), k = Cast<float>(in.k), v = Cast<float>(in.v);
        std::vector<float> y(size_t(w) * s.heads * s.value_dim), growing;
        InitState<float>(softmax, StateView<float>{nullptr, &growing});
        AttentionRecurrent<float>(softmax, w, q.data(), k.data(), v.data(), StateView<float>{nullptr, &growing}, y.data());
        return y;
      }()));
    }
    std::vector<double> soft(size_t(w) * shape.heads * shape.value_dim), growing;
    AttentionRecurrent<double>(softmax, w, in.q.data(), in.k.data(), in.v.data(), StateView<double>{nullptr, &growing},
                               soft.data());
    const std::vector<double> win = RunCalls<double>(window, in, w, {1});
    EXPECT_EQ(0, std::memcmp(win.data(), soft.data(), win.size() * sizeof(double)));
  }
}

// Past the window, token t's output is a fresh softmax session's last output over tokens
// (t - W, t] alone, to the bit (the ring is read oldest first, wherever its cursor stands), and it
// differs from softmax over the whole context.
TEST(SlidingWindowTest, PastTheWindowIsSoftmaxOverTheLastWTokens) {
  const AttnShape shape{8, 2, 17, 9};
  const int w = 13, n = 60;
  const LayerAttention window = Window(w, shape), softmax = Make("softmax", {}, shape);
  const Inputs in = RandomInputs(shape, n, 9);
  const std::vector<float> y = RunCalls<float>(window, in, n, {1});
  const std::vector<float> q = Cast<float>(in.q), k = Cast<float>(in.k), v = Cast<float>(in.v);
  const int out = shape.heads * shape.value_dim;
  for (int t = w; t < n; t += 5) {
    const int first = t - w + 1;
    std::vector<float> fresh(size_t(w) * out), growing;
    AttentionRecurrent<float>(softmax, w, q.data() + size_t(first) * shape.heads * shape.head_dim,
                              k.data() + size_t(first) * shape.kv_heads * shape.head_dim,
                              v.data() + size_t(first) * shape.kv_heads * shape.value_dim,
                              StateView<float>{nullptr, &growing}, fresh.data());
    EXPECT_EQ(0, std::memcmp(fresh.data() + size_t(w - 1) * out, y.data() + size_t(t) * out, out * sizeof(float)))
        << "t " << t;
  }
  std::vector<float> whole(size_t(n) * out), growing;
  AttentionRecurrent<float>(softmax, n, q.data(), k.data(), v.data(), StateView<float>{nullptr, &growing}, whole.data());
  EXPECT_GT(testing::MaxRelError(ToDouble(std::vector<float>(y.end() - out, y.end())),
                                 ToDouble(std::vector<float>(whole.end() - out, whole.end()))),
            1e-3);
}

// W = 1: each token sees only itself, so every query head returns its kv head's value.
TEST(SlidingWindowTest, WindowOfOneReturnsTheTokensOwnValue) {
  const AttnShape shape{4, 2, 8, 6};
  const Inputs in = RandomInputs(shape, 9, 3);
  const std::vector<double> y = RunCalls<double>(Window(1, shape), in, 9, {1, 4});
  for (int t = 0; t < 9; ++t) {
    for (int h = 0; h < shape.heads; ++h) {
      for (int e = 0; e < shape.value_dim; ++e) {
        EXPECT_EQ(y[(size_t(t) * shape.heads + h) * shape.value_dim + e],
                  in.v[(size_t(t) * shape.kv_heads + h / shape.group()) * shape.value_dim + e]);
      }
    }
  }
}

// W rows of every kv head's key and value plus the two-float cursor, at any position; GQA adds
// nothing (the ring is per kv head).
TEST(SlidingWindowTest, StateIsTheRingAndItsCursor) {
  const AttnShape shape{8, 2, 16, 12};
  for (int w : {1, 100, 4096}) {
    EXPECT_EQ(StateFloats(Window(w, shape)), size_t(w) * 2 * (16 + 12) + 2);
    EXPECT_EQ(StateFloats(Window(w, shape)), StateFloats(Window(w, AttnShape{2, 2, 16, 12})));
  }
  // "accumulation" changes nothing: there are no running sums to compensate.
  EXPECT_EQ(StateFloats(Make("sliding_window", {{"window", 9}, {"accumulation", "plain"}}, shape)),
            StateFloats(Window(9, shape)));
}

// The cursor comes back from snapshots and imports as two floats checked only for being finite:
// any values index inside the ring (asan/ubsan builds catch a stray access) and give finite outputs.
TEST(SlidingWindowTest, ArbitraryCursorFloatsStayInsideTheRing) {
  const AttnShape shape{4, 2, 8, 6};
  const LayerAttention a = Window(5, shape, 3);
  const Inputs in = RandomInputs(shape, 7, 4);
  const std::vector<float> q = Cast<float>(in.q), k = Cast<float>(in.k), v = Cast<float>(in.v);
  for (const auto& [next, filled] : std::vector<std::pair<float, float>>{
           {-1, 3}, {7, 5}, {2.5f, 4.5f}, {1e30f, 1e30f}, {4, -1e30f}, {NAN, NAN}, {0, 6}}) {
    std::vector<float> fixed(StateFloats(a)), growing, y(size_t(7) * shape.heads * shape.value_dim);
    const StateView<float> st{fixed.data(), &growing};
    InitState<float>(a, st);
    fixed[fixed.size() - 2] = next;
    fixed[fixed.size() - 1] = filled;
    AttentionChunked<float>(a, 7, q.data(), k.data(), v.data(), st, y.data());
    AttentionRecurrent<float>(a, 1, q.data(), k.data(), v.data(), st, y.data());
    for (float x : y) ASSERT_TRUE(std::isfinite(x)) << next << " " << filled;
    EXPECT_GE(fixed[fixed.size() - 2], 0);
    EXPECT_LT(fixed[fixed.size() - 2], 5);
    EXPECT_EQ(fixed[fixed.size() - 1], 5);
  }
}

// A copy of the state mid-wrap (a fork, a snapshot) continues exactly like the original.
TEST(SlidingWindowTest, ACopiedStateContinuesExactly) {
  const AttnShape shape{4, 2, 8, 6};
  const LayerAttention a = Window(6, shape, 4);
  const Inputs in = RandomInputs(shape, 30, 5);
  const std::vector<float> q = Cast<float>(in.q), k = Cast<float>(in.k), v = Cast<float>(in.v);
  const int qr = shape.heads * shape.head_dim, kr = shape.kv_heads * shape.head_dim, vr = shape.kv_heads * shape.value_dim;
  std::vector<float> fixed(StateFloats(a)), growing, y(size_t(30) * shape.heads * shape.value_dim);
  InitState<float>(a, StateView<float>{fixed.data(), &growing});
  AttentionForward<float>(a, 17, q.data(), k.data(), v.data(), StateView<float>{fixed.data(), &growing}, y.data());
  std::vector<float> copy = fixed, y1(y.size()), y2(y.size());
  AttentionForward<float>(a, 13, q.data() + 17 * qr, k.data() + 17 * kr, v.data() + 17 * vr,
                          StateView<float>{fixed.data(), &growing}, y1.data());
  AttentionRecurrent<float>(a, 13, q.data() + 17 * qr, k.data() + 17 * kr, v.data() + 17 * vr,
                            StateView<float>{copy.data(), &growing}, y2.data());
  EXPECT_TRUE(SameBits(y1, y2));
  EXPECT_TRUE(SameBits(fixed, copy));
}

TEST(SlidingWindowTest, TheWindowIsRequiredAndChecked) {
  const AttnShape shape{2, 1, 8, 8};
  for (const nlohmann::json& j : {nlohmann::json::object(), nlohmann::json{{"window", 0}}, nlohmann::json{{"window", -4}},
                                  nlohmann::json{{"window", 2.5}}, nlohmann::json{{"window", "64"}},
                                  nlohmann::json{{"window", int64_t(kSlidingWindowMax) + 1}}}) {
    auto a = ParseLayerAttention({"sliding_window", j}, shape);
    ASSERT_FALSE(a.ok()) << j.dump();
    EXPECT_NE(std::string(a.status().message()).find("attention.window"), std::string::npos) << a.status();
    EXPECT_NE(std::string(a.status().message()).find("sliding_window"), std::string::npos) << a.status();
  }
  auto ok = ParseLayerAttention({"sliding_window", {{"window", 4096}, {"scale", 0.25}}}, shape);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(DescribeAttention(*ok)["window"], 4096);
  EXPECT_EQ(DescribeAttention(*ok)["scale"], 0.25);
}

}  // namespace
}  // namespace steady
