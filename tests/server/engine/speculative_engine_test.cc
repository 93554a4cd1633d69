// Speculative decoding in the engine (docs/speculative.md): jobs that verify n-gram drafts share
// steps with plain decode and prefill rows, and every job's text, tokens, finish reason and session
// equal those of plain decoding: greedy and seeded draws, stop strings, max_tokens, end tokens,
// log-probabilities, several choices, for several mechanisms.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "server/metrics/metrics.h"
#include "tests/server/engine/engine_harness.h"
#include "tests/testutil.h"

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

// The jobs of one round, all submitted at once: odd ones speculate (per request, with `mode`) when
// `speculate`.
std::vector<Outcome> Round(Engine& e, bool speculate, int round, Speculation mode = Speculation::kNgram) {
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
      j.speculative = mode;
      j.draft_tokens = 1 + i;
    }
    futures.push_back(SubmitAsync(e, j));
  }
  std::vector<Outcome> out;
  for (auto& f : futures) out.push_back(f.get());
  return out;
}

// Job i of a round: the speculating engine's outcome `b` is the plain engine's `a`.
void ExpectPlainOutcome(const Outcome& a, const Outcome& b, size_t i, int round) {
  ASSERT_TRUE(a.status.ok() && b.status.ok()) << a.status << b.status;
  EXPECT_EQ(b.ids, a.ids) << "job " << i << ", round " << round;
  EXPECT_EQ(b.text, a.text) << "job " << i;
  EXPECT_EQ(b.finish_reason, a.finish_reason) << "job " << i;
  EXPECT_EQ(b.usage.session_position, a.usage.session_position) << "job " << i;
  EXPECT_EQ(b.usage.completion_tokens, a.usage.completion_tokens) << "job " << i;
  ASSERT_EQ(b.logprobs.size(), a.logprobs.size());
  // (Steps batch different rows in the two engines; a GEMM past 32 rows rounds differently.)
  for (size_t t = 0; t < a.logprobs.size(); ++t) {
    EXPECT_NEAR(b.logprobs[t].chosen.logprob, a.logprobs[t].chosen.logprob, 1e-4);
  }
  EXPECT_EQ(a.usage.drafted_tokens, 0);
  EXPECT_LE(b.usage.accepted_tokens, b.usage.drafted_tokens);
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
      ExpectPlainOutcome(a[i], b[i], i, round);
      drafted += b[i].usage.drafted_tokens;
      accepted += b[i].usage.accepted_tokens;
    }
  }
  EXPECT_GT(drafted, 0);
  EXPECT_GT(accepted, 0) << "no draft accepted: the accepted path went untested";
  // The engine's counters (/metrics) are the usages' sums; the histogram counts the verify steps by
  // the drafts each accepted, so its weighted sum is the accepted tokens. (A job's on_done can run
  // before its step's end updates the counters: wait for that step.)
  Engine::Stats stats = spec->stats();
  for (int i = 0; i < 200 && stats.accepted_tokens != accepted; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    stats = spec->stats();
  }
  EXPECT_EQ(stats.drafted_tokens, drafted);
  EXPECT_EQ(stats.accepted_tokens, accepted);
  ASSERT_EQ(stats.verify_accepted.size(), size_t(kMaxDraftTokens + 1));
  int64_t steps = 0, weighted = 0;
  for (size_t a = 0; a < stats.verify_accepted.size(); ++a) {
    steps += stats.verify_accepted[a];
    weighted += int64_t(a) * stats.verify_accepted[a];
  }
  EXPECT_EQ(weighted, accepted);
  EXPECT_GE(steps * 6, drafted) << "a verify step drafts at most 6 tokens here";
  const std::string page = Metrics().Render(stats);
  EXPECT_NE(page.find("steady_speculative_draft_tokens_total " + std::to_string(drafted) + "\n"), std::string::npos) << page;
  EXPECT_NE(page.find("steady_speculative_accepted_tokens_total " + std::to_string(accepted) + "\n"), std::string::npos);
  EXPECT_NE(page.find("steady_speculative_accepted_per_verify_bucket{le=\"+Inf\"} " + std::to_string(steps) + "\n"),
            std::string::npos);
  EXPECT_NE(page.find("steady_speculative_accepted_per_verify_count " + std::to_string(steps) + "\n"), std::string::npos);
  EXPECT_NE(page.find("steady_speculative_accepted_per_verify_bucket{le=\"0\"} " +
                      std::to_string(stats.verify_accepted[0]) + "\n"),
            std::string::npos);
  // The plain engine verified nothing: zeros, an empty histogram.
  const std::string plain_page = Metrics().Render(plain->stats());
  EXPECT_NE(plain_page.find("steady_speculative_draft_tokens_total 0\n"), std::string::npos);
  EXPECT_NE(plain_page.find("steady_speculative_accepted_per_verify_count 0\n"), std::string::npos);
}

// The same with a draft model: the target's own weights as a second checkpoint (drafts mostly
// accepted), the server's default for even jobs and per request for odd ones.
TEST_P(SpeculativeEngineTest, DraftModelJobsEqualPlainDecoding) {
  const nlohmann::json params =
      GetParam() == "sliding_window" ? nlohmann::json{{"window", 8}} : nlohmann::json::object();
  const Model m = EngineTinyModel(GetParam(), params, 77), draft_model = EngineTinyModel(GetParam(), params, 77);
  auto plain = StartEngine(m, testing::Options());
  EngineOptions o = testing::Options(/*max_batch=*/9);
  o.speculative = Speculation::kDraft;
  o.draft_tokens = 3;
  o.draft_model = &draft_model;
  auto spec = StartEngine(m, o);
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(testing::Create(*plain, "s" + std::to_string(i)).ok());
    ASSERT_TRUE(testing::Create(*spec, "s" + std::to_string(i)).ok());
  }
  int64_t drafted = 0, accepted = 0, greedy_drafted[2] = {}, greedy_accepted[2] = {};
  for (int round = 0; round < 2; ++round) {
    const std::vector<Outcome> a = Round(*plain, false, round), b = Round(*spec, true, round, Speculation::kDraft);
    for (size_t i = 0; i < a.size(); ++i) {
      ExpectPlainOutcome(a[i], b[i], i, round);
      drafted += b[i].usage.drafted_tokens;
      accepted += b[i].usage.accepted_tokens;
      if (i % 3 != 1) {  // greedy
        greedy_drafted[round] += b[i].usage.drafted_tokens;
        greedy_accepted[round] += b[i].usage.accepted_tokens;
      }
    }
  }
  const int64_t greedy_first_drafted = greedy_drafted[0], greedy_first_accepted = greedy_accepted[0];
  std::printf("greedy drafts accepted: first turn %lld of %lld, second turn %lld of %lld\n",
              (long long)greedy_accepted[0], (long long)greedy_drafted[0], (long long)greedy_accepted[1],
              (long long)greedy_drafted[1]);
  // The second turn continues in the lane its session's first turn left (the draft has the first turn
  // behind it, as the target does): its greedy drafts are accepted as the first turn's are.
  EXPECT_GT(greedy_accepted[1] * 10, greedy_drafted[1] * 9) << "the second turn's draft started over";
  EXPECT_GT(drafted, 0);
  // The target's own weights as the draft, greedy: nearly every draft accepted (a later turn's draft
  // sees only that turn's tokens, and sampled jobs accept a draft with its probability only).
  EXPECT_GT(greedy_first_accepted * 10, greedy_first_drafted * 9)
      << greedy_first_accepted << " of " << greedy_first_drafted << " drafts accepted";
}

INSTANTIATE_TEST_SUITE_P(Mechanisms, SpeculativeEngineTest, ::testing::Values("taylor", "softmax", "sliding_window", "dark"));

// Prompt lookup also searches a session's earlier turns (EngineOptions::ngram_history). With a
// sliding window of 8 tokens and RoPE's relative positions, the same prompt sent again (longer than
// the window) leads to the same greedy tokens: the second turn repeats the first turn's output, a
// run only the session's history holds. With the history the second turn's drafts come from there
// and are accepted from its first step; with none (0) they can come only from the turn's own tokens.
// Every turn gives plain decoding's tokens either way.
TEST(SpeculativeHistoryTest, PromptLookupSearchesTheSessionsEarlierTurns) {
  const Model m = EngineTinyModel("sliding_window", {{"window", 8}}, 77, /*eos=*/-1);
  const std::string prompt = testing::Prompt(4);
  struct Run {
    Outcome first, second, fork, other;
  };
  auto run = [&](Speculation mode, int64_t history) {
    EngineOptions o = testing::Options();
    o.speculative = mode;
    o.draft_tokens = 4;
    o.ngram_history = history;
    auto e = StartEngine(m, o);
    EXPECT_TRUE(testing::Create(*e, "s").ok());
    EXPECT_TRUE(testing::Create(*e, "t").ok());
    Run r;
    r.first = testing::Generate(*e, "s", prompt, 32);
    // A fork holds the history that led to its state; another session holds none of it.
    EXPECT_TRUE(testing::Call<absl::StatusOr<SessionInfo>>([&](auto done) { e->ForkSession("s", "f", done); }).ok());
    r.second = testing::Generate(*e, "s", prompt, 32);
    r.fork = testing::Generate(*e, "f", prompt, 32);
    r.other = testing::Generate(*e, "t", prompt, 32);
    return r;
  };
  const Run plain = run(Speculation::kOff, 0), none = run(Speculation::kNgram, 0), kept = run(Speculation::kNgram, 4096);
  ASSERT_TRUE(plain.first.status.ok() && plain.second.status.ok()) << plain.first.status << plain.second.status;
  ASSERT_EQ(plain.second.ids, plain.first.ids) << "the premise: a window's worth of the same tokens, the same output";
  for (const Run* r : {&none, &kept}) {
    for (auto [got, want] : {std::pair{&r->first, &plain.first}, {&r->second, &plain.second}, {&r->fork, &plain.fork},
                             {&r->other, &plain.other}}) {
      ASSERT_TRUE(got->status.ok()) << got->status;
      EXPECT_EQ(got->ids, want->ids);
      EXPECT_LE(got->usage.accepted_tokens, got->usage.drafted_tokens);
    }
  }
  // The first turns have no history: the same drafts either way.
  EXPECT_EQ(kept.first.usage.accepted_tokens, none.first.usage.accepted_tokens);
  EXPECT_EQ(kept.other.usage.accepted_tokens, none.other.usage.accepted_tokens);
  // The second turn and the fork find the first turn's output in the history.
  const int64_t most = plain.second.usage.completion_tokens - 1;  // the first token comes from the prompt's step
  std::printf("second turn: %lld of %lld decode tokens from accepted drafts with the history, %lld without\n",
              (long long)kept.second.usage.accepted_tokens, (long long)most, (long long)none.second.usage.accepted_tokens);
  EXPECT_GT(kept.second.usage.accepted_tokens, none.second.usage.accepted_tokens);
  EXPECT_GE(kept.second.usage.accepted_tokens, most * 3 / 4) << "of " << most;
  EXPECT_GT(kept.fork.usage.accepted_tokens, none.fork.usage.accepted_tokens);
}

// Sessions that speculate with a draft model through forks, offloads (state memory for 2 slots, 4
// sessions round robin, a DirStore) and an export/import: the draft state is per job (rebuilt from
// the turn's tokens), so every output equals a plain engine's that did the same operations.
TEST(SpeculativeEngineTest, DraftModelSessionsForkOffloadAndImportLikePlainOnes) {
  const Model m = testing::Taylor(/*eos=*/-1), draft_model = EngineTinyModel("softmax", {}, 5);
  EngineOptions small = testing::Options(64, int64_t(2 * m.StateFloats() * sizeof(float)));
  small.store = testing::DirStore(testing::MakeTempDir("spec_draft_offload"));
  small.speculative = Speculation::kDraft;
  small.draft_model = &draft_model;
  auto spec = StartEngine(m, small);
  auto plain = StartEngine(m, testing::Options());
  using testing::Call;
  auto both = [&](const std::function<absl::StatusOr<SessionInfo>(Engine&)>& op) {
    const absl::StatusOr<SessionInfo> a = op(*spec), b = op(*plain);
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
    EXPECT_EQ(a->position, b->position);
  };
  for (int s = 0; s < 4; ++s) {
    both([&](Engine& e) { return testing::Create(e, "u" + std::to_string(s)); });
  }
  int64_t drafted = 0;
  for (int round = 0; round < 3; ++round) {
    for (int s = 0; s < 4; ++s) {
      const std::string id = "u" + std::to_string(s);
      const std::string prompt = round == 0 ? Repeating(s) : testing::Prompt(round * 4 + s);
      const Outcome a = testing::Generate(*spec, id, prompt, 12), b = testing::Generate(*plain, id, prompt, 12);
      ASSERT_TRUE(a.status.ok() && b.status.ok()) << a.status << b.status;
      EXPECT_EQ(a.ids, b.ids) << id << " round " << round;
      drafted += a.usage.drafted_tokens;
    }
    // A fork of a session that speculated, and an export/import copy: both continue as plain.
    const std::string fork = "f" + std::to_string(round), copy = "c" + std::to_string(round);
    both([&](Engine& e) {
      return Call<absl::StatusOr<SessionInfo>>([&](auto done) { e.ForkSession("u" + std::to_string(round), fork, done); });
    });
    both([&](Engine& e) -> absl::StatusOr<SessionInfo> {
      auto blob = Call<absl::StatusOr<std::string>>([&](auto done) { e.ExportSession("u0", done); });
      if (!blob.ok()) return blob.status();
      return Call<absl::StatusOr<SessionInfo>>([&](auto done) { e.ImportSession(*blob, copy, done); });
    });
    for (const std::string& id : {fork, copy}) {
      const Outcome a = testing::Generate(*spec, id, " and so", 10), b = testing::Generate(*plain, id, " and so", 10);
      ASSERT_TRUE(a.status.ok() && b.status.ok()) << a.status << b.status;
      EXPECT_EQ(a.ids, b.ids) << id;
    }
  }
  EXPECT_GT(drafted, 0);
  EXPECT_GT(spec->stats().sessions_offloaded, 0) << "nothing was offloaded: the test lost its point";
}

TEST(SpeculativeEngineTest, DraftWithoutADraftModelIsRefused) {
  const Model m = testing::Taylor();
  auto e = StartEngine(m, testing::Options());
  GenerateJob j = testing::Job("", "the license", 4);
  j.speculative = Speculation::kDraft;
  const Outcome o = SubmitAsync(*e, j).get();
  EXPECT_EQ(o.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(o.status.message().find("--draft-model"), std::string::npos) << o.status;
}

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
