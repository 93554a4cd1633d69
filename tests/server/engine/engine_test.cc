// The engine against model/generate.h: greedy output does not depend on batching, batch size, slot
// count, offloading, restarts, forks or export/import; cancellation, concurrency and bad input give
// the documented codes. Random tiny models with the test tokenizer.
#include "server/engine/engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <future>
#include <mutex>
#include <thread>

#include "model/backend/backend.h"
#include "model/decoder/state_pool.h"
#include "model/generate.h"
#include "server/store/snapshot.h"
#include "tests/server/engine/engine_harness.h"
#include "tests/testutil.h"

namespace steady {
namespace {

using testing::Call;
using testing::Create;
using testing::DirStore;
using testing::EngineTinyModel;
using testing::Generate;
using testing::Get;
using testing::Job;
using testing::Options;
using testing::Outcome;
using testing::Play;
using testing::Prompt;
using testing::StartEngine;
using testing::SubmitAsync;
using testing::Taylor;
using testing::TestTokenizer;
using testing::Turns;

GenerateResult Reference(const Model& m, const std::string& prompt, int max_tokens) {
  std::unique_ptr<Backend> cpu = MakeCpuBackend(m, {});
  GenerateRequest r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  auto out = GenerateText(m, TestTokenizer(), *cpu, 0, r);
  EXPECT_TRUE(out.ok()) << out.status();
  return *out;
}

struct BatchCase {
  std::string mechanism;
  int max_batch;
};
void PrintTo(const BatchCase& c, std::ostream* os) { *os << c.mechanism << "_" << c.max_batch; }

class EngineBatchTest : public ::testing::TestWithParam<BatchCase> {};

// Greedy output of a session alone == beside 31 others submitted together == GenerateText.
// fp32 rounding differs with the GEMM row count and the chunking (model_test bounds it at 1e-4
// relative); fixed seeds keep the greedy choices away from near-ties.
TEST_P(EngineBatchTest, AloneEqualsBatchedEqualsGenerateText) {
  const Model m = GetParam().mechanism == "softmax" ? EngineTinyModel("softmax", nlohmann::json::object(), 99) : Taylor();
  constexpr int kSessions = 32, kMaxTokens = 12;
  auto engine = StartEngine(m, Options(GetParam().max_batch));
  std::vector<std::future<Outcome>> batched;
  for (int i = 0; i < kSessions; ++i) batched.push_back(SubmitAsync(*engine, Job("", Prompt(i), kMaxTokens)));
  for (int i = 0; i < kSessions; ++i) {
    const Outcome together = batched[i].get();
    ASSERT_TRUE(together.status.ok()) << together.status;
    const Outcome alone = Generate(*engine, "", Prompt(i), kMaxTokens);
    const GenerateResult ref = Reference(m, Prompt(i), kMaxTokens);
    EXPECT_EQ(together.ids, ref.tokens) << "prompt " << i;
    EXPECT_EQ(together.text, ref.text) << "prompt " << i;
    EXPECT_EQ(together.finish_reason, ref.finish_reason) << "prompt " << i;
    EXPECT_EQ(together.usage.prompt_tokens, ref.prompt_tokens);
    EXPECT_EQ(alone.ids, ref.tokens) << "prompt " << i;
    EXPECT_EQ(alone.text, ref.text);
  }
  // Ephemeral sessions are gone.
  EXPECT_TRUE(Call<std::vector<SessionInfo>>([&](auto done) { engine->ListSessions(done); }).empty());
  EXPECT_EQ(engine->stats().sessions_resident, 0);
  EXPECT_EQ(engine->stats().queue_depth, 0);
}

INSTANTIATE_TEST_SUITE_P(All, EngineBatchTest,
                         ::testing::Values(BatchCase{"taylor", 1}, BatchCase{"taylor", 4}, BatchCase{"taylor", 64},
                                           BatchCase{"softmax", 1}, BatchCase{"softmax", 4}, BatchCase{"softmax", 64}),
                         [](const auto& info) { return info.param.mechanism + "_" + std::to_string(info.param.max_batch); });

TEST(EngineTest, StopStringsAndSeededSamplingMatchGenerateText) {
  const Model m = Taylor();
  auto engine = StartEngine(m, Options());
  for (int i = 0; i < 6; ++i) {
    GenerateJob j = Job("", Prompt(i), 24);
    j.sampling.temperature = 0.8f;
    j.sampling.top_k = 40;
    j.sampling.seed = 7 + i;
    j.stop = {"e"};
    const Outcome got = SubmitAsync(*engine, j).get();
    std::unique_ptr<Backend> cpu = MakeCpuBackend(m, {});
    GenerateRequest r;
    r.prompt = j.prompt;
    r.max_tokens = 24;
    r.sampling = j.sampling;
    r.stop = j.stop;
    auto ref = GenerateText(m, TestTokenizer(), *cpu, 0, r);
    ASSERT_TRUE(ref.ok());
    EXPECT_EQ(got.text, ref->text);
    EXPECT_EQ(got.finish_reason, ref->finish_reason);
    EXPECT_EQ(got.usage.session_position, cpu->position(0));
  }
}

TEST(EngineTest, TokenIdPromptsEqualTextPrompts) {
  const Model m = Taylor();
  auto engine = StartEngine(m, Options());
  for (int i = 0; i < 4; ++i) {
    const Outcome by_text = Generate(*engine, "", Prompt(i), 8);
    auto ids = TestTokenizer().Encode(Prompt(i));
    ASSERT_TRUE(ids.ok());
    GenerateJob j = Job("", "", 8);
    j.prompt_token_ids = *ids;  // BOS goes in front on the empty session
    const Outcome by_ids = SubmitAsync(*engine, j).get();
    ASSERT_TRUE(by_ids.status.ok()) << by_ids.status;
    EXPECT_EQ(by_ids.ids, by_text.ids);
    EXPECT_EQ(by_ids.usage.prompt_tokens, by_text.usage.prompt_tokens);
    j.prompt_token_ids.insert(j.prompt_token_ids.begin(), m.config().bos_token_id);  // ... once, not twice
    const Outcome with_bos = SubmitAsync(*engine, j).get();
    EXPECT_EQ(with_bos.ids, by_text.ids);
    EXPECT_EQ(with_bos.usage.prompt_tokens, by_text.usage.prompt_tokens);
  }
  GenerateJob out_of_range = Job("", "", 3);
  out_of_range.prompt_token_ids = {1, m.vocab_size()};
  const Outcome refused = SubmitAsync(*engine, out_of_range).get();
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(refused.status.message()).find("prompt_token_ids: [1]"), std::string::npos) << refused.status;
  GenerateJob both = Job("", "hi", 3);
  both.prompt_token_ids = {5};
  EXPECT_EQ(SubmitAsync(*engine, both).get().status.code(), absl::StatusCode::kInvalidArgument);
}

// Each sampled token's log-probability equals log-softmax of the logits a plain CPU run computes at
// that step; the top tokens are the most likely, and greedy picks the first of them.
TEST(EngineTest, LogprobsMatchAPlainForwardPass) {
  const Model m = Taylor();
  auto engine = StartEngine(m, Options());
  GenerateJob j = Job("", Prompt(2), 10);
  j.top_logprobs = 5;
  const Outcome got = SubmitAsync(*engine, j).get();
  ASSERT_TRUE(got.status.ok()) << got.status;
  ASSERT_EQ(got.logprobs.size(), got.ids.size());
  std::unique_ptr<Backend> cpu = MakeCpuBackend(m, {});
  std::vector<int32_t> prompt = {m.config().bos_token_id};
  auto ids = TestTokenizer().Encode(Prompt(2));
  ASSERT_TRUE(ids.ok());
  prompt.insert(prompt.end(), ids->begin(), ids->end());
  std::vector<float> logits = Prefill(*cpu, 0, prompt, 64);
  for (size_t t = 0; t < got.ids.size(); ++t) {
    const TokenLogprobs& l = got.logprobs[t];
    EXPECT_EQ(l.chosen.token, got.ids[t]);
    EXPECT_NEAR(l.chosen.logprob, Logprob(logits.data(), m.vocab_size(), got.ids[t]), 1e-3) << "token " << t;
    ASSERT_EQ(l.top.size(), 5u);
    EXPECT_EQ(l.top[0].token, l.chosen.token);  // greedy
    for (size_t k = 1; k < l.top.size(); ++k) EXPECT_LE(l.top[k].logprob, l.top[k - 1].logprob);
    EXPECT_FALSE(l.chosen.text.empty());
    logits = Prefill(*cpu, 0, {got.ids[t]}, 1);
  }
  const Outcome plain = Generate(*engine, "", Prompt(2), 10);
  EXPECT_EQ(plain.ids, got.ids);  // asking for log-probabilities changes nothing
  EXPECT_TRUE(plain.logprobs.empty());
}

TEST(EngineTest, ForkThenGenerateEqualsFreshSessionWithTheSamePrefix) {
  const Model m = Taylor();
  auto engine = StartEngine(m, Options());
  ASSERT_TRUE(Create(*engine, "a").ok());
  ASSERT_TRUE(Create(*engine, "fresh").ok());
  const Turns prefix = {{Prompt(3), 6}, {Prompt(40), 4}};
  Play(*engine, "a", prefix);
  auto forked = Call<absl::StatusOr<SessionInfo>>([&](auto done) { engine->ForkSession("a", "b", done); });
  ASSERT_TRUE(forked.ok()) << forked.status();
  EXPECT_EQ(forked->position, Get(*engine, "a")->position);
  Play(*engine, "fresh", prefix);
  const Turns next = {{Prompt(5), 10}};
  const auto from_fork = Play(*engine, "b", next);
  EXPECT_EQ(from_fork, Play(*engine, "fresh", next));
  EXPECT_EQ(from_fork, Play(*engine, "a", next));
  // An empty new_id gets a generated one.
  auto generated = Call<absl::StatusOr<SessionInfo>>([&](auto done) { engine->ForkSession("a", "", done); });
  ASSERT_TRUE(generated.ok());
  EXPECT_EQ(generated->session_id.size(), 32u);
}

TEST(EngineTest, ExportImportContinuesLikeTheOriginal) {
  const Model m = EngineTinyModel("softmax", nlohmann::json::object(), 5);
  auto engine = StartEngine(m, Options());
  ASSERT_TRUE(Create(*engine, "orig").ok());
  Play(*engine, "orig", {{Prompt(8), 7}});
  auto blob = Call<absl::StatusOr<std::string>>([&](auto done) { engine->ExportSession("orig", done); });
  ASSERT_TRUE(blob.ok()) << blob.status();
  auto imported = Call<absl::StatusOr<SessionInfo>>([&](auto done) { engine->ImportSession(*blob, "copy", done); });
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_EQ(imported->position, Get(*engine, "orig")->position);
  const Turns next = {{Prompt(9), 9}};
  EXPECT_EQ(Play(*engine, "copy", next), Play(*engine, "orig", next));
  // Into another engine of the same model too.
  auto other = StartEngine(m, Options());
  auto again = Call<absl::StatusOr<SessionInfo>>([&](auto done) { other->ImportSession(*blob, "", done); });
  ASSERT_TRUE(again.ok()) << again.status();
}

// Destroy the engine with sessions mid-life, start another on the same store, continue: identical to
// an uninterrupted run. Durability::kShutdown: the store is written by ~Engine (turn durability:
// tests/server/engine/durability_test.cc).
TEST(EngineTest, RestartContinuesEverySessionExactly) {
  const Model m = Taylor();
  const std::string dir = testing::MakeTempDir("engine_restart");
  const Turns before = {{Prompt(11), 5}, {Prompt(2), 3}}, after = {{Prompt(12), 8}};
  std::vector<std::vector<std::vector<int32_t>>> uninterrupted;
  {
    auto e = StartEngine(m, Options());
    for (int s = 0; s < 4; ++s) {
      const std::string id = "s" + std::to_string(s);
      ASSERT_TRUE(Create(*e, id).ok());
      Play(*e, id, Turns(before.begin(), before.begin() + 1 + s % 2));
      uninterrupted.push_back(Play(*e, id, after));
    }
    ASSERT_TRUE(Create(*e, "empty").ok());
  }
  EngineOptions o = Options();
  o.store = DirStore(dir);
  o.durability = Durability::kShutdown;
  std::vector<int64_t> positions;
  {
    auto e = StartEngine(m, o);
    for (int s = 0; s < 4; ++s) {
      const std::string id = "s" + std::to_string(s);
      ASSERT_TRUE(Create(*e, id).ok());
      Play(*e, id, Turns(before.begin(), before.begin() + 1 + s % 2));
      positions.push_back(Get(*e, id)->position);
    }
    ASSERT_TRUE(Create(*e, "empty").ok());
  }  // ~Engine writes every session
  auto e = StartEngine(m, o);
  const auto listed = Call<std::vector<SessionInfo>>([&](auto done) { e->ListSessions(done); });
  ASSERT_EQ(listed.size(), 5u);
  for (int s = 0; s < 4; ++s) {
    const std::string id = "s" + std::to_string(s);
    auto info = Get(*e, id);
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->position, positions[s]);
    EXPECT_FALSE(info->resident);
    EXPECT_EQ(Play(*e, id, after), uninterrupted[s]) << id;
  }
  EXPECT_EQ(Get(*e, "empty")->position, 0);
  EXPECT_TRUE(Generate(*e, "empty", "hello", 2).status.ok());
}

// State memory for 2 slots, 5 sessions used round robin: every use restores an offloaded session,
// and the outputs equal an unconstrained engine's.
TEST(EngineTest, OffloadedSessionsContinueExactly) {
  const Model m = Taylor();
  EngineOptions small = Options(64, int64_t(2 * m.StateFloats() * sizeof(float)));
  small.store = DirStore(testing::MakeTempDir("engine_offload"));
  auto constrained = StartEngine(m, small);
  auto unconstrained = StartEngine(m, Options());
  int64_t most_offloaded = 0;
  for (int round = 0; round < 3; ++round) {
    for (int s = 0; s < 5; ++s) {
      const std::string id = "u" + std::to_string(s);
      if (round == 0) {
        ASSERT_TRUE(Create(*constrained, id).ok());
        ASSERT_TRUE(Create(*unconstrained, id).ok());
      }
      const Turns turn = {{Prompt(round * 5 + s), 4}};
      EXPECT_EQ(Play(*constrained, id, turn), Play(*unconstrained, id, turn)) << id << " round " << round;
      most_offloaded = std::max(most_offloaded, constrained->stats().sessions_offloaded);
      EXPECT_LE(constrained->stats().sessions_resident, 2);
    }
  }
  EXPECT_EQ(most_offloaded, 3);
  // Fork and export work on offloaded sessions too.
  auto forked = Call<absl::StatusOr<SessionInfo>>([&](auto done) { constrained->ForkSession("u0", "u0b", done); });
  ASSERT_TRUE(forked.ok()) << forked.status();
  EXPECT_EQ(forked->position, Get(*constrained, "u0")->position);
  EXPECT_EQ(Play(*constrained, "u0b", {{"more", 5}}), Play(*unconstrained, "u0", {{"more", 5}}));
}

// expected_position makes a retried turn exactly-once: a mismatch is ABORTED and changes nothing.
TEST(EngineTest, ExpectedPositionGuardsRetries) {
  const Model m = Taylor();
  auto engine = StartEngine(m, Options());
  ASSERT_TRUE(Create(*engine, "r").ok());
  GenerateJob first = Job("r", Prompt(2), 3);
  first.expected_position = 0;
  ASSERT_TRUE(SubmitAsync(*engine, first).get().status.ok());
  const int64_t after = Get(*engine, "r")->position;
  // The same turn again, as a client that never saw the first one's end would send it.
  const Outcome again = SubmitAsync(*engine, first).get();
  EXPECT_EQ(again.status.code(), absl::StatusCode::kAborted) << again.status;
  EXPECT_NE(std::string(again.status.message()).find("position " + std::to_string(after)), std::string::npos)
      << again.status;
  EXPECT_EQ(Get(*engine, "r")->position, after);
  GenerateJob next = Job("r", Prompt(3), 2);
  next.expected_position = after;
  EXPECT_TRUE(SubmitAsync(*engine, next).get().status.ok());
}

TEST(EngineTest, CancelStopsWithinAStepAndKeepsTheSessionConsistent) {
  const Model m = Taylor(/*eos=*/-1);
  auto engine = StartEngine(m, Options());
  ASSERT_TRUE(Create(*engine, "c").ok());
  GenerateJob j = Job("c", Prompt(4), 60000);
  auto flag = j.cancelled;
  int seen = 0;
  j.on_output = [&](const std::string&, const std::vector<int32_t>& ids, const std::vector<TokenLogprobs>&) {
    seen += int(ids.size());
    if (seen == 5) flag->store(true);
  };
  const Outcome o = SubmitAsync(*engine, j).get();
  ASSERT_TRUE(o.status.ok()) << o.status;
  EXPECT_EQ(o.finish_reason, "cancelled");
  EXPECT_EQ(o.usage.completion_tokens, 5);  // every token the client saw is in the state
  EXPECT_EQ(o.usage.session_position, o.usage.prompt_tokens + 5);
  EXPECT_EQ(Get(*engine, "c")->position, o.usage.session_position);
  EXPECT_FALSE(Get(*engine, "c")->busy);
  // The session goes on, as a session with the same tokens would.
  ASSERT_TRUE(Create(*engine, "same").ok());
  Play(*engine, "same", {{Prompt(4), 5}});
  EXPECT_EQ(Play(*engine, "c", {{"next", 6}}), Play(*engine, "same", {{"next", 6}}));
}

TEST(EngineTest, CancelMidPromptRollsThePromptBack) {
  const Model m = Taylor(/*eos=*/-1);
  EngineOptions o = Options();
  o.prefill_budget = 8;
  auto engine = StartEngine(m, o);
  ASSERT_TRUE(Create(*engine, "p").ok());
  ASSERT_TRUE(Create(*engine, "twin").ok());
  Play(*engine, "p", {{Prompt(3), 3}});
  Play(*engine, "twin", {{Prompt(3), 3}});
  const int64_t before = Get(*engine, "p")->position;
  // A decoding job cancels the long prompt from the engine thread a few of its own tokens after the
  // prompt's prefill has begun: each of its tokens asks the engine (a query served between steps,
  // on the engine thread) whether the session is busy yet, so however the test's threads are
  // scheduled the cancel lands a few steps into the prompt's ~50 chunks.
  std::string text;
  for (int i = 0; i < 5; ++i) text += (i ? " " : "") + Prompt(89);
  GenerateJob long_prompt = Job("p", text, 5);
  auto flag = long_prompt.cancelled;
  GenerateJob ticker = Job("", "tick", 60000);  // until stop_ticker
  auto stop_ticker = ticker.cancelled;
  std::atomic<bool> armed{false};
  bool asking = false;  // engine thread only
  int ticks = 0;
  Engine* const e = engine.get();
  ticker.on_output = [&, e](const std::string&, const std::vector<int32_t>&, const std::vector<TokenLogprobs>&) {
    if (armed.load()) {
      if (++ticks == 3) flag->store(true);
      return;
    }
    if (asking) return;
    asking = true;
    e->GetSession("p", [&](absl::StatusOr<SessionInfo> info) {
      asking = false;
      if (info.ok() && info->busy) armed.store(true);
    });
  };
  auto t = SubmitAsync(*engine, ticker);
  auto p = SubmitAsync(*engine, long_prompt);
  const Outcome cancelled = p.get();
  stop_ticker->store(true);
  t.get();
  Get(*engine, "p");  // served after any query the ticker left behind, which refers to this frame
  ASSERT_TRUE(armed.load()) << "the long prompt never showed busy";
  ASSERT_TRUE(cancelled.status.ok()) << cancelled.status;
  EXPECT_EQ(cancelled.finish_reason, "cancelled");
  EXPECT_EQ(cancelled.usage.prompt_tokens, 0);
  EXPECT_EQ(cancelled.usage.session_position, before);
  EXPECT_EQ(Get(*engine, "p")->position, before);
  EXPECT_EQ(Play(*engine, "p", {{"again", 6}}), Play(*engine, "twin", {{"again", 6}}));
}

TEST(EngineTest, SecondGenerateOnABusySessionIsRefused) {
  const Model m = Taylor(/*eos=*/-1);
  auto engine = StartEngine(m, Options());
  ASSERT_TRUE(Create(*engine, "busy").ok());
  GenerateJob first = Job("busy", "one", 60000);
  auto flag = first.cancelled;
  auto a = SubmitAsync(*engine, first);
  const Outcome second = Generate(*engine, "busy", "two", 3);
  EXPECT_EQ(second.status.code(), absl::StatusCode::kFailedPrecondition) << second.status << " " << second.finish_reason;
  EXPECT_TRUE(Get(*engine, "busy")->busy);
  // Session operations that need a quiet state refuse too.
  EXPECT_EQ(Call<absl::Status>([&](auto done) { engine->DeleteSession("busy", done); }).code(),
            absl::StatusCode::kFailedPrecondition);
  flag->store(true);
  EXPECT_EQ(a.get().finish_reason, "cancelled");
  EXPECT_TRUE(Generate(*engine, "busy", "three", 2).status.ok());
}

TEST(EngineTest, FullQueueIsResourceExhausted) {
  const Model m = Taylor(/*eos=*/-1);
  EngineOptions o = Options();
  o.max_queue = 1;
  auto engine = StartEngine(m, o);
  GenerateJob first = Job("", "one", 60000);
  auto flag = first.cancelled;
  auto a = SubmitAsync(*engine, first);
  const Outcome second = Generate(*engine, "", "two", 3);
  EXPECT_EQ(second.status.code(), absl::StatusCode::kResourceExhausted) << second.status;
  flag->store(true);
  a.get();
  EXPECT_TRUE(Generate(*engine, "", "three", 2).status.ok());
}

void ExpectInvalid(const Outcome& o, const std::string& field) {
  EXPECT_EQ(o.status.code(), absl::StatusCode::kInvalidArgument) << o.status;
  EXPECT_NE(std::string(o.status.message()).find(field), std::string::npos) << o.status;
}

TEST(EngineTest, BadInputsGetTheRightCodesNamingTheField) {
  const Model m = Taylor();
  EngineOptions o = Options();
  o.max_prompt_tokens = 16;
  o.max_new_tokens = 100;
  auto engine = StartEngine(m, o);
  GenerateJob nan = Job("", "hi", 3);
  nan.sampling.temperature = std::nanf("");
  ExpectInvalid(SubmitAsync(*engine, nan).get(), "temperature");
  ExpectInvalid(Generate(*engine, "", "bad \xC3\x28 utf8", 3), "prompt");
  ExpectInvalid(Generate(*engine, "", "overlong \xC0\xAF", 3), "prompt");
  ExpectInvalid(Generate(*engine, "", Prompt(50), 3), "max_prompt_tokens");
  ExpectInvalid(Generate(*engine, "", "hi", 101), "max_tokens");
  ExpectInvalid(Generate(*engine, "", "hi", -1), "max_tokens");
  ExpectInvalid(Generate(*engine, "bad/id", "hi", 3), "session_id");
  ExpectInvalid(Generate(*engine, std::string(129, 'a'), "hi", 3), "session_id");
  GenerateJob empty_stop = Job("", "hi", 3);
  empty_stop.stop = {""};
  ExpectInvalid(SubmitAsync(*engine, empty_stop).get(), "stop[0]");
  GenerateJob too_many = Job("", "hi", 3);
  too_many.top_logprobs = kMaxTopLogprobs + 1;
  ExpectInvalid(SubmitAsync(*engine, too_many).get(), "top_logprobs");
  EXPECT_EQ(Generate(*engine, "nobody", "hi", 3).status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Get(*engine, "nobody").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Create(*engine, "bad id").status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(Create(*engine, "x").ok());
  EXPECT_EQ(Create(*engine, "x").status().code(), absl::StatusCode::kAlreadyExists);
  auto generated = Create(*engine, "");
  ASSERT_TRUE(generated.ok());
  EXPECT_EQ(generated->session_id.size(), 32u);
  // Corrupt imports: flipped byte, garbage, another model's snapshot.
  Play(*engine, "x", {{"some text", 2}});
  auto blob = Call<absl::StatusOr<std::string>>([&](auto done) { engine->ExportSession("x", done); });
  ASSERT_TRUE(blob.ok());
  auto import = [&](std::string b) {
    return Call<absl::StatusOr<SessionInfo>>([&](auto done) { engine->ImportSession(b, "y", done); }).status();
  };
  std::string flipped = *blob;
  flipped[flipped.size() / 2] ^= 1;
  EXPECT_EQ(import(flipped).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(import("not a snapshot at all").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(import("").code(), absl::StatusCode::kInvalidArgument);
  const Model other = EngineTinyModel("taylor", {{"order", 2}}, 4321);
  auto other_engine = StartEngine(other, Options());
  ASSERT_TRUE(Create(*other_engine, "o").ok());
  auto foreign = Call<absl::StatusOr<std::string>>([&](auto done) { other_engine->ExportSession("o", done); });
  ASSERT_TRUE(foreign.ok());
  const absl::Status st = import(*foreign);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(st.message()).find("fingerprint"), std::string::npos) << st;
  EXPECT_EQ(Get(*engine, "y").status().code(), absl::StatusCode::kNotFound);
}

TEST(EngineTest, WithoutSessionDirCapacityIsTheSlotCount) {
  const Model m = Taylor();
  auto engine = StartEngine(m, Options(64, int64_t(2 * m.StateFloats() * sizeof(float))));
  ASSERT_TRUE(Create(*engine, "one").ok());
  ASSERT_TRUE(Create(*engine, "two").ok());
  EXPECT_EQ(Create(*engine, "three").status().code(), absl::StatusCode::kResourceExhausted);
  // No slot can ever free up for an ephemeral session either.
  EXPECT_EQ(Generate(*engine, "", "hi", 2).status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(Generate(*engine, "two", "hi", 2).status.ok());
  EXPECT_TRUE(Call<absl::Status>([&](auto done) { engine->DeleteSession("one", done); }).ok());
  EXPECT_TRUE(Generate(*engine, "", "hi", 2).status.ok());
}

TEST(EngineTest, StartRefusesBadOptions) {
  const Model m = Taylor();
  EngineOptions o;
  o.max_batch = 0;
  auto e = Engine::Start(m, TestTokenizer(), o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(std::string(e.status().message()).find("max_batch"), std::string::npos);
}

TEST(EngineTest, UnknownDeviceIsRefusedAtStart) {
  EngineOptions o = Options();
  o.device = "tpu";
  auto e = Engine::Start(Taylor(), TestTokenizer(), o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(e.status().message()).find("--device"), std::string::npos) << e.status();
}

// On a GPU a softmax session's KV cache is preallocated to --max-context tokens: a request that
// would pass it is refused before it runs, and the session stays usable. Constant-state sessions
// have no such bound.
TEST(EngineTest, CudaKvCapacityIsEnforcedPerRequest) {
  if (!CudaDevicePresent()) GTEST_SKIP() << "no CUDA device";
  EngineOptions o = Options();
  o.device = "cuda";
  o.max_context = 24;
  const Model softmax = EngineTinyModel("softmax", nlohmann::json::object(), 5);
  std::unique_ptr<Engine> e = StartEngine(softmax, o);
  EXPECT_EQ(e->device().rfind("cuda", 0), 0u) << e->device();
  ASSERT_TRUE(Create(*e, "s").ok());
  const Outcome too_long = Generate(*e, "s", "a b c d", 30);
  EXPECT_EQ(too_long.status.code(), absl::StatusCode::kOutOfRange) << too_long.status;
  EXPECT_NE(std::string(too_long.status.message()).find("--max-context"), std::string::npos);
  const Outcome fits = Generate(*e, "s", "a b c d", 8);
  EXPECT_TRUE(fits.status.ok()) << fits.status;
  EXPECT_EQ(Get(*e, "s")->position, fits.usage.session_position);

  const Model taylor = Taylor();
  std::unique_ptr<Engine> constant = StartEngine(taylor, o);
  EXPECT_TRUE(Generate(*constant, "", "a b c d", 30).status.ok());
}

// A CPU backend that reports a KV capacity, as the CUDA backend does for softmax layers.
class BoundedBackend : public Backend {
 public:
  BoundedBackend(const Model& m, int64_t cap) : Backend(m), cpu_(MakeCpuBackend(m, {})), cap_(cap) {}
  std::string Name() const override { return "bounded cpu"; }
  int slots() const override { return cpu_->slots(); }
  int64_t position(int slot) const override { return cpu_->position(slot); }
  int64_t max_context() const override { return cap_; }
  void Reset(int slot) override { cpu_->Reset(slot); }
  void Forward(const std::vector<Segment>& s, std::vector<float>* logits) override {
    for (const Segment& seg : s) EXPECT_LE(position(seg.slot) + int64_t(seg.tokens.size()), cap_);
    cpu_->Forward(s, logits);
  }
  SlotState ReadSlot(int slot) override { return cpu_->ReadSlot(slot); }
  void WriteSlot(int slot, const SlotState& state) override { cpu_->WriteSlot(slot, state); }
  void CopySlot(int from, int to) override { cpu_->CopySlot(from, to); }
  double TimeAttention(int layer, int batch, int reps) override { return cpu_->TimeAttention(layer, batch, reps); }
  int64_t WeightBytes() const override { return cpu_->WeightBytes(); }
  int64_t StateBytesPerSlot() const override { return cpu_->StateBytesPerSlot(); }
  int64_t BytesInUse(int slot) const override { return cpu_->BytesInUse(slot); }
  double CopyBandwidth(int64_t bytes) override { return cpu_->CopyBandwidth(bytes); }

 private:
  std::unique_ptr<Backend> cpu_;
  int64_t cap_;
};

// GenerateText refuses, before running anything, a request that would pass the backend's KV
// capacity; the session is untouched and a request that fits still runs.
TEST(GenerateTextTest, RefusesToPassTheBackendsKvCapacity) {
  const Model m = EngineTinyModel("softmax", nlohmann::json::object(), 5);
  BoundedBackend b(m, 24);
  GenerateRequest r;
  r.prompt = "a b c d";
  r.max_tokens = 30;
  auto refused = GenerateText(m, TestTokenizer(), b, 0, r);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(std::string(refused.status().message()).find("past the 24 tokens"), std::string::npos) << refused.status();
  EXPECT_EQ(b.position(0), 0);
  r.max_tokens = 8;
  auto fits = GenerateText(m, TestTokenizer(), b, 0, r);
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ(b.position(0), fits->prompt_tokens + int64_t(fits->tokens.size()));
}

// On a GPU the engine draws tokens on the device (only ids come back); greedy output is the same
// as with host sampling over the same backend, for several sessions decoding together.
TEST(EngineTest, CudaDeviceSamplingMatchesHostSamplingWhenGreedy) {
  if (!CudaDevicePresent()) GTEST_SKIP() << "no CUDA device";
  const Model m = Taylor();
  std::vector<std::string> outputs[2];
  for (int device_sampling = 0; device_sampling < 2; ++device_sampling) {
    EngineOptions o = Options();
    o.device = "cuda";
    o.device_sampling = device_sampling == 1;
    std::unique_ptr<Engine> e = StartEngine(m, o);
    std::vector<std::future<Outcome>> pending;
    for (int i = 0; i < 6; ++i) pending.push_back(SubmitAsync(*e, Job("", Prompt(i), 20)));
    for (auto& f : pending) {
      const Outcome out = f.get();
      EXPECT_TRUE(out.status.ok()) << out.status;
      outputs[device_sampling].push_back(out.text);
    }
  }
  EXPECT_EQ(outputs[1], outputs[0]);
}

}  // namespace
// Tenants share each step fairly (server/engine/scheduler.h): tenant A's 64 streams (the load) cannot
// starve tenant B's one. Measured in steps, not seconds: the engine thread runs every on_output in order, so the A
// tokens between two B tokens count the steps B waited (max_batch 4: at most 3 A rows a step beside B).
// Without tenants the same load makes B wait for its turn in the round robin.
std::vector<int64_t> ATokensBetweenBTokens(bool tenants) {
  Model m = Taylor(/*eos=*/-1);
  auto engine = StartEngine(m, Options(/*max_batch=*/4, int64_t(1) << 24));
  std::mutex mu;
  std::string order;  // 'A' or 'B' per sampled token, in the engine thread's order
  auto job = [&](char who, int64_t max_tokens) {
    GenerateJob j = Job("", Prompt(0), max_tokens);
    if (tenants) j.quota.tenant = std::string(1, who);
    j.on_output = [&, who](const std::string&, const std::vector<int32_t>& ids, const std::vector<TokenLogprobs>&) {
      std::lock_guard lock(mu);
      order.append(ids.size(), who);
    };
    return j;
  };
  constexpr int kAStreams = 64;
  std::vector<std::future<Outcome>> a;
  for (int i = 0; i < kAStreams; ++i) a.push_back(SubmitAsync(*engine, job('A', 60)));
  // B arrives once every A stream decodes (their first tokens come with their prefill).
  for (;;) {
    {
      std::lock_guard lock(mu);
      if (order.size() >= 2 * kAStreams) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  Outcome b = SubmitAsync(*engine, job('B', 20)).get();
  EXPECT_TRUE(b.status.ok()) << b.status;
  for (auto& f : a) EXPECT_TRUE(f.get().status.ok());
  std::lock_guard lock(mu);
  std::vector<int64_t> gaps;
  int64_t since = -1;  // A tokens since B's last token; -1 before B's first
  for (char c : order) {
    if (c == 'B') {
      if (since >= 0) gaps.push_back(since);
      since = 0;
    } else if (since >= 0) {
      ++since;
    }
  }
  return gaps;
}

TEST(EngineTest, ATenantsFloodDoesNotSlowAnotherTenantsStream) {
  const std::vector<int64_t> fair = ATokensBetweenBTokens(/*tenants=*/true);
  ASSERT_EQ(fair.size(), 19u);
  for (int64_t gap : fair) EXPECT_LE(gap, 3);  // one step between B's tokens: its unloaded pace
  const std::vector<int64_t> shared = ATokensBetweenBTokens(/*tenants=*/false);
  ASSERT_EQ(shared.size(), 19u);
  EXPECT_GT(*std::max_element(shared.begin(), shared.end()), 3);  // the control: B waits its turn
}

}  // namespace steady
