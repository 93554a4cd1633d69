// Speculative decoding in the engine (docs/speculative.md): jobs that verify n-gram drafts share
// steps with plain decode and prefill rows, and every job's text, tokens, finish reason and session
// equal those of plain decoding: greedy and seeded draws, stop strings, max_tokens, end tokens,
// log-probabilities, several choices, for several mechanisms.
#include <gtest/gtest.h>

#include "tests/server/engine/engine_harness.h"

namespace steady {
namespace {

using testing::EngineTinyModel;
using testing::Outcome;
using testing::StartEngine;
using testing::SubmitAsync;

// A prompt that repeats itself, so that lookups find runs to propose.
std::string Repeating(int i) {
  const std::string p = testing::Prompt(i + 3);
  return p + " " + p + " " + p;
}

// The jobs of one round, all submitted at once: odd ones speculate (per request) when `speculate`.
std::vector<Outcome> Round(Engine& e, bool speculate, int round) {
  std::vector<std::future<Outcome>> futures;
  for (int i = 0; i < 6; ++i) {
    GenerateJob j = testing::Job("s" + std::to_string(i), round == 0 ? Repeating(i) : " and the", 10 + 7 * i);
    if (i % 3 == 1) {  // seeded draws
      j.sampling.temperature = 0.9f;
      j.sampling.seed = 11 + i;
    }
    if (i == 2) j.stop = {"re"};
    if (i == 4) j.top_logprobs = 2;
    if (speculate && i % 2 == 1) {
      j.speculative = Speculation::kNgram;
      j.draft_tokens = 1 + i;
    }
    futures.push_back(SubmitAsync(e, j));
  }
  std::vector<Outcome> out;
  for (auto& f : futures) out.push_back(f.get());
  return out;
}

class SpeculativeEngineTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SpeculativeEngineTest, EveryJobEqualsPlainDecoding) {
  const Model m = EngineTinyModel(GetParam(), GetParam() == "sliding_window" ? nlohmann::json{{"window", 8}}
                                                                               : nlohmann::json::object(),
                                  77);
  // The plain engine; the speculating one (server default ngram, and per-request choices), with a
  // small max_batch so that verify rows compete for spare rows.
  auto plain = StartEngine(m, testing::Options());
  EngineOptions o = testing::Options(/*max_batch=*/9);
  o.speculative = Speculation::kNgram;
  o.draft_tokens = 3;
  auto spec = StartEngine(m, o);
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(testing::Create(*plain, "s" + std::to_string(i)).ok());
    ASSERT_TRUE(testing::Create(*spec, "s" + std::to_string(i)).ok());
  }
  int64_t drafted = 0, accepted = 0;
  for (int round = 0; round < 2; ++round) {  // the second continues each session
    const std::vector<Outcome> a = Round(*plain, false, round), b = Round(*spec, true, round);
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_TRUE(a[i].status.ok() && b[i].status.ok()) << a[i].status << b[i].status;
      EXPECT_EQ(b[i].ids, a[i].ids) << "job " << i << ", round " << round;
      EXPECT_EQ(b[i].text, a[i].text) << "job " << i;
      EXPECT_EQ(b[i].finish_reason, a[i].finish_reason) << "job " << i;
      EXPECT_EQ(b[i].usage.session_position, a[i].usage.session_position) << "job " << i;
      EXPECT_EQ(b[i].usage.completion_tokens, a[i].usage.completion_tokens) << "job " << i;
      ASSERT_EQ(b[i].logprobs.size(), a[i].logprobs.size());
      // (Steps batch different rows in the two engines; a GEMM past 32 rows rounds differently.)
      for (size_t t = 0; t < a[i].logprobs.size(); ++t) {
        EXPECT_NEAR(b[i].logprobs[t].chosen.logprob, a[i].logprobs[t].chosen.logprob, 1e-4);
      }
      EXPECT_EQ(a[i].usage.drafted_tokens, 0);
      EXPECT_LE(b[i].usage.accepted_tokens, b[i].usage.drafted_tokens);
      drafted += b[i].usage.drafted_tokens;
      accepted += b[i].usage.accepted_tokens;
    }
  }
  EXPECT_GT(drafted, 0);
  EXPECT_GT(accepted, 0) << "no draft accepted: the accepted path went untested";
}

INSTANTIATE_TEST_SUITE_P(Mechanisms, SpeculativeEngineTest, ::testing::Values("taylor", "softmax", "sliding_window", "dark"));

TEST(SpeculativeEngineTest, DraftTokensOutOfRangeIsRefused) {
  const Model m = testing::Taylor();
  auto e = StartEngine(m, testing::Options());
  GenerateJob j = testing::Job("", "the license", 4);
  j.speculative = Speculation::kNgram;
  j.draft_tokens = kMaxDraftTokens + 1;
  const Outcome o = SubmitAsync(*e, j).get();
  EXPECT_EQ(o.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(o.status.message().find("draft_tokens"), std::string::npos) << o.status;
}

}  // namespace
}  // namespace steady
