// The Redis session store against a real redis-server on 127.0.0.1: the store's contract, leases and
// fencing between two stores (two replicas), Redis going away and coming back; and two engines
// sharing one Redis as two replicas do (a session moves from one to the other exactly).
#include "server/store/redis_store.h"

#include <chrono>
#include <cstdio>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "base/status.h"
#include "server/engine/engine.h"
#include "server/store/snapshot.h"
#include "tests/server/engine/engine_harness.h"
#include "tests/server/store/redis_harness.h"
#include "tests/testutil.h"

namespace steady {
namespace {

using testing::Create;
using testing::Generate;
using testing::Get;
using testing::Options;
using testing::Play;
using testing::Prompt;
using testing::StartEngine;
using testing::SubmitAsync;
using testing::Taylor;
using testing::Turns;

class RedisStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    redis_ = testing::RedisServer::Start(testing::MakeTempDir("redis"));
    if (!redis_) GTEST_SKIP() << "SKIPPED: redis-server is not installed (scripts/install-deps.sh installs it)";
  }

  std::unique_ptr<RedisStore> Open(const std::string& owner, int64_t lease_ms = 10000) {
    RedisStoreOptions o;
    o.url = redis_->url();
    o.key_prefix = "steady:test:";
    o.owner = owner;
    o.lease_ms = lease_ms;
    auto store = RedisStore::Open(o);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  std::unique_ptr<testing::RedisServer> redis_;
};

TEST(RedisUrlTest, ParsesAndRefuses) {
  auto a = ParseRedisUrl("redis://10.0.0.5:6380/2");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "10.0.0.5");
  EXPECT_EQ(a->port, 6380);
  EXPECT_EQ(a->db, 2);
  EXPECT_EQ(ParseRedisUrl("redis://cache").value().port, 6379);
  for (const char* bad : {"http://x:1", "redis://", "redis://x:0", "redis://x:70000", "redis://x:1/y", "redis://:5"}) {
    EXPECT_EQ(ParseRedisUrl(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST_F(RedisStoreTest, PutGetHeadListDeleteUnderALease) {
  auto store = Open("a");
  ASSERT_TRUE(store);
  EXPECT_EQ(store->Get("s").status().code(), absl::StatusCode::kNotFound);
  // A write needs the lease.
  EXPECT_EQ(store->Put({{"s", "x"}})[0].code(), absl::StatusCode::kAborted);
  ASSERT_TRUE(store->Acquire("s").ok());
  ASSERT_TRUE(store->Acquire("t").ok());
  const std::string big(3 << 20, 'b');  // megabytes, as a llama1b-shaped session
  for (const absl::Status& s : store->Put({{"s", big}, {"t", "small"}})) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(*store->Get("s"), big);
  EXPECT_EQ(*store->Head("s", 10), big.substr(0, 10));
  ASSERT_TRUE(store->Put({{"s", "replaced"}})[0].ok());
  EXPECT_EQ(*store->Get("s"), "replaced");
  EXPECT_EQ(*store->List(), (std::vector<std::string>{"s", "t"}));
  ASSERT_TRUE(store->Delete("s").ok());
  EXPECT_EQ(store->Get("s").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*store->List(), std::vector<std::string>{"t"});
  EXPECT_FALSE(store->Holds("s"));
}

// Two replicas: a held session is refused to the other with UNAVAILABLE naming the holder; released
// or expired, the other takes it over with a new epoch, and the former owner's writes are fenced.
TEST_F(RedisStoreTest, LeasesAndFencing) {
  auto a = Open("replica-a", 300), b = Open("replica-b", 300);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->Acquire("s").ok());
  ASSERT_TRUE(a->Put({{"s", "from a"}})[0].ok());
  const absl::Status held = b->Acquire("s");
  EXPECT_EQ(held.code(), absl::StatusCode::kUnavailable) << held;
  EXPECT_NE(std::string(held.message()).find("replica-a"), std::string::npos) << held;
  // a's lease is renewed by its thread: still refused well past one lease period.
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  EXPECT_EQ(b->Acquire("s").code(), absl::StatusCode::kUnavailable);
  a->Release("s");
  ASSERT_TRUE(b->Acquire("s").ok());
  EXPECT_GT(b->EpochOf("s"), 0u);
  ASSERT_TRUE(b->Put({{"s", "from b"}})[0].ok());
  EXPECT_EQ(*a->Get("s"), "from b");
}

// A former owner that still believes it holds a session (a process paused past its lease): its
// write after another replica's takeover is refused by the epoch check, and the newer state stays.
TEST_F(RedisStoreTest, AFormerOwnersWriteIsFenced) {
  auto a = Open("replica-a", 10000);  // renews every 3.3 s: it has not noticed by the time it writes
  auto b = Open("replica-b");
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->Acquire("s").ok());
  ASSERT_TRUE(a->Put({{"s", "a1"}})[0].ok());
  // a's lease lapses while a is paused (what an expiry does to the key).
  const std::string del = "redis-cli -p " + std::to_string(redis_->port()) + " DEL steady:test:lease:s > /dev/null";
  ASSERT_EQ(std::system(del.c_str()), 0);
  ASSERT_TRUE(b->Acquire("s").ok());
  EXPECT_GT(b->EpochOf("s"), a->EpochOf("s"));
  ASSERT_TRUE(b->Put({{"s", "b1"}})[0].ok());
  ASSERT_TRUE(a->Holds("s")) << "a has not noticed yet: the write below reaches Redis";
  const absl::Status stale = a->Put({{"s", "a2"}})[0];
  EXPECT_EQ(stale.code(), absl::StatusCode::kAborted) << stale;
  EXPECT_NE(std::string(stale.message()).find("taken it over"), std::string::npos) << stale;
  EXPECT_FALSE(a->Holds("s"));
  EXPECT_EQ(*b->Get("s"), "b1");
  EXPECT_EQ(a->Delete("s").code(), absl::StatusCode::kAborted);
  EXPECT_EQ(*b->List(), std::vector<std::string>{"s"});
}

TEST_F(RedisStoreTest, RedisDownIsUnavailableAndComesBackWithEverythingAcknowledged) {
  auto store = Open("a");
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->Acquire("s").ok());
  ASSERT_TRUE(store->Put({{"s", "durable"}})[0].ok());
  redis_->Kill();
  const absl::Status down = store->Put({{"s", "lost"}})[0];
  EXPECT_EQ(down.code(), absl::StatusCode::kUnavailable) << down;
  EXPECT_NE(std::string(down.message()).find(redis_->url()), std::string::npos) << down;
  EXPECT_EQ(store->Get("s").status().code(), absl::StatusCode::kUnavailable);
  ASSERT_TRUE(redis_->Restart());
  // The append-only file kept the acknowledged write; the store reconnects by itself.
  auto back = store->Get("s");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, "durable");
  ASSERT_TRUE(store->Acquire("s").ok());
  EXPECT_TRUE(store->Put({{"s", "again"}})[0].ok());
}

// Two engines on one Redis, as two replicas: a session created and played on one is served by the
// other once the first lets it go, continuing exactly; while the first holds it the second answers
// UNAVAILABLE; ListSessions on either lists both replicas' sessions.
TEST_F(RedisStoreTest, TwoEnginesShareSessionsExactly) {
  const Model m = Taylor();
  auto options = [&](const std::string& owner) {
    EngineOptions o = Options();
    o.store = testing::RedisStoreAt(redis_->url(), "steady:" + std::to_string(ModelFingerprint(m)) + ":", owner, 500);
    return o;
  };
  auto a = StartEngine(m, options("a"));
  auto b = StartEngine(m, options("b"));
  auto reference = StartEngine(m, Options());
  const Turns first = {{Prompt(1), 5}, {Prompt(20), 4}}, next = {{Prompt(3), 6}};
  for (Engine* e : {a.get(), reference.get()}) {
    ASSERT_TRUE(Create(*e, "s").ok());
    Play(*e, "s", first);
  }
  ASSERT_TRUE(Create(*b, "other").ok());
  EXPECT_EQ(Create(*b, "s").status().code(), absl::StatusCode::kAlreadyExists);
  const testing::Outcome refused = Generate(*b, "s", "x", 1);
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kUnavailable) << refused.status;
  // Both list both sessions, with the store's positions.
  for (Engine* e : {a.get(), b.get()}) {
    auto listed = testing::Call<std::vector<SessionInfo>>([&](auto done) { e->ListSessions(done); });
    ASSERT_EQ(listed.size(), 2u);
    EXPECT_EQ(listed[1].session_id, "s");
    EXPECT_EQ(listed[1].position, Get(*reference, "s")->position);
  }
  a.reset();  // a shuts down: its leases go at once
  EXPECT_EQ(Play(*b, "s", next), Play(*reference, "s", next)) << "b continues a's session exactly";
  EXPECT_EQ(Get(*b, "s")->position, Get(*reference, "s")->position);
}

// Replicas whose calls wait for a peer's lease or for the store (EngineOptions::store_wait_ms).
class WaitingReplicaTest : public RedisStoreTest {
 protected:
  void SetUp() override {
    RedisStoreTest::SetUp();
    if (!redis_) return;
    reference_ = StartEngine(model_, Options());
  }

  EngineOptions ReplicaOptions(const std::string& owner, int64_t lease_ms, int64_t wait_ms) {
    EngineOptions o = Options();
    o.store = testing::RedisStoreAt(redis_->url(), Prefix(), owner, lease_ms);
    o.store_wait_ms = wait_ms;
    o.store_poll_ms = 50;
    return o;
  }
  std::string Prefix() const { return "steady:" + std::to_string(ModelFingerprint(model_)) + ":"; }
  // A command to this test's Redis; its output.
  std::string Redis(const std::string& args) {
    const std::string cmd = "redis-cli -p " + std::to_string(redis_->port()) + " " + args;
    std::string out;
    if (FILE* p = popen(cmd.c_str(), "r")) {
      char buf[256];
      while (fgets(buf, sizeof(buf), p)) out += buf;
      pclose(p);
    }
    return out;
  }
  static double Seconds(std::chrono::steady_clock::time_point since) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
  }

  const Model model_ = Taylor();
  std::unique_ptr<Engine> reference_;
};

// The replica holding a session dies (its lease stays in Redis, renewed by nobody): a call for the
// session on another replica waits for the lease to lapse, then takes the session over and continues
// it exactly; meanwhile the waiting replica serves its other sessions without delay.
TEST_F(WaitingReplicaTest, ACallWaitsForADeadHoldersLeaseAndServesOthersMeanwhile) {
  auto b = StartEngine(model_, ReplicaOptions("b", 10000, 5000));
  {
    auto a = StartEngine(model_, ReplicaOptions("a", 10000, 0));
    for (Engine* e : {a.get(), reference_.get()}) {
      ASSERT_TRUE(Create(*e, "s").ok());
      Play(*e, "s", {{Prompt(1), 5}});
    }
  }  // a stops and lets its sessions go; then "dead" holds s for 1.2 s, as a killed replica's lease
  ASSERT_EQ(Redis("SET " + Prefix() + "lease:s \"dead 999\" PX 1200"), "OK\n");
  ASSERT_TRUE(Create(*b, "other").ok());
  const auto start = std::chrono::steady_clock::now();
  std::future<testing::Outcome> waiting = SubmitAsync(*b, testing::Job("s", Prompt(3), 6));
  const testing::Outcome other = Generate(*b, "other", Prompt(2), 4);
  EXPECT_TRUE(other.status.ok()) << other.status;
  EXPECT_LT(Seconds(start), 0.8) << "the other session waited for the lease too";
  const testing::Outcome taken = waiting.get();
  ASSERT_TRUE(taken.status.ok()) << taken.status;
  EXPECT_GT(Seconds(start), 0.9) << "taken over before the lease lapsed";
  EXPECT_EQ(taken.ids, Generate(*reference_, "s", Prompt(3), 6).ids) << "b continues the dead replica's session exactly";
  EXPECT_EQ(b->stats().store_waits, 1);
  EXPECT_EQ(b->stats().store_waits_failed, 0);
}

// A holder that stays alive keeps renewing its lease: the waiting call fails once store_wait_ms has
// passed, with UNAVAILABLE saying so and when to retry; nothing changed.
TEST_F(WaitingReplicaTest, ALiveHolderKeepsItsSessionAndTheCallFailsAfterTheWait) {
  auto a = StartEngine(model_, ReplicaOptions("a", 600, 0));  // never lets idle sessions go (no release_idle_ms)
  auto b = StartEngine(model_, ReplicaOptions("b", 600, 1000));
  ASSERT_TRUE(Create(*a, "s").ok());
  Play(*a, "s", {{Prompt(1), 5}});
  const auto start = std::chrono::steady_clock::now();
  const testing::Outcome refused = Generate(*b, "s", Prompt(3), 4);
  EXPECT_GE(Seconds(start), 0.95);
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kUnavailable) << refused.status;
  EXPECT_NE(std::string(refused.status.message()).find("alive"), std::string::npos) << refused.status;
  EXPECT_TRUE(RetryAfterMs(refused.status).has_value()) << refused.status;
  EXPECT_EQ(b->stats().store_waits_failed, 1);
  EXPECT_EQ(Get(*a, "s")->position, Get(*b, "s")->position);
}

// A draining replica lets its idle sessions go at once: a call waiting for one on another replica
// goes on within a poll, long before the lease would have lapsed.
TEST_F(WaitingReplicaTest, ADrainingHolderLetsTheWaitingCallGoOn) {
  auto a = StartEngine(model_, ReplicaOptions("a", 10000, 0));
  auto b = StartEngine(model_, ReplicaOptions("b", 10000, 5000));
  for (Engine* e : {a.get(), reference_.get()}) {
    ASSERT_TRUE(Create(*e, "s").ok());
    Play(*e, "s", {{Prompt(1), 5}});
  }
  const auto start = std::chrono::steady_clock::now();
  std::future<testing::Outcome> waiting = SubmitAsync(*b, testing::Job("s", Prompt(3), 6));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  a->Drain();
  const testing::Outcome taken = waiting.get();
  ASSERT_TRUE(taken.status.ok()) << taken.status;
  EXPECT_LT(Seconds(start), 2.0) << "waited for the lease instead of the release";
  EXPECT_EQ(taken.ids, Generate(*reference_, "s", Prompt(3), 6).ids);
}

// Redis killed and restarted: a turn that finished while it was away is acknowledged once its
// commit gets through (not failed), a call that arrived meanwhile waits, and nothing is lost.
TEST_F(WaitingReplicaTest, CallsAndCommitsWaitForTheStoreToComeBack) {
  auto b = StartEngine(model_, ReplicaOptions("b", 10000, 5000));
  for (Engine* e : {b.get(), reference_.get()}) {
    ASSERT_TRUE(Create(*e, "s").ok());
    ASSERT_TRUE(Create(*e, "t").ok());
    Play(*e, "s", {{Prompt(1), 5}});
  }
  redis_->Kill();
  std::future<testing::Outcome> commit = SubmitAsync(*b, testing::Job("s", Prompt(3), 6));  // resident: runs
  std::future<testing::Outcome> lookup = SubmitAsync(*b, testing::Job("t", Prompt(4), 3));
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  ASSERT_TRUE(redis_->Restart());
  const testing::Outcome s = commit.get(), t = lookup.get();
  ASSERT_TRUE(s.status.ok()) << s.status;
  ASSERT_TRUE(t.status.ok()) << t.status;
  EXPECT_EQ(s.ids, Generate(*reference_, "s", Prompt(3), 6).ids);
  EXPECT_EQ(t.ids, Generate(*reference_, "t", Prompt(4), 3).ids);
  EXPECT_EQ(b->stats().commit_failures, 0);
  // What Redis holds is what was acknowledged: a fresh replica continues from it.
  b.reset();
  auto c = StartEngine(model_, ReplicaOptions("c", 10000, 5000));
  EXPECT_EQ(Get(*c, "s")->position, Get(*reference_, "s")->position);
}

}  // namespace
}  // namespace steady
