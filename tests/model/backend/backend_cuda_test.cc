// The CUDA backend against the CPU backend where backend_test.cc's short runs on tiny shapes do not
// reach: 4K+ token contexts, the llama1b layer shape, graph buckets above 8, decode steps of one or
// two sessions (split over strips of state rows), projection biases, and a step naming one slot
// twice. Without a GPU every case reports SKIPPED (scripts/gpu_check.sh counts a skip as a failure
// on a GPU machine).
#include <gtest/gtest.h>

#include <random>

#include "model/backend/backend.h"
#include "tests/model/backend/cuda_compare.h"
#include "tests/testutil.h"

namespace steady {
namespace {

using testing::MaxRelError;
using testing::RelL2Error;
using testing::TestSeed;
using testing::TinyModel;

#define SKIP_WITHOUT_GPU() \
  if (!CudaDevicePresent()) GTEST_SKIP() << "no CUDA device (CudaBackendBuilt=" << CudaBackendBuilt() << ")"

// `steps` of two sessions through both backends: fp32 within fp32 rounding of the CPU, the serving
// bf16 path within bf16 rounding.
void ExpectCloseInBothPrecisions(const Model& m, const std::vector<std::vector<Segment>>& steps) {
  for (const bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "fp32");
    BackendOptions o;
    o.slots = 2;
    o.max_context = 64;
    o.cuda_bf16 = bf16;
    const Divergence d = Compare(m, o, steps);
    EXPECT_LT(d.logits, bf16 ? 3e-2 : 1e-4);
    EXPECT_LT(d.state, bf16 ? 3e-2 : 1e-4);
  }
}

// 4,096 tokens of prompt in 8 steps of 512 (the chunked prefill, crossing 32 chunks), then 300
// decode steps of the one session (split over the state's rows, or over softmax's cached context):
// logits and states stay within fp32 rounding of the CPU's, with RoPE at positions past 4K.
TEST(CudaBackendLongContext, FourThousandTokensStayWithTheCpu) {
  SKIP_WITHOUT_GPU();
  const std::vector<std::pair<std::string, nlohmann::json>> cases = {
      {"taylor", {{"order", 2}}}, {"taylor", {{"order", 3}, {"accumulation", "plain"}}},
      {"softmax", nlohmann::json::object()}, {"dark", nlohmann::json::object()}};
  for (const auto& [mechanism, params] : cases) {
    SCOPED_TRACE(mechanism + " " + params.dump());
    const Model m = TinyModel(mechanism, params, TestSeed(), kWide);
    std::mt19937_64 rng(TestSeed() + 31);
    BackendOptions o;
    o.slots = 1;
    o.max_context = 4500;
    o.cuda_bf16 = false;
    std::vector<std::vector<Segment>> steps;
    for (int c = 0; c < 8; ++c) steps.push_back({{0, RandomTokens(512, rng), c == 7}});
    for (int t = 0; t < 300; ++t) steps.push_back({{0, RandomTokens(1, rng), false}});
    const Divergence d = Compare(m, o, steps);
    EXPECT_LT(d.logits, 1e-4);
    EXPECT_LT(d.state, 1e-4);
  }
}

// The llama1b preset's layer shape (hidden 2048, 32 query heads, 8 kv heads, head_dim 64,
// intermediate 5632, vocab 32000; two layers of it): a 40-token and a 7-token prompt, decode steps
// of both sessions and of one alone. fp32 within fp32 rounding of the CPU; the serving bf16 path
// within bf16 rounding.
TEST(CudaBackendShapes, Llama1bLayers) {
  SKIP_WITHOUT_GPU();
  const nlohmann::json llama1b = {{"vocab_size", 32000},     {"hidden_size", 2048},     {"intermediate_size", 5632},
                                  {"num_hidden_layers", 2},   {"num_attention_heads", 32}, {"num_key_value_heads", 8},
                                  {"head_dim", 64},          {"qk_norm", false},        {"tie_word_embeddings", false}};
  for (const auto& [mechanism, params] :
       std::vector<std::pair<std::string, nlohmann::json>>{{"taylor", {{"order", 3}}}, {"softmax", nlohmann::json::object()}}) {
    SCOPED_TRACE(mechanism);
    const Model m = TinyModel(mechanism, params, TestSeed(), llama1b);
    std::mt19937_64 rng(TestSeed() + 37);
    std::vector<std::vector<Segment>> steps = {{{0, RandomTokens(40, rng), false}, {1, RandomTokens(7, rng), true}}};
    for (int t = 0; t < 3; ++t) steps.push_back({{1, RandomTokens(1, rng), false}, {0, RandomTokens(1, rng), false}});
    for (int t = 0; t < 2; ++t) steps.push_back({{1, RandomTokens(1, rng), false}});
    ExpectCloseInBothPrecisions(m, steps);
  }
}

// Projection biases (Qwen2's q, k and v; Llama's attention_bias and mlp_bias: o, gate, up, down),
// added after their GEMMs as the CPU adds them: a prompt and decode steps of two sessions, taylor and
// softmax, fp32 within fp32 rounding and bf16 within bf16 rounding of the CPU.
TEST(CudaBackendBiases, EveryProjectionBiasMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  for (const auto& [mechanism, params] :
       std::vector<std::pair<std::string, nlohmann::json>>{{"taylor", {{"order", 2}}}, {"softmax", nlohmann::json::object()}}) {
    SCOPED_TRACE(mechanism);
    ModelConfig c = testing::TinyConfig(mechanism, params, kWide);
    c.qkv_bias = c.o_bias = c.mlp_bias = true;
    auto m = Model::Random(c, TestSeed());
    ASSERT_TRUE(m.ok()) << m.status();
    ASSERT_FALSE(m->layers()[0].q_bias.empty() || m->layers()[0].down_bias.empty());
    std::mt19937_64 rng(TestSeed() + 41);
    std::vector<std::vector<Segment>> steps = {{{0, RandomTokens(23, rng), false}, {1, RandomTokens(5, rng), true}}};
    for (int t = 0; t < 4; ++t) steps.push_back({{0, RandomTokens(1, rng), false}, {1, RandomTokens(1, rng), false}});
    ExpectCloseInBothPrecisions(*m, steps);
  }
}

// Decode steps of 17, 33 and 65 sessions replay as graphs of buckets 32, 64 and 128 (captured on a
// bucket's second use) and compute what the same steps compute launched one by one.
TEST(CudaBackendGraphs, BucketsAboveEight) {
  SKIP_WITHOUT_GPU();
  for (const char* mechanism : {"taylor", "softmax"}) {
    SCOPED_TRACE(mechanism);
    const Model m = TinyModel(mechanism, nlohmann::json::object(), TestSeed());
    BackendOptions o;
    o.slots = 70;
    o.max_context = 64;
    o.cuda_bf16 = false;
    auto graphs = MakeCudaBackend(m, o);
    o.cuda_graphs = false;
    auto eager = MakeCudaBackend(m, o);
    ASSERT_TRUE(eager.ok() && graphs.ok());
    std::mt19937_64 rng(TestSeed() + 41);
    for (const int n : {17, 17, 17, 33, 33, 33, 65, 65, 65, 9}) {
      std::vector<Segment> step;
      for (int s = 0; s < n; ++s) step.push_back({s, RandomTokens(1, rng), false});
      std::vector<float> a, b;
      (*eager)->Forward(step, &a);
      (*graphs)->Forward(step, &b);
      EXPECT_LT(MaxRelError(D(b), D(a)), 1e-5) << n << " sessions";
    }
    for (const int s : {0, 16, 32, 64}) {
      EXPECT_LT(RelL2Error(D((*graphs)->ReadSlot(s).fixed), D((*eager)->ReadSlot(s).fixed)), 1e-5) << "slot " << s;
    }
  }
}

// One session decoding alone, then two: the few (segment, kv head) pairs split the state's rows into
// strips across blocks, merged by a second kernel (dark's running max moves in the merge).
TEST(CudaBackendSplitDecode, OneOrTwoSessionsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  const std::vector<std::pair<std::string, nlohmann::json>> cases = {
      {"taylor", {{"order", 3}}}, {"dark", nlohmann::json::object()}, {"slay", {{"accumulation", "plain"}}}};
  for (const auto& [mechanism, params] : cases) {
    SCOPED_TRACE(mechanism);
    const Model m = TinyModel(mechanism, params, TestSeed(), kWide);
    std::mt19937_64 rng(TestSeed() + 43);
    std::vector<std::vector<Segment>> steps = {{{0, RandomTokens(20, rng), false}}};
    for (int t = 0; t < 64; ++t) steps.push_back({{0, RandomTokens(1, rng), false}});
    steps.push_back({{1, RandomTokens(9, rng), false}});
    for (int t = 0; t < 8; ++t) steps.push_back({{1, RandomTokens(1, rng), false}, {0, RandomTokens(1, rng), false}});
    BackendOptions o;
    o.slots = 2;
    o.max_context = 128;
    o.cuda_bf16 = false;
    const Divergence d = Compare(m, o, steps);
    EXPECT_LT(d.logits, 1e-4);
    EXPECT_LT(d.state, 1e-4);
  }
}

// The kernels update a slot from one block (or strip) per segment: a step naming a slot twice would
// race, so the backend refuses it (a broken invariant of its caller: it aborts).
TEST(CudaBackendErrorsDeathTest, ASlotTwiceInOneStepAborts) {
  SKIP_WITHOUT_GPU();
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // re-executes: no fork of a process holding a CUDA context
  const Model m = TinyModel("taylor", {{"order", 2}}, TestSeed());
  EXPECT_DEATH(
      {
        BackendOptions o;
        o.slots = 2;
        auto gpu = MakeCudaBackend(m, o);
        (*gpu)->Forward({{0, {5}, false}, {1, {6}, false}, {0, {7}, false}}, nullptr);
      },
      "check failed");
}

}  // namespace
}  // namespace steady
