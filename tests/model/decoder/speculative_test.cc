// Speculative decoding's exactness, for every mechanism: a verify segment's logits equal plain
// decoding's bit for bit, Model::KeepVerified leaves the state plain decoding of the kept tokens
// leaves (bit for bit: the same Step arithmetic replayed), and generation with n-gram drafts gives
// plain greedy decoding's tokens.
#include <gtest/gtest.h>

#include <random>

#include "model/backend/backend.h"
#include "model/decoder/model.h"
#include "model/decoder/state_pool.h"
#include "model/generate.h"
#include "model/speculate/ngram.h"
#include "tests/testutil.h"

namespace steady {
namespace {

struct MechanismCase {
  std::string name, mechanism;
  nlohmann::json params;
};
void PrintTo(const MechanismCase& c, std::ostream* os) { *os << c.name; }

std::vector<MechanismCase> Cases() {
  return {{"softmax", "softmax", nlohmann::json::object()},
          {"taylor", "taylor", {{"order", 2}}},
          {"taylor_plain", "taylor", {{"order", 2}, {"accumulation", "plain"}}},
          {"slay", "slay", nlohmann::json::object()},
          {"dark", "dark", {{"features", 32}}},
          {"sliced_relu", "sliced_relu", nlohmann::json::object()},
          {"sliced_relu_bump", "sliced_relu_bump", nlohmann::json::object()},
          {"sliding_window", "sliding_window", {{"window", 8}}},
          {"window_dark", "window_dark", {{"window", 8}, {"features", 16}}}};
}

class SpeculativeTest : public ::testing::TestWithParam<MechanismCase> {
 protected:
  Model MakeModel() {
    return testing::TinyModel(GetParam().mechanism, GetParam().params, testing::TestSeed(), {{"vocab_size", 61}});
  }
  std::vector<int32_t> RandomTokens(int n, uint64_t salt) {
    std::mt19937_64 rng(testing::TestSeed() + salt);
    std::uniform_int_distribution<int32_t> d(3, 60);
    std::vector<int32_t> t(n);
    for (int32_t& x : t) x = d(rng);
    return t;
  }
};

// The slot's whole state: position, fixed floats, every layer's growing floats.
struct SlotCopy {
  int64_t position;
  std::vector<float> fixed;
  std::vector<std::vector<float>> growing;
  bool operator==(const SlotCopy&) const = default;
};
SlotCopy Copy(const Model& m, const StatePool& pool, int slot) {
  SlotCopy c{pool.position(slot),
             std::vector<float>(pool.SlotData(slot), pool.SlotData(slot) + pool.fixed_floats_per_slot()),
             {}};
  for (int l = 0; l < m.config().num_layers; ++l) c.growing.push_back(pool.Growing(slot, l));
  return c;
}

// After slot 1 of `pool` kept `keep` of `run` after `prompt`: its state is bit for bit that of plain
// decoding (the prompt in one segment, then the kept tokens one a step), and both continue alike.
void ExpectPlainState(const Model& m, ForwardWorkspace& ws, StatePool& pool, const std::vector<int32_t>& prompt,
                      const std::vector<int32_t>& run, int keep, const std::vector<int32_t>& more) {
  std::vector<float> logits;
  StatePool reference(m, 1);
  m.Forward({Segment{0, prompt, false}}, reference, ws, &logits);
  for (int i = 0; i < keep; ++i) m.Forward({Segment{0, {run[i]}, false}}, reference, ws, &logits);
  EXPECT_TRUE(Copy(m, pool, 1) == Copy(m, reference, 0)) << "state after keeping " << keep << " of " << run.size();
  for (int32_t t : more) {
    std::vector<float> a, b;
    m.Forward({Segment{1, {t}, false}}, pool, ws, &a);
    m.Forward({Segment{0, {t}, false}}, reference, ws, &b);
    ASSERT_EQ(a, b) << "keep " << keep;
  }
}

TEST_P(SpeculativeTest, VerifyThenKeepEqualsPlainDecodingBitForBit) {
  const Model m = MakeModel();
  const std::vector<int32_t> prompt = RandomTokens(37, 1), run = RandomTokens(6, 2);
  ForwardWorkspace ws;
  std::vector<float> logits;
  for (int keep = 1; keep <= int(run.size()); ++keep) {
    StatePool pool(m, 2);
    // Slot 0 decodes plainly, one token a step; slot 1 verifies the whole run in one step, beside a
    // plain decode row of slot 0 (rows of both kinds share the step).
    for (int slot : {0, 1}) m.Forward({Segment{slot, prompt, false}}, pool, ws, &logits);
    std::vector<float> plain;
    for (int i = 0; i + 1 < int(run.size()); ++i) {
      m.Forward({Segment{0, {run[i]}, false}}, pool, ws, &logits);
      plain.insert(plain.end(), logits.begin(), logits.end());
    }
    Segment verify{1, run, false};
    verify.verify = true;
    m.Forward({Segment{0, {run.back()}, false}, verify}, pool, ws, &logits);
    plain.insert(plain.end(), logits.begin(), logits.begin() + m.vocab_size());
    ASSERT_EQ(logits.size(), (run.size() + 1) * size_t(m.vocab_size()));
    const std::vector<float> verified(logits.begin() + m.vocab_size(), logits.end());
    EXPECT_EQ(verified, plain) << "verify rows' logits differ from plain decoding's";

    m.KeepVerified(pool, ws, 1, keep);
    ExpectPlainState(m, ws, pool, prompt, run, keep, RandomTokens(5, 3));
  }
}

// The draft model's rollback (Model::MarkRollback, Model::RollBack): after a mark, several one-token
// steps beside another slot's rows, keeping 0..n of them leaves plain decoding's state bit for bit.
TEST_P(SpeculativeTest, MarkThenRollBackEqualsPlainDecodingBitForBit) {
  const Model m = MakeModel();
  const std::vector<int32_t> prompt = RandomTokens(29, 5), run = RandomTokens(5, 6);
  ForwardWorkspace ws;
  std::vector<float> logits;
  for (int keep = 0; keep <= int(run.size()); ++keep) {
    StatePool pool(m, 2);
    for (int slot : {0, 1}) m.Forward({Segment{slot, prompt, false}}, pool, ws, &logits);
    m.MarkRollback(pool, ws, 1);
    for (int32_t t : run) m.Forward({Segment{0, {t}, false}, Segment{1, {t}, false}}, pool, ws, &logits);
    m.RollBack(pool, ws, 1, keep);
    // A mark with nothing logged rolls back to itself (the slot is marked again).
    m.MarkRollback(pool, ws, 1);
    m.RollBack(pool, ws, 1, 0);
    ExpectPlainState(m, ws, pool, prompt, run, keep, RandomTokens(3, 7));
  }
}

// Softmax verify rows attend side by side over their prefixes of the cache (softmax's Steps):
// past several 128-row chunks of the cache too, the rows' logits are plain decoding's bit for bit.
TEST(SpeculativeSoftmaxTest, VerifyRowsOverALongCacheEqualPlainDecoding) {
  const Model m = testing::TinyModel("softmax", nlohmann::json::object(), testing::TestSeed(), {{"vocab_size", 61}});
  std::mt19937_64 rng(testing::TestSeed());
  std::uniform_int_distribution<int32_t> d(3, 60);
  std::vector<int32_t> prompt(1021), run(7);
  for (int32_t& t : prompt) t = d(rng);
  for (int32_t& t : run) t = d(rng);
  ForwardWorkspace ws;
  StatePool pool(m, 2);
  std::vector<float> logits, plain;
  for (int slot : {0, 1}) m.Forward({Segment{slot, prompt, false}}, pool, ws, &logits);
  for (int32_t t : run) {
    m.Forward({Segment{0, {t}, false}}, pool, ws, &logits);
    plain.insert(plain.end(), logits.begin(), logits.end());
  }
  Segment verify{1, run, false};
  verify.verify = true;
  m.Forward({verify}, pool, ws, &logits);
  EXPECT_EQ(logits, plain);
  m.KeepVerified(pool, ws, 1, 3);
  EXPECT_EQ(pool.position(1), int64_t(prompt.size()) + 3);
}

// Generation with n-gram drafts against plain generation: the same tokens and the same final state,
// greedy and with a seeded temperature draw (the same rows sampled in the same order).
TEST_P(SpeculativeTest, NgramGenerationEqualsPlainGeneration) {
  const Model m = MakeModel();
  // A prompt that repeats itself, so that lookups find runs to propose.
  std::vector<int32_t> prompt = RandomTokens(20, 4);
  prompt.insert(prompt.end(), prompt.begin(), prompt.end());
  int64_t accepted = 0;
  for (float temperature : {0.0f, 0.9f}) {
    for (int k : {1, 4, 7}) {
      auto plain_backend = MakeCpuBackend(m, {}), spec_backend = MakeCpuBackend(m, {});
      GenerateRequest request;
      request.max_tokens = 40;
      request.ignore_eos = true;
      request.sampling.temperature = temperature;
      request.sampling.seed = testing::TestSeed();
      auto plain = GenerateFromIds(m, nullptr, *plain_backend, 0, prompt, request);
      request.speculative = Speculation::kNgram;
      request.draft_tokens = k;
      auto spec = GenerateFromIds(m, nullptr, *spec_backend, 0, prompt, request);
      ASSERT_TRUE(plain.ok() && spec.ok());
      EXPECT_EQ(spec->tokens, plain->tokens) << "temperature " << temperature << ", k " << k;
      EXPECT_GT(spec->drafted, 0);
      EXPECT_LE(spec->accepted, spec->drafted);
      accepted += spec->accepted;
      EXPECT_EQ(spec->steps + spec->accepted, int64_t(spec->tokens.size()));
      const SlotState a = plain_backend->ReadSlot(0), b = spec_backend->ReadSlot(0);
      EXPECT_EQ(a.position, b.position);
      EXPECT_TRUE(a.fixed == b.fixed && a.growing == b.growing) << "temperature " << temperature << ", k " << k;
    }
  }
  EXPECT_GT(accepted, 0) << "no draft was accepted: the accepted path went untested";
}

INSTANTIATE_TEST_SUITE_P(All, SpeculativeTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

TEST(NgramDraftTest, ProposesWhatFollowedTheLatestOccurrenceOfTheLongestTail) {
  const std::vector<int32_t> c = {1, 2, 3, 9, 1, 2, 3, 4, 5, 6, 7, 2, 3};
  // Tail (7? no) [2, 3] ... n = 3: [7, 2, 3] never occurred before; n = 2: [2, 3] last at 5 -> 4, 5, 6.
  EXPECT_EQ(NgramDraft(c, 3), (std::vector<int32_t>{4, 5, 6}));
  EXPECT_EQ(NgramDraft(c, 1), (std::vector<int32_t>{4}));
  // Cut at the context's end.
  EXPECT_EQ(NgramDraft(c, 20), (std::vector<int32_t>{4, 5, 6, 7, 2, 3}));
  // The longest tail wins over a more recent shorter match.
  const std::vector<int32_t> d = {5, 6, 7, 8, 9, 6, 7, 1, 5, 6, 7};
  EXPECT_EQ(NgramDraft(d, 2), (std::vector<int32_t>{8, 9}));
  EXPECT_EQ(NgramDraft(d, 2, {.max_ngram = 2}), (std::vector<int32_t>{1, 5}));
  // Nothing: a fresh token, an empty or one-token context, k < 1.
  EXPECT_TRUE(NgramDraft(std::vector<int32_t>{1, 2, 3}, 4).empty());
  EXPECT_TRUE(NgramDraft(std::vector<int32_t>{}, 4).empty());
  EXPECT_TRUE(NgramDraft(std::vector<int32_t>{1}, 4).empty());
  EXPECT_TRUE(NgramDraft(c, 0).empty());
  // A run of one token proposes more of it.
  EXPECT_EQ(NgramDraft(std::vector<int32_t>{4, 4, 4}, 3), (std::vector<int32_t>{4}));
}

}  // namespace
}  // namespace steady
