// A forward step on the CPU kernels (model/decoder over kernels/cpu): the same bits with one
// compute thread or two, and the reduced-precision matrices (q8, bf16) against the fp32 path.
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "kernels/cpu/parallel.h"
#include "model/decoder/cpu_weights.h"
#include "model/decoder/model.h"
#include "model/decoder/state_pool.h"
#include "tests/testutil.h"

namespace steady {
namespace {

// Restores the default thread count when a test that changes it ends, also on failure.
struct ThreadsGuard {
  ~ThreadsGuard() { cpu::SetComputeThreads(0); }
};

// A step mixing prefill and decode segments of several slots, whose attention runs on the compute
// threads segment by segment: logits and every slot's state are the same bits with one thread or two.
TEST(CpuForwardTest, AStepIsBitIdenticalWithOneThreadOrMany) {
  ThreadsGuard restore;
  for (const auto& [mechanism, params] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"taylor", {}}, {"slay", {}}, {"dark", {}}, {"softmax", {}}, {"sliced_relu", {}},
           {"sliding_window", {{"window", 8}}}}) {
    const Model m = testing::TinyModel(mechanism, params, 99);
    auto run = [&](int threads) {
      cpu::SetComputeThreads(threads);
      StatePool pool(m, 6);
      ForwardWorkspace ws;
      std::vector<float> logits;
      // Prefill, then decode steps of every slot with a prefill chunk of one of them in between.
      std::vector<Segment> prefill;
      for (int s = 0; s < 6; ++s) prefill.push_back({s, std::vector<int32_t>(5 + 3 * s, int32_t(7 + s)), false});
      m.Forward(prefill, pool, ws, &logits);
      std::vector<float> all = logits;
      for (int step = 0; step < 3; ++step) {
        std::vector<Segment> segs;
        for (int s = 0; s < 6; ++s) segs.push_back({s, {int32_t(20 + step + s)}, false});
        segs[2].tokens.assign(9, int32_t(30 + step));
        m.Forward(segs, pool, ws, &logits);
        all.insert(all.end(), logits.begin(), logits.end());
      }
      for (int s = 0; s < 6; ++s) all.insert(all.end(), pool.SlotData(s), pool.SlotData(s) + m.StateFloats());
      return all;
    };
    const std::vector<float> one = run(1);
    const std::vector<float> two = run(2);
    ASSERT_EQ(one.size(), two.size());
    EXPECT_EQ(0, std::memcmp(one.data(), two.data(), one.size() * sizeof(float))) << mechanism;
  }
}

// q8 matrices through Forward: logits close to the fp32 path's (8-bit weights move them by a few
// hundredths of their spread on these random weights) and not equal to them; the same greedy choice
// on most rows.
TEST(CpuForwardTest, Q8MatricesStayCloseToFp32) {
  const Model m = testing::TinyModel("taylor", nlohmann::json::object(), 21);
  const CpuMatrices q8 = CpuMatrices::From(m, CpuWeights::kQ8);
  EXPECT_LT(q8.Bytes(), q8.Weights() * 1.2) << "about 1.125 bytes a weight";
  auto run = [&](const CpuMatrices* matrices) {
    StatePool pool(m, 2);
    ForwardWorkspace ws;
    std::vector<float> logits;
    m.Forward({{0, std::vector<int32_t>(12, 9), false}, {1, {4, 5, 6}, false}}, pool, ws, &logits, matrices);
    return logits;
  };
  const std::vector<float> f32 = run(nullptr), got = run(&q8);
  ASSERT_EQ(f32.size(), got.size());
  const double err = testing::MaxRelError({got.begin(), got.end()}, {f32.begin(), f32.end()});
  EXPECT_GT(err, 0.0) << "the q8 matrices were not read";
  EXPECT_LT(err, 0.05) << "q8 moved the logits by this fraction of their spread";
}

// bf16 matrices through Forward: on a checkpoint whose weights are already bf16 values (saved as
// bf16), the bf16 path reads the same numbers as the fp32 path and does the same arithmetic
// (segments of up to 32 rows), so logits and states agree bit for bit.
TEST(CpuForwardTest, Bf16MatricesGiveTheFp32ResultOnBf16Weights) {
  for (const char* mechanism : {"taylor", "softmax"}) {
    const Model original = testing::TinyModel(mechanism, nlohmann::json::object(), 5);
    const std::string dir = testing::MakeTempDir("bf16_model");
    ASSERT_TRUE(original.Save(dir, DType::kBF16).ok());
    auto rounded = Model::Load(dir);
    ASSERT_TRUE(rounded.ok()) << rounded.status();
    const CpuMatrices bf16 = CpuMatrices::From(*rounded, CpuWeights::kBf16);
    EXPECT_EQ(bf16.Bytes(), 2 * bf16.Weights()) << "bf16 matrices only";
    auto run = [&](const Model& model, const CpuMatrices* matrices) {
      StatePool pool(model, 3);
      ForwardWorkspace ws;
      std::vector<float> logits, all;
      for (int step = 0; step < 4; ++step) {
        std::vector<Segment> segs;
        for (int s = 0; s < 3; ++s) segs.push_back({s, std::vector<int32_t>(step == 0 ? 9 + s : 1, int32_t(11 + step + s)), false});
        model.Forward(segs, pool, ws, &logits, matrices);
        all.insert(all.end(), logits.begin(), logits.end());
      }
      return all;
    };
    const std::vector<float> f32 = run(*rounded, nullptr), b16 = run(*rounded, &bf16);
    ASSERT_EQ(f32.size(), b16.size());
    EXPECT_EQ(0, std::memcmp(f32.data(), b16.data(), f32.size() * sizeof(float))) << mechanism;
    // The original's fp32 matrices are not bf16 values: there the two paths must differ (the bf16
    // matrices are really what the step reads).
    const CpuMatrices original_bf16 = CpuMatrices::From(original, CpuWeights::kBf16);
    EXPECT_NE(run(original, nullptr), run(original, &original_bf16)) << mechanism;
  }
}

// sliced_relu's score layers (the "mlp" projection's hidden layers, AttentionTokenMatrices) follow
// --cpu-weights as the model's projections do: bf16 in bf16, q8 in q8 and the 4-bit formats too
// (a score's error goes straight into the kernel), fp32 for auto and f32. With q8
// and bf16 they are read (the logits differ from the same step with fp32 scores), stay close to fp32, and each session's
// logits are the same bits alone as beside others (its scores do not depend on the batch).
TEST(CpuForwardTest, SlicedScoreLayersFollowTheWeightsPrecision) {
  const Model m = testing::TinyModel("sliced_relu", nlohmann::json::object(), 31);
  const int width = m.config().num_heads * m.config().head_dim, kv_width = m.config().num_kv_heads * m.config().head_dim;
  for (const CpuWeights w : {CpuWeights::kAuto, CpuWeights::kF32}) {
    for (const CpuMatrices::Layer& l : CpuMatrices::From(m, w).layers) EXPECT_TRUE(l.token.empty());
  }
  for (const auto& [w, type] : std::vector<std::pair<CpuWeights, WeightType>>{
           {CpuWeights::kBf16, WeightType::kBf16}, {CpuWeights::kQ8, WeightType::kQ8},
           {CpuWeights::kQ4, WeightType::kQ8}, {CpuWeights::kQ4K, WeightType::kQ8}}) {
    const CpuMatrices c = CpuMatrices::From(m, w);
    for (const CpuMatrices::Layer& l : c.layers) {
      ASSERT_EQ(l.token.size(), 2u);
      EXPECT_EQ(l.token[0].type(), type) << CpuWeightsName(w);
      EXPECT_EQ(l.token[0].rows(), width);
      EXPECT_EQ(l.token[0].cols(), width);
      EXPECT_EQ(l.token[1].rows(), kv_width);
      EXPECT_EQ(l.token[1].cols(), kv_width);
    }
  }
  // Sessions 0-2 decode beside each other after prefills of different lengths; session 3 has
  // session 1's history and steps alone.
  auto run = [&](const CpuMatrices* matrices) {
    StatePool pool(m, 4);
    ForwardWorkspace ws;
    std::vector<float> logits, together, alone;
    m.Forward({{0, std::vector<int32_t>(7, 9), false}, {1, {4, 5, 6, 7, 8}, false}, {2, {3}, false}}, pool, ws,
              &logits, matrices);
    m.Forward({{3, {4, 5, 6, 7, 8}, false}}, pool, ws, &logits, matrices);
    for (int step = 0; step < 3; ++step) {
      m.Forward({{0, {int32_t(10 + step)}, false}, {1, {int32_t(20 + step)}, false}, {2, {int32_t(30 + step)}, false}},
                pool, ws, &logits, matrices);
      together.insert(together.end(), logits.begin() + m.config().vocab_size, logits.begin() + 2 * m.config().vocab_size);
      m.Forward({{3, {int32_t(20 + step)}, false}}, pool, ws, &logits, matrices);
      alone.insert(alone.end(), logits.begin(), logits.end());
    }
    return std::make_pair(together, alone);
  };
  const auto [f32, unused_f32] = run(nullptr);
  for (const CpuWeights w : {CpuWeights::kQ8, CpuWeights::kBf16}) {
    // Packed for the dot-product kernels where this CPU has them, as the backend does.
    const CpuMatrices reduced = CpuMatrices::From(m, w, /*amx=*/false, /*dot=*/true);
    CpuMatrices fp32_scores = reduced;
    for (CpuMatrices::Layer& l : fp32_scores.layers) l.token.clear();
    const auto [together, alone] = run(&reduced);
    ASSERT_EQ(together.size(), alone.size());
    EXPECT_EQ(0, std::memcmp(together.data(), alone.data(), alone.size() * sizeof(float)))
        << "a session's " << CpuWeightsName(w) << " scores depend on its batch";
    const auto [with_fp32_scores, unused] = run(&fp32_scores);
    EXPECT_NE(together, with_fp32_scores) << "the " << CpuWeightsName(w) << " score layers were not read";
    const double err = testing::MaxRelError({together.begin(), together.end()}, {f32.begin(), f32.end()});
    EXPECT_LT(err, 0.05) << CpuWeightsName(w) << " moved the logits by this fraction of their spread";
  }
}

}  // namespace
}  // namespace steady
