// The decoder around the mechanisms: batched decode == single-session decode, chunked prefill ==
// token-by-token decode, save/load round trip, fork, strict loading.
#include "model/decoder/model.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "model/decoder/state_pool.h"
#include "model/generate.h"
#include "tests/testutil.h"

namespace steady {
namespace {

ModelConfig TinyConfig(const std::string& mechanism, const nlohmann::json& params) {
  return testing::TinyConfig(mechanism, params, {{"vocab_size", 97}});
}

struct ModelCase {
  std::string name, mechanism;
  nlohmann::json params;
};

void PrintTo(const ModelCase& c, std::ostream* os) { *os << c.name; }

std::vector<ModelCase> Cases() {
  return {{"softmax", "softmax", nlohmann::json::object()},
          {"taylor", "taylor", {{"order", 3}}},
          {"slay", "slay", nlohmann::json::object()},
          {"dark", "dark", {{"features", 32}}},
          {"sliced_relu", "sliced_relu", nlohmann::json::object()},
          {"sliced_relu_bump", "sliced_relu_bump", nlohmann::json::object()},
          {"sliding_window", "sliding_window", {{"window", 16}}}};
}

class ModelTest : public ::testing::TestWithParam<ModelCase> {
 protected:
  Model MakeModel() {
    auto m = Model::Random(TinyConfig(GetParam().mechanism, GetParam().params), testing::TestSeed());
    EXPECT_TRUE(m.ok()) << m.status();
    return *std::move(m);
  }
  std::vector<int32_t> RandomTokens(int n, uint64_t salt) {
    std::mt19937_64 rng(testing::TestSeed() + salt);
    std::uniform_int_distribution<int32_t> d(3, 96);
    std::vector<int32_t> t(n);
    for (int32_t& x : t) x = d(rng);
    return t;
  }
};

// Logits of every position, feeding tokens one at a time through the decode path.
std::vector<float> DecodeAll(const Model& m, StatePool& pool, int slot, const std::vector<int32_t>& tokens) {
  ForwardWorkspace ws;
  std::vector<float> all, logits;
  for (int32_t t : tokens) {
    m.Forward({Segment{slot, {t}, false}}, pool, ws, &logits);
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

std::vector<double> ToDouble(const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); }

TEST_P(ModelTest, ChunkedPrefillMatchesTokenByTokenDecode) {
  const Model m = MakeModel();
  const std::vector<int32_t> tokens = RandomTokens(150, 1);
  StatePool pool(m, 2);
  const std::vector<float> decoded = DecodeAll(m, pool, 0, tokens);
  ForwardWorkspace ws;
  std::vector<float> prefilled, logits;
  // Two prefill segments (the state carries across calls), logits for every row.
  m.Forward({Segment{1, std::vector<int32_t>(tokens.begin(), tokens.begin() + 61), true}}, pool, ws, &logits);
  prefilled = logits;
  m.Forward({Segment{1, std::vector<int32_t>(tokens.begin() + 61, tokens.end()), true}}, pool, ws, &logits);
  prefilled.insert(prefilled.end(), logits.begin(), logits.end());
  EXPECT_EQ(pool.position(1), 150);
  // fp32 paths that sum in different orders: agreement to ~1e-4 of the logits' scale.
  EXPECT_LT(testing::MaxRelError(ToDouble(prefilled), ToDouble(decoded)), 2e-4);
}

TEST_P(ModelTest, BatchedDecodeMatchesSingleSession) {
  const Model m = MakeModel();
  constexpr int kSessions = 5, kSteps = 12;
  StatePool batched(m, kSessions), single(m, kSessions);
  std::vector<std::vector<int32_t>> streams;
  for (int s = 0; s < kSessions; ++s) streams.push_back(RandomTokens(kSteps + s, 10 + s));
  // Batched: prompts of different lengths prefilled in one step, then decode steps together.
  ForwardWorkspace ws;
  std::vector<float> logits;
  std::vector<Segment> prefill;
  for (int s = 0; s < kSessions; ++s) prefill.push_back({s, std::vector<int32_t>(streams[s].begin(), streams[s].begin() + s + 1), false});
  m.Forward(prefill, batched, ws, &logits);
  std::vector<std::vector<float>> batched_logits(kSessions);
  for (int step = 0; step < kSteps - 1; ++step) {
    std::vector<Segment> segs;
    for (int s = 0; s < kSessions; ++s) segs.push_back({s, {streams[s][s + 1 + step]}, false});
    m.Forward(segs, batched, ws, &logits);
    for (int s = 0; s < kSessions; ++s) {
      batched_logits[s].insert(batched_logits[s].end(), logits.begin() + s * m.vocab_size(),
                               logits.begin() + (s + 1) * m.vocab_size());
    }
  }
  for (int s = 0; s < kSessions; ++s) {
    std::vector<float> alone;
    m.Forward({Segment{s, std::vector<int32_t>(streams[s].begin(), streams[s].begin() + s + 1), false}}, single, ws, &logits);
    for (int step = 0; step < kSteps - 1; ++step) {
      m.Forward({Segment{s, {streams[s][s + 1 + step]}, false}}, single, ws, &logits);
      alone.insert(alone.end(), logits.begin(), logits.end());
    }
    // GEMM blocking may differ with the row count: fp32 rounding only.
    EXPECT_LT(testing::MaxRelError(ToDouble(batched_logits[s]), ToDouble(alone)), 1e-4) << "session " << s;
  }
}

TEST_P(ModelTest, ForkContinuesLikeTheOriginal) {
  const Model m = MakeModel();
  StatePool pool(m, 3);
  const std::vector<int32_t> prefix = RandomTokens(40, 20), suffix = RandomTokens(10, 21);
  DecodeAll(m, pool, 0, prefix);
  pool.Copy(0, 1);
  EXPECT_EQ(pool.position(1), 40);
  const std::vector<float> original = DecodeAll(m, pool, 0, suffix);
  const std::vector<float> forked = DecodeAll(m, pool, 1, suffix);
  EXPECT_EQ(original, forked);  // same state, same arithmetic: bit-identical
  // And a fresh session fed the same prefix.
  DecodeAll(m, pool, 2, prefix);
  EXPECT_EQ(DecodeAll(m, pool, 2, suffix), original);
}

TEST_P(ModelTest, SaveLoadRoundTrip) {
  const Model m = MakeModel();
  const std::string dir = testing::MakeTempDir("roundtrip_" + GetParam().name);
  ASSERT_TRUE(m.Save(dir).ok());
  auto loaded = Model::Load(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->StateFloats(), m.StateFloats());
  EXPECT_EQ(loaded->ParameterCount(), m.ParameterCount());
  const std::vector<int32_t> tokens = RandomTokens(20, 30);
  StatePool a(m, 1), b(*loaded, 1);
  // F32 storage keeps every weight; derived tensors (slay re-normalizes its anchors at load) may
  // differ in the last bit, so compare at fp32 rounding.
  EXPECT_LT(testing::MaxRelError(ToDouble(DecodeAll(*loaded, b, 0, tokens)), ToDouble(DecodeAll(m, a, 0, tokens))), 1e-5);
  // bf16 storage: the same model within bf16 rounding of the weights.
  const std::string dir16 = testing::MakeTempDir("roundtrip16_" + GetParam().name);
  ASSERT_TRUE(m.Save(dir16, DType::kBF16).ok());
  auto bf16 = Model::Load(dir16);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
}

TEST_P(ModelTest, StateBytesDoNotDependOnContextForConstantStateMechanisms) {
  const Model m = MakeModel();
  StatePool pool(m, 1);
  const size_t at_start = pool.BytesInUse(0);
  DecodeAll(m, pool, 0, RandomTokens(1, 40));
  const size_t at_1 = pool.BytesInUse(0);
  DecodeAll(m, pool, 0, RandomTokens(300, 41));
  if (GetParam().mechanism == "softmax") {
    EXPECT_GT(pool.BytesInUse(0), at_1);
  } else {
    EXPECT_EQ(pool.BytesInUse(0), at_1);
    EXPECT_EQ(at_start, at_1);
  }
}

INSTANTIATE_TEST_SUITE_P(All, ModelTest, ::testing::ValuesIn(Cases()), [](const auto& info) { return info.param.name; });

TEST(ModelLoadTest, RefusesMismatchedTensorsAndMissingFiles) {
  const std::string dir = testing::MakeTempDir("strict");
  auto m = Model::Random(TinyConfig("softmax", nlohmann::json::object()), 7);
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(m->Save(dir).ok());
  // config.json claims a different shape than the tensors have.
  {
    std::ifstream in(dir + "/config.json");
    nlohmann::json j = nlohmann::json::parse(in);
    j["intermediate_size"] = 65;
    std::ofstream(dir + "/config.json") << j.dump();
  }
  auto bad = Model::Load(dir);
  ASSERT_FALSE(bad.ok());
  const std::string msg(bad.status().message());
  EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mlp."), std::string::npos) << msg;
  // No checkpoint at all.
  auto none = Model::Load(dir + "/nonexistent");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(std::string(none.status().message()).find("config.json"), std::string::npos);
}

TEST(ModelLoadTest, SoftmaxCheckpointServesAsTaylor) {
  const std::string dir = testing::MakeTempDir("as_taylor");
  auto m = Model::Random(TinyConfig("softmax", nlohmann::json::object()), 8);
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(m->Save(dir).ok());
  auto taylor = Model::Load(dir, MechanismOverride{"taylor", {{"order", 3}}});
  ASSERT_TRUE(taylor.ok()) << taylor.status();
  EXPECT_EQ(taylor->layers()[0].attention.mechanism, "taylor");
  EXPECT_GT(taylor->StateFloats(), 0u);
}

// A hybrid: layer 0 a sliding window (through the checkpoint's per-layer "layers" override), layer 1
// taylor. It saves and loads with its layers, its state is the two layers' constant states, its
// prefill computes what its decode steps compute, and while the context fits the window it is the
// softmax + taylor hybrid with the same weights, bit for bit.
TEST(HybridModelTest, WindowLayerBesideATaylorLayer) {
  auto config = [](const nlohmann::json& layer0) {
    return testing::TinyConfig("taylor", {{"order", 2}},
                               {{"vocab_size", 97}, {"attention", {{"layers", {{"0", layer0}}}}}});
  };
  const ModelConfig hybrid_config = config({{"mechanism", "sliding_window"}, {"window", 24}});
  ASSERT_EQ(hybrid_config.layer_attention[0].mechanism, "sliding_window");
  ASSERT_EQ(hybrid_config.layer_attention[1].mechanism, "taylor");
  auto hybrid = Model::Random(hybrid_config, 31);
  ASSERT_TRUE(hybrid.ok()) << hybrid.status();
  EXPECT_EQ(hybrid->StateFloats(), StateFloats(hybrid->layers()[0].attention) + StateFloats(hybrid->layers()[1].attention));
  EXPECT_EQ(StateFloats(hybrid->layers()[0].attention), size_t(24) * 2 * (8 + 8) + 2);

  std::mt19937_64 rng(testing::TestSeed() + 50);
  std::uniform_int_distribution<int32_t> d(3, 96);
  std::vector<int32_t> tokens(100);
  for (int32_t& t : tokens) t = d(rng);
  StatePool pool(*hybrid, 2);
  const std::vector<float> decoded = DecodeAll(*hybrid, pool, 0, tokens);
  ForwardWorkspace ws;
  std::vector<float> prefilled, logits;
  for (const auto& [from, to] : {std::pair{0, 37}, std::pair{37, 100}}) {
    hybrid->Forward({Segment{1, std::vector<int32_t>(tokens.begin() + from, tokens.begin() + to), true}}, pool, ws, &logits);
    prefilled.insert(prefilled.end(), logits.begin(), logits.end());
  }
  EXPECT_LT(testing::MaxRelError(ToDouble(prefilled), ToDouble(decoded)), 2e-4);
  EXPECT_EQ(pool.BytesInUse(1), hybrid->StateFloats() * sizeof(float));

  const std::string dir = testing::MakeTempDir("hybrid_window");
  ASSERT_TRUE(hybrid->Save(dir).ok());
  auto loaded = Model::Load(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->layers()[0].attention.mechanism, "sliding_window");
  EXPECT_EQ(DescribeAttention(loaded->layers()[0].attention)["window"], 24);
  EXPECT_EQ(loaded->layers()[1].attention.mechanism, "taylor");
  StatePool again(*loaded, 1);
  EXPECT_EQ(DecodeAll(*loaded, again, 0, tokens), decoded);

  auto with_softmax = Model::Random(config({{"mechanism", "softmax"}}), 31);
  ASSERT_TRUE(with_softmax.ok()) << with_softmax.status();
  StatePool soft(*with_softmax, 1);
  const std::vector<int32_t> within(tokens.begin(), tokens.begin() + 24);
  EXPECT_EQ(DecodeAll(*with_softmax, soft, 0, within),
            std::vector<float>(decoded.begin(), decoded.begin() + 24 * hybrid->vocab_size()));
}

TEST(ModelLoadTest, SoftmaxCheckpointServesWithAWindow) {
  const std::string dir = testing::MakeTempDir("as_window");
  auto m = Model::Random(TinyConfig("softmax", {{"scale", 0.3}}), 8);
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(m->Save(dir).ok());
  auto window = Model::Load(dir, MechanismOverride{"sliding_window", {{"window", 64}}});
  ASSERT_TRUE(window.ok()) << window.status();
  EXPECT_EQ(window->layers()[1].attention.mechanism, "sliding_window");
  EXPECT_EQ(DescribeAttention(window->layers()[1].attention)["scale"], 0.3);  // the trained scale is kept
  auto missing = Model::Load(dir, MechanismOverride{"sliding_window", nlohmann::json::object()});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(std::string(missing.status().message()).find("window"), std::string::npos) << missing.status();
}

}  // namespace
}  // namespace steady
