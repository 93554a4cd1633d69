// The draft model (model/speculate/draft_model.h): its lanes propose the draft's greedy tokens,
// however a lane's context grew; generation with a draft model gives plain decoding's tokens and
// state (greedy and seeded), for several target mechanisms and draft mechanisms; a draft whose
// tokenizer is not the target's is refused.
#include "model/speculate/draft_model.h"

#include <gtest/gtest.h>

#include <random>

#include "model/backend/backend.h"
#include "model/generate.h"
#include "tests/testutil.h"

namespace steady {
namespace {

constexpr int kVocab = 61;

Model Tiny(const std::string& mechanism, const nlohmann::json& params, uint64_t salt) {
  return testing::TinyModel(mechanism, params, testing::TestSeed() + salt, {{"vocab_size", kVocab}});
}

std::vector<int32_t> RandomTokens(int n, uint64_t salt) {
  std::mt19937_64 rng(testing::TestSeed() + salt);
  std::uniform_int_distribution<int32_t> d(3, kVocab - 1);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = d(rng);
  return t;
}

// The draft model's own greedy continuation of `context`, by plain generation.
std::vector<int32_t> Greedy(const Model& m, const std::vector<int32_t>& context, int k) {
  auto backend = MakeCpuBackend(m, {});
  GenerateRequest request;
  request.max_tokens = k;
  request.ignore_eos = true;
  request.add_bos = false;
  auto r = GenerateFromIds(m, nullptr, *backend, 0, context, request);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? r->tokens : std::vector<int32_t>{};
}

TEST(DraftModelTest, LanesProposeTheDraftsGreedyTokensAsTheirContextsGrow) {
  const Model draft_model = Tiny("taylor", {{"order", 2}}, 5);
  DraftModel draft(draft_model, 3, kVocab);
  std::vector<int32_t> a = RandomTokens(12, 1), b = RandomTokens(30, 2);
  // Two lanes in one batched call, with different k.
  auto first = draft.Draft({{0, a, 4}, {2, b, 1}});
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0], Greedy(draft_model, a, 4));
  EXPECT_EQ(first[1], Greedy(draft_model, b, 1));
  EXPECT_EQ(draft.fed(0), 12);
  // The lane's context grows by accepted drafts and one other token (the target's): the lane
  // holds none of the drafts it proposed, so it proposes what a fresh start would.
  a.insert(a.end(), first[0].begin(), first[0].begin() + 2);
  a.push_back(7);
  b.push_back(first[1][0]);
  auto second = draft.Draft({{0, a, 5}, {2, b, 3}});
  EXPECT_EQ(second[0], Greedy(draft_model, a, 5));
  EXPECT_EQ(second[1], Greedy(draft_model, b, 3));
  EXPECT_EQ(draft.fed(0), int64_t(a.size()));
  // Every proposal accepted (the lane keeps the 4 it stepped through and is fed the 5th and the
  // target's token), then none: the context grows by more tokens than the lane stepped through,
  // the first unlike its proposal, and all 3 stepped proposals are rolled back.
  a.insert(a.end(), second[0].begin(), second[0].end());
  a.push_back(5);
  auto third = draft.Draft({{0, a, 4}});
  EXPECT_EQ(third[0], Greedy(draft_model, a, 4));
  a.push_back(third[0][0] == 3 ? 4 : 3);
  a.insert(a.end(), {third[0][1], third[0][2], 6});
  EXPECT_EQ(draft.Draft({{0, a, 2}})[0], Greedy(draft_model, a, 2));
  EXPECT_EQ(draft.fed(0), int64_t(a.size()));
  // Reset: the lane starts over from the whole context; lane 1 was never used.
  draft.Reset(0);
  EXPECT_EQ(draft.Draft({{0, a, 2}})[0], Greedy(draft_model, a, 2));
  EXPECT_EQ(draft.Draft({{1, b, 3}})[0], second[1]);
  // A context that did not grow (nothing new): the lane starts over rather than guess.
  EXPECT_EQ(draft.Draft({{1, b, 3}})[0], second[1]);
}

// A softmax draft's lane, after drafts accepted in part, in full and not at all, holds exactly its
// context and the proposals it stepped through: the state a fresh slot fed the context in one
// segment and the stepped proposals one by one has (softmax's prefill is its decode Step, token by
// token, so the two agree bit for bit).
TEST(DraftModelTest, ALaneHoldsItsContextAndItsSteppedProposalsOnly) {
  const Model draft_model = Tiny("softmax", nlohmann::json::object(), 6);
  DraftModel draft(draft_model, 1, kVocab);
  std::vector<int32_t> context = RandomTokens(14, 3);
  auto expect_lane = [&](const std::vector<int32_t>& proposals, const std::string& where) {
    auto reference = MakeCpuBackend(draft_model, {});
    std::vector<float> logits;
    reference->Forward({{0, context, false}}, &logits);
    for (size_t i = 0; i + 1 < proposals.size(); ++i) reference->Forward({{0, {proposals[i]}, false}}, &logits);
    const SlotState a = draft.ReadLane(0), b = reference->ReadSlot(0);
    EXPECT_EQ(a.position, b.position) << where;
    EXPECT_TRUE(a.growing == b.growing) << where;
  };
  auto d = draft.Draft({{0, context, 4}})[0];
  expect_lane(d, "first");
  context.insert(context.end(), d.begin(), d.begin() + 2);  // two of four accepted
  context.push_back(d[2] == 3 ? 4 : 3);
  d = draft.Draft({{0, context, 5}})[0];
  expect_lane(d, "two accepted");
  context.insert(context.end(), d.begin(), d.end());  // all accepted, then the target's token
  context.push_back(7);
  d = draft.Draft({{0, context, 3}})[0];
  expect_lane(d, "all accepted");
  context.push_back(d[0] == 3 ? 4 : 3);  // none accepted, the context grows past the stepped ones
  context.insert(context.end(), {d[1], d[2], 9});
  d = draft.Draft({{0, context, 2}})[0];
  expect_lane(d, "none accepted");
}

struct PairCase {
  std::string name, target, draft;
  nlohmann::json target_params, draft_params;
};
void PrintTo(const PairCase& c, std::ostream* os) { *os << c.name; }

class DraftGenerationTest : public ::testing::TestWithParam<PairCase> {};

TEST_P(DraftGenerationTest, EqualsPlainGeneration) {
  const PairCase& c = GetParam();
  const Model target = Tiny(c.target, c.target_params, 0);
  // The target's own weights as a second checkpoint (drafts mostly accepted) and a model of
  // another mechanism (mostly rejected).
  const Model same = Tiny(c.target, c.target_params, 0), other = Tiny(c.draft, c.draft_params, 9);
  std::vector<int32_t> prompt = RandomTokens(24, 4);
  int64_t accepted = 0;
  for (const Model* draft_model : {&same, &other}) {
    for (float temperature : {0.0f, 0.9f}) {
      for (int k : {1, 4, 7}) {
        auto plain_backend = MakeCpuBackend(target, {}), spec_backend = MakeCpuBackend(target, {});
        DraftModel draft(*draft_model, 1, target.vocab_size());
        GenerateRequest request;
        request.max_tokens = 40;
        request.ignore_eos = true;
        request.sampling.temperature = temperature;
        request.sampling.seed = testing::TestSeed();
        auto plain = GenerateFromIds(target, nullptr, *plain_backend, 0, prompt, request);
        request.speculative = Speculation::kDraft;
        request.draft_model = &draft;
        request.draft_tokens = k;
        auto spec = GenerateFromIds(target, nullptr, *spec_backend, 0, prompt, request);
        ASSERT_TRUE(plain.ok() && spec.ok()) << plain.status() << spec.status();
        const std::string where = (draft_model == &same ? "same" : "other") + std::string(", temperature ") +
                                  std::to_string(temperature) + ", k " + std::to_string(k);
        EXPECT_EQ(spec->tokens, plain->tokens) << where;
        EXPECT_GT(spec->drafted, 0) << where;
        EXPECT_LE(spec->accepted, spec->drafted);
        EXPECT_EQ(spec->steps + spec->accepted, int64_t(spec->tokens.size()));
        if (draft_model == &same && temperature == 0) {
          EXPECT_GT(spec->accepted * 2, spec->drafted) << "the target's own weights, greedy: " << where;
        }
        accepted += spec->accepted;
        const SlotState a = plain_backend->ReadSlot(0), b = spec_backend->ReadSlot(0);
        EXPECT_EQ(a.position, b.position);
        EXPECT_TRUE(a.fixed == b.fixed && a.growing == b.growing) << where;
      }
    }
  }
  EXPECT_GT(accepted, 0);
}

INSTANTIATE_TEST_SUITE_P(Pairs, DraftGenerationTest,
                         ::testing::Values(PairCase{"softmax_taylor", "softmax", "taylor", nlohmann::json::object(), {{"order", 2}}},
                                           PairCase{"taylor_softmax", "taylor", "softmax", {{"order", 2}}, nlohmann::json::object()},
                                           PairCase{"sliced_relu_dark", "sliced_relu", "dark", nlohmann::json::object(), {{"features", 32}}},
                                           PairCase{"window_slay", "sliding_window", "slay", {{"window", 8}}, nlohmann::json::object()}),
                         [](const auto& info) { return info.param.name; });

TEST(DraftGenerationTest, DraftWithoutADraftModelIsRefused) {
  const Model target = Tiny("taylor", {{"order", 2}}, 0);
  auto backend = MakeCpuBackend(target, {});
  GenerateRequest request;
  request.speculative = Speculation::kDraft;
  auto r = GenerateFromIds(target, nullptr, *backend, 0, {5, 6}, request);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend->position(0), 0) << "refused before the prompt went in";
}

// A tokenizer of `n` tokens whose token i reads "t<i>", except `odd` (if >= 0), which reads "x".
class FakeTokenizer : public Tokenizer {
 public:
  FakeTokenizer(int n, int odd, int eos = 2) : n_(n), odd_(odd), eos_(eos) {}
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view, bool) const override { return std::vector<int32_t>{}; }
  absl::StatusOr<std::string> Decode(const std::vector<int32_t>& ids, const DecodeOptions&) const override {
    std::string s;
    for (int32_t id : ids) s += id == odd_ ? "x" : "t" + std::to_string(id);
    return s;
  }
  int vocab_size() const override { return n_; }
  int bos_id() const override { return 1; }
  int eos_id() const override { return eos_; }
  bool prepends_bos() const override { return true; }
  int TokenId(std::string_view) const override { return -1; }

 private:
  int n_, odd_, eos_;
};

TEST(CheckSameTokenizerTest, RefusesAnyDifferenceAndNamesIt) {
  EXPECT_TRUE(CheckSameTokenizer(FakeTokenizer(50, -1), FakeTokenizer(50, -1)).ok());
  const absl::Status size = CheckSameTokenizer(FakeTokenizer(50, -1), FakeTokenizer(49, -1));
  EXPECT_EQ(size.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(size.message().find("49 tokens against 50"), std::string::npos) << size;
  const absl::Status text = CheckSameTokenizer(FakeTokenizer(50, -1), FakeTokenizer(50, 17));
  EXPECT_EQ(text.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(text.message().find("token 17"), std::string::npos) << text;
  const absl::Status eos = CheckSameTokenizer(FakeTokenizer(50, -1), FakeTokenizer(50, -1, 3));
  EXPECT_EQ(eos.code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace steady
