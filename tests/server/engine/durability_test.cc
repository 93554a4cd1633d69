// Turn durability (docs/durability.md) through a real engine and directory store. A crash is the
// store's directory copied at a moment: what a kill -9 leaves behind, since every acknowledged write
// was fsynced before it was acknowledged. A second engine started on the copy must hold every
// acknowledged change and continue each session exactly as the first one does.
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "base/file_io.h"
#include "server/engine/engine.h"
#include "server/store/directory_store.h"
#include "server/store/snapshot.h"
#include "tests/server/engine/engine_harness.h"
#include "tests/server/store/faulty_file_ops.h"
#include "tests/testutil.h"

namespace steady {
namespace {

using testing::Call;
using testing::Create;
using testing::EngineTinyModel;
using testing::Generate;
using testing::Get;
using testing::Options;
using testing::Outcome;
using testing::Play;
using testing::Prompt;
using testing::StartEngine;
using testing::Taylor;
using testing::Turns;

namespace fs = std::filesystem;

// The store's directory as a crash would leave it, in a directory of its own.
std::string CrashImage(const std::string& dir, const std::string& name) {
  const std::string image = testing::MakeTempDir(name);
  fs::copy(dir, image, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  return image;
}

using Faults = testing::FaultyFileOps;

EngineOptions Durable(const std::string& dir, const FileOps& ops = RealFileOps()) {
  EngineOptions o = Options();
  auto store = DirectoryStore::Open(dir, ops);
  EXPECT_TRUE(store.ok()) << store.status();
  o.store = *std::move(store);
  return o;  // Durability::kTurn is the default
}

absl::Status Delete(Engine& e, const std::string& id) {
  return Call<absl::Status>([&](auto done) { e.DeleteSession(id, done); });
}

// The session's position; -1 (and a failed test) when it has none.
int64_t PositionOf(Engine& e, const std::string& id) {
  auto info = Get(e, id);
  EXPECT_TRUE(info.ok()) << info.status();
  return info.ok() ? info->position : -1;
}

Model ModelFor(const std::string& mechanism) {
  if (mechanism == "taylor") return Taylor();
  // A window shorter than turn 2's prompt: the recovered ring has wrapped.
  if (mechanism == "sliding_window") return EngineTinyModel(mechanism, {{"window", 16}}, 77);
  return EngineTinyModel(mechanism, nlohmann::json::object(), 77);
}

class CrashTest : public ::testing::TestWithParam<std::string> {};

// Three turns on two sessions; the store is copied after each acknowledged turn. An engine started on
// the copy taken after turn 2 holds turn 2 and continues with turn 3's exact output.
TEST_P(CrashTest, AcknowledgedTurnsSurviveAndContinueExactly) {
  const Model m = ModelFor(GetParam());
  const std::string dir = testing::MakeTempDir("crash_store");
  const Turns turns = {{Prompt(3), 6}, {Prompt(40), 5}, {Prompt(7), 8}};
  std::vector<std::vector<int32_t>> outputs;
  std::string image;
  int64_t position_after_two = 0;
  {
    auto e = StartEngine(m, Durable(dir));
    ASSERT_TRUE(Create(*e, "a").ok());
    ASSERT_TRUE(Create(*e, "b").ok());
    ASSERT_EQ(Play(*e, "b", {turns[0]}).size(), 1u);
    for (int t = 0; t < 3; ++t) {
      outputs.push_back(Play(*e, "a", {turns[t]})[0]);
      if (t == 1) {
        image = CrashImage(dir, "crash_image");
        position_after_two = PositionOf(*e, "a");
      }
    }
    EXPECT_EQ(e->stats().turns_committed, 4);
  }
  auto recovered = StartEngine(m, Durable(image));
  EXPECT_EQ(recovered->stats().sessions_recovered, 2);
  auto a = Get(*recovered, "a");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->position, position_after_two);
  EXPECT_EQ(Play(*recovered, "a", {turns[2]})[0], outputs[2]) << "the recovered session must continue exactly";
  EXPECT_GT(PositionOf(*recovered, "b"), 0);
}

INSTANTIATE_TEST_SUITE_P(Mechanisms, CrashTest, ::testing::Values("taylor", "slay", "dark", "sliced_relu", "softmax", "sliding_window"),
                         [](const auto& info) { return info.param; });

TEST(DurabilityTest, SessionOperationsAreDurableWhenAcknowledged) {
  const Model m = Taylor();
  const std::string dir = testing::MakeTempDir("ops_store");
  auto e = StartEngine(m, Durable(dir));
  ASSERT_TRUE(Create(*e, "a").ok());
  const std::string after_create = CrashImage(dir, "ops_after_create");
  ASSERT_TRUE(Generate(*e, "a", Prompt(5), 4).status.ok());
  auto forked = Call<absl::StatusOr<SessionInfo>>([&](auto done) { e->ForkSession("a", "f", done); });
  ASSERT_TRUE(forked.ok()) << forked.status();
  const std::string after_fork = CrashImage(dir, "ops_after_fork");
  auto blob = Call<absl::StatusOr<std::string>>([&](auto done) { e->ExportSession("a", done); });
  ASSERT_TRUE(blob.ok());
  ASSERT_TRUE(Call<absl::StatusOr<SessionInfo>>([&](auto done) { e->ImportSession(*blob, "i", done); }).ok());
  const std::string after_import = CrashImage(dir, "ops_after_import");
  ASSERT_TRUE(Delete(*e, "a").ok());
  const std::string after_delete = CrashImage(dir, "ops_after_delete");

  {
    auto r = StartEngine(m, Durable(after_create));
    auto a = Get(*r, "a");
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->position, 0);
  }
  {
    auto r = StartEngine(m, Durable(after_fork));
    ASSERT_TRUE(Get(*r, "f").ok());
    EXPECT_EQ(PositionOf(*r, "f"), forked->position);
  }
  {
    auto r = StartEngine(m, Durable(after_import));
    ASSERT_TRUE(Get(*r, "i").ok());
    EXPECT_EQ(PositionOf(*r, "i"), forked->position);
  }
  auto r = StartEngine(m, Durable(after_delete));
  EXPECT_EQ(Get(*r, "a").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Get(*r, "f").ok());
}

// A turn in flight when the process dies is absent after recovery: the store holds only states at
// the end of acknowledged (or completed) turns, never a prompt absorbed halfway.
TEST(DurabilityTest, ATurnInFlightIsWhollyAbsent) {
  const Model m = Taylor(/*eos=*/-1);
  const std::string dir = testing::MakeTempDir("inflight_store");
  auto e = StartEngine(m, Durable(dir));
  ASSERT_TRUE(Create(*e, "a").ok());
  ASSERT_TRUE(Generate(*e, "a", Prompt(9), 3).status.ok());
  const int64_t durable = PositionOf(*e, "a");
  // A long prompt (several prefill chunks) and a generation far too long to end while the test runs
  // (it once was 2,000 tokens, which a fast machine finished before the copy below: a flaky test);
  // copy the store while it runs, and check that it still ran when the copy was done.
  std::atomic<int> seen{0};
  GenerateJob job = testing::Job("a", Prompt(40) + " " + Prompt(41) + " " + Prompt(42), Options().max_new_tokens);
  job.on_output = [&](const std::string&, const std::vector<int32_t>& ids, const std::vector<TokenLogprobs>&) { seen += int(ids.size()); };
  auto running = testing::SubmitAsync(*e, std::move(job));
  while (seen.load() < 20) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const std::string image = CrashImage(dir, "inflight_image");
  ASSERT_EQ(running.wait_for(std::chrono::seconds(0)), std::future_status::timeout)
      << "the turn ended before the store was copied: the test did not copy a turn in flight";
  (void)Call<absl::Status>([&](auto done) { e->DeleteSession("nobody", done); });  // (the engine still answers)
  auto r = StartEngine(m, Durable(image));
  EXPECT_EQ(PositionOf(*r, "a"), durable);
  e.reset();  // ends the running job (UNAVAILABLE) and the engine
  EXPECT_FALSE(running.get().status.ok());
}

// A flipped byte in one stored session: that session answers DATA_LOSS on every call that needs
// its state, every other session recovers, and DeleteSession clears it. Every offset is checked at
// the decoder; a spread of them through the engine.
TEST(DurabilityTest, ACorruptedSessionIsRefusedAndTheOthersRecover) {
  const Model m = Taylor();
  const std::string dir = testing::MakeTempDir("corrupt_store");
  {
    auto e = StartEngine(m, Durable(dir));
    for (const char* id : {"a", "b", "c"}) {
      ASSERT_TRUE(Create(*e, id).ok());
      ASSERT_TRUE(Generate(*e, id, Prompt(id[0]), 3).status.ok());
    }
  }
  auto read = ReadWholeFile(dir + "/b.snap");
  ASSERT_TRUE(read.ok()) << read.status();
  const std::string blob = *read;
  const SnapshotShape shape = MeasureSnapshotShape(m);
  for (size_t i = 0; i < blob.size(); ++i) {
    std::string bad = blob;
    bad[i] ^= 0x20;
    ASSERT_FALSE(DecodeSnapshot(bad, shape).ok()) << "a flip at byte " << i << " went unnoticed";
  }
  for (size_t i = 0; i < blob.size(); i += blob.size() / 7) {
    const std::string image = CrashImage(dir, "corrupt_image");
    std::string bad = blob;
    bad[i] ^= 0x01;
    ASSERT_TRUE(WriteFileAtomic(image + "/b.snap", bad).ok());
    auto r = StartEngine(m, Durable(image));
    EXPECT_EQ(r->stats().sessions_unreadable, 1);
    const absl::Status got = Get(*r, "b").status();
    EXPECT_EQ(got.code(), absl::StatusCode::kDataLoss) << "flip at " << i << ": " << got;
    EXPECT_NE(std::string(got.message()).find("session b"), std::string::npos) << got;
    EXPECT_EQ(Generate(*r, "b", "more", 2).status.code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(Call<absl::StatusOr<std::string>>([&](auto done) { r->ExportSession("b", done); }).status().code(),
              absl::StatusCode::kDataLoss);
    EXPECT_EQ(Create(*r, "b").status().code(), absl::StatusCode::kAlreadyExists);
    for (const char* id : {"a", "c"}) EXPECT_TRUE(Generate(*r, id, "more", 2).status.ok()) << id;
    ASSERT_TRUE(Delete(*r, "b").ok());
    EXPECT_FALSE(fs::exists(image + "/b.snap"));
    EXPECT_TRUE(Create(*r, "b").ok());
  }
}

// A stored blob cut short (a disk that lost the end of a file): the decoder refuses every length,
// and through the engine the session is refused while the others recover. The temp file of a write
// that a crash interrupted is dropped whatever its length; its session keeps the previous state.
TEST(DurabilityTest, TornWritesAreDroppedAtRecovery) {
  const Model m = Taylor();
  const std::string dir = testing::MakeTempDir("torn_store");
  int64_t durable = 0;
  {
    auto e = StartEngine(m, Durable(dir));
    ASSERT_TRUE(Create(*e, "a").ok());
    ASSERT_TRUE(Create(*e, "b").ok());
    ASSERT_TRUE(Generate(*e, "a", Prompt(1), 3).status.ok());
    durable = PositionOf(*e, "a");
    ASSERT_TRUE(Generate(*e, "b", Prompt(2), 3).status.ok());
  }
  auto read = ReadWholeFile(dir + "/a.snap");
  ASSERT_TRUE(read.ok()) << read.status();
  const std::string blob = *read;
  const SnapshotShape shape = MeasureSnapshotShape(m);
  for (size_t n = 0; n < blob.size(); ++n) {
    ASSERT_FALSE(DecodeSnapshot(std::string_view(blob).substr(0, n), shape).ok()) << "a blob cut at " << n;
  }
  for (size_t n : {size_t(0), size_t(1), size_t(12), blob.size() / 2, blob.size() - 1}) {
    {  // the final blob cut short
      const std::string image = CrashImage(dir, "torn_final");
      ASSERT_TRUE(WriteFileAtomic(image + "/a.snap", std::string_view(blob).substr(0, n)).ok());
      auto r = StartEngine(m, Durable(image));
      EXPECT_EQ(Get(*r, "a").status().code(), absl::StatusCode::kDataLoss) << "cut at " << n;
      EXPECT_TRUE(Get(*r, "b").ok());
    }
    {  // a newer blob's temp file cut short beside the durable one
      const std::string image = CrashImage(dir, "torn_temp");
      std::ofstream(image + "/a.snap.tmp.999.0", std::ios::binary) << std::string_view(blob).substr(0, n);
      auto store = DirectoryStore::Open(image);
      ASSERT_TRUE(store.ok());
      EXPECT_EQ((*store)->stats().dropped_at_open.load(), 1);
      EngineOptions o = Options();
      o.store = *std::move(store);
      auto r = StartEngine(m, std::move(o));
      EXPECT_EQ(PositionOf(*r, "a"), durable);
      EXPECT_FALSE(fs::exists(image + "/a.snap.tmp.999.0"));
    }
  }
}

// A full disk: the turn fails with RESOURCE_EXHAUSTED naming the cause and is undone (the session is
// at its last durable position and continues from it exactly); other sessions and stateless calls
// are served; once space returns the session works again.
TEST(DurabilityTest, AFullDiskFailsTheTurnAndKeepsTheLastDurableState) {
  const Model m = Taylor();
  Faults faults;
  const std::string dir = testing::MakeTempDir("full_store");
  auto e = StartEngine(m, Durable(dir, faults.Ops()));
  auto reference = StartEngine(m, Options());  // no store: what the session should do
  for (Engine* engine : {e.get(), reference.get()}) {
    ASSERT_TRUE(Create(*engine, "a").ok());
    ASSERT_TRUE(Generate(*engine, "a", Prompt(3), 4).status.ok());
  }
  ASSERT_TRUE(Create(*e, "b").ok());
  const int64_t durable = PositionOf(*e, "a");

  faults.disk_full = true;
  const Outcome failed = Generate(*e, "a", Prompt(4), 5);
  EXPECT_EQ(failed.status.code(), absl::StatusCode::kResourceExhausted) << failed.status;
  EXPECT_NE(std::string(failed.status.message()).find("No space left on device"), std::string::npos) << failed.status;
  EXPECT_NE(std::string(failed.status.message()).find("position " + std::to_string(durable)), std::string::npos)
      << failed.status;
  EXPECT_EQ(PositionOf(*e, "a"), durable);
  EXPECT_EQ(e->stats().commit_failures, 1);
  // The server keeps serving: stateless Generates, reads; a change that needs the store is refused.
  EXPECT_TRUE(Generate(*e, "", Prompt(6), 3).status.ok());
  EXPECT_TRUE(Get(*e, "b").ok());
  EXPECT_EQ(Create(*e, "c").status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Get(*e, "c").status().code(), absl::StatusCode::kNotFound);

  faults.disk_full = false;  // space returns
  const Outcome retried = Generate(*e, "a", Prompt(4), 5);
  ASSERT_TRUE(retried.status.ok()) << retried.status;
  EXPECT_EQ(retried.ids, Generate(*reference, "a", Prompt(4), 5).ids) << "continues from the last durable state";
  auto stored = ReadWholeFile(dir + "/a.snap");
  auto exported = Call<absl::StatusOr<std::string>>([&](auto done) { e->ExportSession("a", done); });
  ASSERT_TRUE(stored.ok() && exported.ok()) << stored.status() << exported.status();
  EXPECT_EQ(*stored, *exported) << "the store holds the session's state";
}

// A failed fsync is not durable: the call fails, nothing is acknowledged, and after a crash the
// store holds the state before it.
TEST(DurabilityTest, AFailedFsyncAcknowledgesNothing) {
  const Model m = Taylor();
  Faults faults;
  const std::string dir = testing::MakeTempDir("fsync_store");
  auto e = StartEngine(m, Durable(dir, faults.Ops()));
  ASSERT_TRUE(Create(*e, "a").ok());
  ASSERT_TRUE(Generate(*e, "a", Prompt(8), 3).status.ok());
  const int64_t durable = PositionOf(*e, "a");
  faults.fsync_fails = true;
  const Outcome failed = Generate(*e, "a", Prompt(9), 3);
  EXPECT_EQ(failed.status.code(), absl::StatusCode::kInternal) << failed.status;
  EXPECT_NE(std::string(failed.status.message()).find("fsync failed"), std::string::npos) << failed.status;
  EXPECT_EQ(Create(*e, "b").status().code(), absl::StatusCode::kInternal);
  faults.fsync_fails = false;
  auto r = StartEngine(m, Durable(CrashImage(dir, "fsync_image")));
  EXPECT_EQ(PositionOf(*r, "a"), durable);
  EXPECT_EQ(Get(*r, "b").status().code(), absl::StatusCode::kNotFound);
}

// Durability::kShutdown writes nothing per turn: a crash loses the resident sessions' turns (the
// documented trade), a clean stop keeps them.
TEST(DurabilityTest, ShutdownDurabilityWritesOnlyAtTheEnd) {
  const Model m = Taylor();
  const std::string dir = testing::MakeTempDir("shutdown_store");
  EngineOptions o = Durable(dir);
  o.durability = Durability::kShutdown;
  auto e = StartEngine(m, o);
  ASSERT_TRUE(Create(*e, "a").ok());
  ASSERT_TRUE(Generate(*e, "a", Prompt(2), 3).status.ok());
  EXPECT_FALSE(fs::exists(dir + "/a.snap"));
  EXPECT_EQ(e->stats().turns_committed, 0);
  const int64_t position = PositionOf(*e, "a");
  e.reset();
  auto r = StartEngine(m, Durable(dir));
  EXPECT_EQ(PositionOf(*r, "a"), position);
}

}  // namespace
}  // namespace steady
