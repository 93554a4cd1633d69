// Idempotent turns (docs/deployment.md, "Resuming a cut stream"): a resend of a session's last turn
// (same request fingerprint, expected_position where it started) is answered with that turn's stored
// outcome, equal to the original stream, from either store and after a restart or an offload; any
// other request at that position is still refused. An all_or_nothing turn that does not complete is
// rolled back, so its resend runs it again whole and gives the client what one uninterrupted call
// gives.
#include <gtest/gtest.h>

#include <atomic>

#include "server/store/snapshot.h"
#include "tests/server/engine/engine_harness.h"
#include "tests/server/store/redis_harness.h"
#include "tests/testutil.h"

namespace steady {
namespace {

using testing::Create;
using testing::Get;
using testing::Job;
using testing::Options;
using testing::Outcome;
using testing::Play;
using testing::Prompt;
using testing::StartEngine;
using testing::SubmitAsync;
using testing::Taylor;

GenerateJob Turn(const std::string& session, const std::string& prompt, int64_t max_tokens, uint64_t fingerprint,
                 std::optional<int64_t> expected_position = std::nullopt) {
  GenerateJob j = Job(session, prompt, max_tokens);
  j.request_fingerprint = fingerprint;
  j.expected_position = expected_position;
  j.sampling.temperature = 0.8f;  // sampled, seeded: the same tokens on every run
  j.sampling.seed = 7;
  return j;
}

Outcome Send(Engine& e, GenerateJob job) { return SubmitAsync(e, std::move(job)).get(); }

// The replay is the original outcome: ids, text, finish reason and usage, flagged.
void ExpectReplayOf(const Outcome& replay, const Outcome& original) {
  ASSERT_TRUE(replay.status.ok()) << replay.status;
  EXPECT_TRUE(replay.usage.replayed);
  EXPECT_FALSE(original.usage.replayed);
  EXPECT_EQ(replay.ids, original.ids);
  EXPECT_EQ(replay.text, original.text);
  EXPECT_EQ(replay.finish_reason, original.finish_reason);
  EXPECT_EQ(replay.usage.prompt_tokens, original.usage.prompt_tokens);
  EXPECT_EQ(replay.usage.completion_tokens, original.usage.completion_tokens);
  EXPECT_EQ(replay.usage.session_position, original.usage.session_position);
  EXPECT_EQ(replay.usage.cached_tokens, original.usage.cached_tokens);
}

// The same engine, every way of asking: the last turn's resend replays, nothing else does.
TEST(TurnsTest, OnlyAResendOfTheLastTurnIsReplayed) {
  const Model m = Taylor(/*eos=*/-1);
  EngineOptions o = Options();
  o.store = testing::DirStore(testing::MakeTempDir("turns_dir"));
  auto engine = StartEngine(m, o);
  ASSERT_TRUE(Create(*engine, "s").ok());
  Play(*engine, "s", {{Prompt(1), 4}});
  const int64_t p0 = Get(*engine, "s")->position;
  const Outcome first = Send(*engine, Turn("s", Prompt(2), 9, 101, p0));
  ASSERT_TRUE(first.status.ok()) << first.status;
  ASSERT_EQ(first.ids.size(), 9u);
  const int64_t p1 = Get(*engine, "s")->position;
  ExpectReplayOf(Send(*engine, Turn("s", Prompt(2), 9, 101, p0)), first);
  ExpectReplayOf(Send(*engine, Turn("s", Prompt(2), 9, 101, p0)), first);  // as often as asked
  EXPECT_EQ(Get(*engine, "s")->position, p1) << "a replay changes nothing";
  // Another request at that position (its fingerprint differs), one without a fingerprint, and the
  // same request at another position are refused as before.
  EXPECT_EQ(Send(*engine, Turn("s", Prompt(2), 9, 102, p0)).status.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(Send(*engine, Turn("s", Prompt(2), 9, 0, p0)).status.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(Send(*engine, Turn("s", Prompt(2), 9, 101, p0 - 1)).status.code(), absl::StatusCode::kAborted);
  // Once the next turn is in, the older one is no longer the last: refused.
  const Outcome second = Send(*engine, Turn("s", "next", 3, 103, p1));
  ASSERT_TRUE(second.status.ok()) << second.status;
  EXPECT_EQ(Send(*engine, Turn("s", Prompt(2), 9, 101, p0)).status.code(), absl::StatusCode::kAborted);
  ExpectReplayOf(Send(*engine, Turn("s", "next", 3, 103, p1)), second);
  EXPECT_EQ(engine->stats().turns_replayed, 3);
  // A fork has no last turn of its own.
  ASSERT_TRUE(testing::Call<absl::StatusOr<SessionInfo>>([&](auto done) { engine->ForkSession("s", "f", done); }).ok());
  EXPECT_EQ(Send(*engine, Turn("f", "next", 3, 103, p1)).status.code(), absl::StatusCode::kAborted);
}

// The outcome is in the store with the state: after a restart, and for an offloaded session.
TEST(TurnsTest, TheLastTurnSurvivesARestartAndAnOffload) {
  const Model m = Taylor(/*eos=*/-1);
  const std::string dir = testing::MakeTempDir("turns_restart");
  Outcome first;
  int64_t p0 = 0;
  int64_t slot_bytes = 0;
  {
    EngineOptions o = Options();
    o.store = testing::DirStore(dir);
    auto engine = StartEngine(m, o);
    ASSERT_TRUE(Create(*engine, "s").ok());
    ASSERT_TRUE(Create(*engine, "other").ok());
    Play(*engine, "s", {{Prompt(1), 4}});
    p0 = Get(*engine, "s")->position;
    first = Send(*engine, Turn("s", Prompt(4), 6, 201, p0));
    ASSERT_TRUE(first.status.ok()) << first.status;
    slot_bytes = Get(*engine, "s")->state_bytes;
  }
  // One slot: "other"'s turn offloads "s", whose resend then reads the outcome from its blob.
  EngineOptions o = Options(64, slot_bytes);
  o.store = testing::DirStore(dir);
  auto engine = StartEngine(m, o);
  ExpectReplayOf(Send(*engine, Turn("s", Prompt(4), 6, 201, p0)), first);
  Play(*engine, "other", {{"x", 2}});
  ASSERT_FALSE(Get(*engine, "s")->resident);
  ExpectReplayOf(Send(*engine, Turn("s", Prompt(4), 6, 201, p0)), first);
  EXPECT_EQ(Send(*engine, Turn("s", Prompt(4), 6, 202, p0)).status.code(), absl::StatusCode::kAborted);
}

// --durability shutdown: the outcome goes with the state when the session is written at the stop.
TEST(TurnsTest, WithShutdownDurabilityTheLastTurnIsWrittenWithTheState) {
  const Model m = Taylor(/*eos=*/-1);
  const std::string dir = testing::MakeTempDir("turns_shutdown");
  EngineOptions o = Options();
  o.durability = Durability::kShutdown;
  o.store = testing::DirStore(dir);
  Outcome first;
  {
    auto engine = StartEngine(m, o);
    ASSERT_TRUE(Create(*engine, "s").ok());
    first = Send(*engine, Turn("s", Prompt(4), 6, 701, 0));
    ASSERT_TRUE(first.status.ok()) << first.status;
  }
  o.store = testing::DirStore(dir);
  auto engine = StartEngine(m, o);
  ExpectReplayOf(Send(*engine, Turn("s", Prompt(4), 6, 701, 0)), first);
}

// Redis: a replica that took the session over (the first one gone) replays its last turn.
TEST(TurnsTest, AnotherReplicaReplaysTheLastTurnFromRedis) {
  auto redis = testing::RedisServer::Start(testing::MakeTempDir("turns_redis"));
  if (!redis) GTEST_SKIP() << "SKIPPED: redis-server is not installed (scripts/install-deps.sh installs it)";
  const Model m = Taylor(/*eos=*/-1);
  auto options = [&](const std::string& owner) {
    EngineOptions o = Options();
    o.store = testing::RedisStoreAt(redis->url(), "steady:turns:", owner, 500);
    return o;
  };
  auto a = StartEngine(m, options("a"));
  ASSERT_TRUE(Create(*a, "s").ok());
  Play(*a, "s", {{Prompt(1), 3}});
  const int64_t p0 = Get(*a, "s")->position;
  const Outcome first = Send(*a, Turn("s", Prompt(5), 7, 301, p0));
  ASSERT_TRUE(first.status.ok()) << first.status;
  a.reset();  // its leases go
  auto b = StartEngine(m, options("b"));
  ExpectReplayOf(Send(*b, Turn("s", Prompt(5), 7, 301, p0)), first);
  EXPECT_EQ(Send(*b, Turn("s", Prompt(6), 7, 302, p0)).status.code(), absl::StatusCode::kAborted);
}

// Cancels the job after `after` tokens (from the engine thread, as a broken stream's OnCancel does).
GenerateJob CancelledAfter(GenerateJob j, int after) {
  auto flag = std::make_shared<std::atomic<bool>>(false);  // the job's own (a copy shares the original's)
  j.cancelled = flag;
  auto seen = std::make_shared<int>(0);
  j.on_output = [flag, seen, after](const std::string&, const std::vector<int32_t>& ids,
                                    const std::vector<TokenLogprobs>&) {
    if ((*seen += int(ids.size())) >= after) flag->store(true);
  };
  return j;
}

// all_or_nothing: a cut turn is rolled back, and its resend gives what one uninterrupted call gives.
TEST(TurnsTest, AnAllOrNothingTurnCutMidwayIsRolledBackAndRunsAgainWhole) {
  const Model m = Taylor(/*eos=*/-1);
  EngineOptions o = Options();
  o.store = testing::DirStore(testing::MakeTempDir("turns_atomic"));
  auto engine = StartEngine(m, o);
  for (const char* id : {"s", "twin"}) {
    ASSERT_TRUE(Create(*engine, id).ok());
    Play(*engine, id, {{Prompt(1), 4}});
  }
  const int64_t p0 = Get(*engine, "s")->position;
  GenerateJob cut = Turn("s", Prompt(3), 40, 401, p0);
  cut.all_or_nothing = true;
  const Outcome cancelled = Send(*engine, CancelledAfter(cut, 5));
  ASSERT_TRUE(cancelled.status.ok()) << cancelled.status;
  EXPECT_EQ(cancelled.finish_reason, "cancelled");
  ASSERT_GE(cancelled.ids.size(), 5u);
  ASSERT_LT(cancelled.ids.size(), 40u);
  EXPECT_EQ(cancelled.usage.prompt_tokens, 0);
  EXPECT_EQ(cancelled.usage.session_position, p0);
  EXPECT_EQ(Get(*engine, "s")->position, p0);
  EXPECT_EQ(engine->stats().turns_rolled_back, 1);
  // The resend runs the whole turn, equal to the twin's uninterrupted one, the cut part included.
  const Outcome resent = Send(*engine, cut);
  const Outcome whole = Send(*engine, Turn("twin", Prompt(3), 40, 401, p0));
  ASSERT_TRUE(resent.status.ok()) << resent.status;
  EXPECT_FALSE(resent.usage.replayed);
  EXPECT_EQ(resent.ids, whole.ids);
  EXPECT_EQ(resent.text, whole.text);
  EXPECT_EQ(std::vector<int32_t>(whole.ids.begin(), whole.ids.begin() + cancelled.ids.size()), cancelled.ids);
  // The session goes on as the twin does (and the state in the store is the same: a restart agrees).
  EXPECT_EQ(Play(*engine, "s", {{"again", 5}}), Play(*engine, "twin", {{"again", 5}}));
}

// Without all_or_nothing a cancelled turn is kept as far as it went (as before), and its resend is
// answered with that partial outcome, finish_reason "cancelled".
TEST(TurnsTest, ACancelledTurnIsKeptAndItsResendReplaysThePartialOutcome) {
  const Model m = Taylor(/*eos=*/-1);
  EngineOptions o = Options();
  o.store = testing::DirStore(testing::MakeTempDir("turns_cancel"));
  auto engine = StartEngine(m, o);
  ASSERT_TRUE(Create(*engine, "s").ok());
  const Outcome cancelled = Send(*engine, CancelledAfter(Turn("s", Prompt(3), 40, 501, 0), 5));
  ASSERT_TRUE(cancelled.status.ok()) << cancelled.status;
  EXPECT_EQ(cancelled.finish_reason, "cancelled");
  EXPECT_GT(Get(*engine, "s")->position, 0);
  ExpectReplayOf(Send(*engine, Turn("s", Prompt(3), 40, 501, 0)), cancelled);
}

// A resend can reach the server before the end of the attempt it replaces (whose broken stream the
// server has not noticed yet): it waits for that turn to end instead of being refused as busy.
TEST(TurnsTest, AResendWaitsForTheAttemptItReplaces) {
  const Model m = Taylor(/*eos=*/-1);
  auto engine = StartEngine(m, Options());
  ASSERT_TRUE(Create(*engine, "s").ok());
  GenerateJob first = Turn("s", Prompt(3), 60000, 601, 0);
  first.all_or_nothing = true;
  auto cut = first.cancelled;
  auto a = SubmitAsync(*engine, first);
  while (!Get(*engine, "s")->busy) {
  }
  GenerateJob resend = first;
  resend.cancelled = std::make_shared<std::atomic<bool>>(false);
  resend.max_tokens = 6;
  auto b = SubmitAsync(*engine, resend);
  // Without expected_position a second call on a busy session is still refused at once.
  EXPECT_EQ(Send(*engine, Turn("s", "other", 2, 602)).status.code(), absl::StatusCode::kFailedPrecondition);
  cut->store(true);  // the server notices the cut
  const Outcome ended = a.get(), resent = b.get();
  EXPECT_EQ(ended.finish_reason, "cancelled");
  ASSERT_TRUE(resent.status.ok()) << resent.status;
  EXPECT_FALSE(resent.usage.replayed);
  EXPECT_EQ(resent.ids.size(), 6u);
  EXPECT_EQ(std::vector<int32_t>(ended.ids.begin(), ended.ids.begin() + std::min<size_t>(6, ended.ids.size())),
            std::vector<int32_t>(resent.ids.begin(), resent.ids.begin() + std::min<size_t>(6, ended.ids.size())));
}

}  // namespace
}  // namespace steady
