// Session snapshots: bit-exact round trip, every corruption class refused with its code (never a
// crash), fingerprint tied to the weights, atomic writes that leave no temp file behind.
#include "server/store/snapshot.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "model/decoder/model.h"
#include "model/decoder/state_pool.h"
#include "tests/testutil.h"

namespace steady {
namespace {

Model TinyModel(const std::string& mechanism, const nlohmann::json& params, uint64_t seed) {
  return testing::TinyModel(mechanism, params, seed, {{"vocab_size", 97}, {"qk_norm", false}});
}

void Feed(Backend& pool, int slot, int n, std::vector<float>* logits) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < n; ++i) tokens.push_back(3 + (i * 7) % 90);
  pool.Forward({Segment{slot, tokens, false}}, logits);
}

struct Fixture {
  Model model;
  SnapshotShape shape;
  std::string blob;
};

// The turn that brought the fixture's session to position 23.
TurnRecord LastTurn() {
  TurnRecord t;
  t.request_fingerprint = 0x1234567890ABCDEFull;
  t.start_position = 15;
  t.token_ids = {5, 6, 7};
  t.text = "a b\xC3\xA9";
  t.finish_reason = "length";
  t.prompt_tokens = 5;
  t.completion_tokens = 3;
  t.session_position = 23;
  t.cached_tokens = 1;
  t.drafted_tokens = 2;
  t.accepted_tokens = 1;
  return t;
}

Fixture MakeBlob(const std::string& mechanism, const nlohmann::json& params) {
  Fixture f{TinyModel(mechanism, params, 11), {}, {}};
  f.shape = MeasureSnapshotShape(f.model);
  std::unique_ptr<Backend> pool = MakeCpuBackend(f.model, {});
  std::vector<float> logits;
  Feed(*pool, 0, 23, &logits);
  SessionSnapshot s = CaptureSlot(*pool, 0);
  s.session_id = "chat-1";
  s.created_unix_ms = 1000;
  s.last_used_unix_ms = 2000;
  s.last_turn = LastTurn();
  f.blob = EncodeSnapshot(s, f.shape.fingerprint);
  return f;
}

// Rewrites the trailing checksum so a crafted blob passes the integrity check and reaches the
// field checks.
void Reseal(std::string& blob) {
  const uint64_t h = Hash64(std::string_view(blob).substr(0, blob.size() - 8));
  std::memcpy(blob.data() + blob.size() - 8, &h, 8);
}

class SnapshotTest : public ::testing::TestWithParam<std::string> {
 protected:
  Fixture Make() {
    if (GetParam() == "softmax") return MakeBlob("softmax", nlohmann::json::object());
    // A ring that has wrapped by the 23rd token.
    if (GetParam() == "sliding_window") return MakeBlob("sliding_window", {{"window", 10}});
    return MakeBlob("taylor", {{"order", 2}});
  }
};

// The header alone, from a prefix of the blob (a shared store lists sessions this way): the same
// fields as the whole blob's decode; a prefix cut inside the header is refused.
TEST_P(SnapshotTest, TheHeaderDecodesFromAPrefix) {
  Fixture f = Make();
  auto whole = DecodeSnapshot(f.blob, f.shape);
  ASSERT_TRUE(whole.ok()) << whole.status();
  const size_t prefix = std::min(f.blob.size(), MaxSnapshotHeaderBytes(f.shape));
  auto header = DecodeSnapshotHeader(std::string_view(f.blob).substr(0, prefix), f.shape);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->session_id, "chat-1");
  EXPECT_EQ(header->position, whole->position);
  EXPECT_EQ(header->created_unix_ms, 1000);
  EXPECT_EQ(header->last_used_unix_ms, 2000);
  EXPECT_EQ(header->StateBytes(), whole->StateBytes());
  for (size_t n = 0; n < header->bytes; ++n) {
    EXPECT_FALSE(DecodeSnapshotHeader(std::string_view(f.blob).substr(0, n), f.shape).ok()) << "cut at " << n;
  }
  EXPECT_TRUE(DecodeSnapshotHeader(std::string_view(f.blob).substr(0, header->bytes), f.shape).ok());
}

TEST_P(SnapshotTest, RoundTripIsBitExactAndContinuesIdentically) {
  Fixture f = Make();
  std::unique_ptr<Backend> pool = MakeCpuBackend(f.model, {.slots = 2});
  std::vector<float> a, b;
  Feed(*pool, 0, 23, &a);
  auto decoded = DecodeSnapshot(f.blob, f.shape);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->session_id, "chat-1");
  EXPECT_EQ(decoded->position, 23);
  EXPECT_EQ(decoded->created_unix_ms, 1000);
  EXPECT_EQ(decoded->last_used_unix_ms, 2000);
  EXPECT_EQ(decoded->last_turn, LastTurn());
  RestoreSlot(*decoded, *pool, 1);
  const SessionSnapshot original = CaptureSlot(*pool, 0), restored = CaptureSlot(*pool, 1);
  EXPECT_EQ(original.fixed, restored.fixed);
  EXPECT_EQ(original.growing, restored.growing);
  EXPECT_EQ(pool->position(1), 23);
  Feed(*pool, 0, 5, &a);
  Feed(*pool, 1, 5, &b);
  EXPECT_EQ(a, b);
  // Re-encoding the decoded snapshot gives the same bytes.
  SessionSnapshot again = *decoded;
  EXPECT_EQ(EncodeSnapshot(again, f.shape.fingerprint), f.blob);
}

TEST_P(SnapshotTest, EveryFlippedByteIsRefused) {
  const Fixture f = Make();
  for (size_t i = 0; i < f.blob.size(); ++i) {
    std::string bad = f.blob;
    bad[i] ^= 0x20;
    auto d = DecodeSnapshot(bad, f.shape);
    ASSERT_FALSE(d.ok()) << "byte " << i;
    const auto want = i < 12 ? absl::StatusCode::kInvalidArgument : absl::StatusCode::kDataLoss;  // magic, version
    ASSERT_EQ(d.status().code(), want) << "byte " << i << ": " << d.status();
  }
}

TEST_P(SnapshotTest, EveryTruncationIsRefused) {
  const Fixture f = Make();
  for (size_t n = 0; n < f.blob.size(); ++n) {
    auto d = DecodeSnapshot(std::string_view(f.blob).substr(0, n), f.shape);
    ASSERT_FALSE(d.ok()) << n;
    ASSERT_TRUE(d.status().code() == absl::StatusCode::kDataLoss || d.status().code() == absl::StatusCode::kInvalidArgument)
        << n << ": " << d.status();
  }
  // Trailing garbage breaks the checksum too.
  EXPECT_EQ(DecodeSnapshot(f.blob + "x", f.shape).status().code(), absl::StatusCode::kDataLoss);
}

TEST_P(SnapshotTest, WrongMagicVersionAndFingerprint) {
  const Fixture f = Make();
  std::string bad = f.blob;
  bad[0] = 'X';
  EXPECT_NE(DecodeSnapshot(bad, f.shape).status().message().find("magic"), std::string::npos);
  bad = f.blob;
  bad[8] = 3;  // version 3
  Reseal(bad);
  auto d = DecodeSnapshot(bad, f.shape);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("version 3"), std::string::npos) << d.status();
  // Other weights: a model of the same shape and another seed.
  const SnapshotShape other = MeasureSnapshotShape(TinyModel("taylor", {{"order", 2}}, 12));
  EXPECT_NE(other.fingerprint, f.shape.fingerprint);
  SnapshotShape shape = f.shape;
  shape.fingerprint = other.fingerprint;
  d = DecodeSnapshot(f.blob, shape);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(d.status().message().find("fingerprint"), std::string::npos) << d.status();
}

TEST_P(SnapshotTest, HugeOrInconsistentLengthFieldsAreRefused) {
  const Fixture f = Make();
  const size_t id_len_at = 20, position_at = 24 + 6, fixed_at = position_at + 24, layers_at = fixed_at + 8,
               growing_at = layers_at + 4;
  auto with = [&](size_t offset, const void* value, size_t n) {
    std::string bad = f.blob;
    std::memcpy(bad.data() + offset, value, n);
    Reseal(bad);
    return DecodeSnapshot(bad, f.shape).status();
  };
  const uint32_t huge32 = 0xFFFFFFFFu;
  const uint64_t huge64 = ~uint64_t(0);
  const int64_t negative = -5, far = int64_t(1) << 50;
  EXPECT_EQ(with(id_len_at, &huge32, 4).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with(position_at, &negative, 8).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with(position_at, &far, 8).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with(fixed_at, &huge64, 8).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(with(layers_at, &huge32, 4).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(with(growing_at, &huge64, 8).code(), absl::StatusCode::kInvalidArgument);
  // A state that is not finite.
  std::string bad = f.blob;
  const float nan = std::nanf("");
  std::memcpy(bad.data() + growing_at + 16, &nan, 4);
  Reseal(bad);
  EXPECT_EQ(DecodeSnapshot(bad, f.shape).status().code(), absl::StatusCode::kInvalidArgument);
}

// Version 1 (before the last turn was kept) still loads: the same state, no last turn. A version-1
// blob is a version-2 blob without a last turn, minus its one "none" byte.
TEST_P(SnapshotTest, VersionOneLoadsWithoutALastTurn) {
  const Fixture f = Make();
  SessionSnapshot s = *DecodeSnapshot(f.blob, f.shape);
  s.last_turn.reset();
  std::string v1 = EncodeSnapshot(s, f.shape.fingerprint);
  ASSERT_EQ(v1[v1.size() - 9], 0);  // "no last turn"
  v1.erase(v1.size() - 9, 1);
  v1[8] = 1;
  Reseal(v1);
  auto d = DecodeSnapshot(v1, f.shape);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(d->last_turn.has_value());
  EXPECT_EQ(d->fixed, s.fixed);
  EXPECT_EQ(d->growing, s.growing);
  EXPECT_EQ(d->position, 23);
  // Version 2 needs its last-turn byte: without it the blob is cut short.
  v1[8] = 2;
  Reseal(v1);
  EXPECT_EQ(DecodeSnapshot(v1, f.shape).status().code(), absl::StatusCode::kInvalidArgument);
}

// A last turn whose end is not the state's position cannot be replayed over it: dropped, the state
// still loads. Crafted lengths in the section are refused.
TEST_P(SnapshotTest, LastTurnOfAnotherPositionIsDroppedAndBadLengthsRefused) {
  const Fixture f = Make();
  SessionSnapshot s = *DecodeSnapshot(f.blob, f.shape);
  s.last_turn->session_position = 22;
  auto d = DecodeSnapshot(EncodeSnapshot(s, f.shape.fingerprint), f.shape);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(d->last_turn.has_value());
  // The token count: the section starts after the flag byte, fingerprint and start position.
  const size_t section = f.blob.size() - 8 - (1 + 8 + 8 + 8 + 3 * 4 + 8 + LastTurn().text.size() + 8 + 6 + 6 * 8);
  const uint64_t huge = ~uint64_t(0) / 2;
  std::string bad = f.blob;
  std::memcpy(bad.data() + section + 1 + 16, &huge, 8);
  Reseal(bad);
  EXPECT_EQ(DecodeSnapshot(bad, f.shape).status().code(), absl::StatusCode::kInvalidArgument);
  bad = f.blob;
  bad[section] = 7;  // neither "none" nor "one"
  Reseal(bad);
  EXPECT_EQ(DecodeSnapshot(bad, f.shape).status().code(), absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(All, SnapshotTest, ::testing::Values("taylor", "softmax", "sliding_window"));

TEST(SnapshotFingerprintTest, SameWeightsSameFingerprintAndGrowthMeasured) {
  const Model a = TinyModel("softmax", nlohmann::json::object(), 5), b = TinyModel("softmax", nlohmann::json::object(), 5);
  const SnapshotShape sa = MeasureSnapshotShape(a);
  EXPECT_EQ(sa.fingerprint, ModelFingerprint(b));
  // softmax: k and v of both kv heads per token and layer.
  EXPECT_EQ(sa.growth_per_token, (std::vector<uint64_t>{2 * 2 * 8, 2 * 2 * 8}));
  EXPECT_EQ(sa.fixed_floats, 0u);
  const Model t = TinyModel("taylor", {{"order", 2}}, 5);
  EXPECT_NE(ModelFingerprint(t), sa.fingerprint);
  EXPECT_EQ(MeasureSnapshotShape(t).growth_per_token, (std::vector<uint64_t>{0, 0}));
}

TEST(SnapshotFileTest, AtomicWriteReplacesAndLeavesNoTempFile) {
  namespace fs = std::filesystem;
  const std::string dir = testing::MakeTempDir("snapshot_files");
  const std::string path = dir + "/s.snap";
  ASSERT_TRUE(WriteFileAtomic(path, "first").ok());
  ASSERT_TRUE(WriteFileAtomic(path, "second").ok());
  EXPECT_EQ(*ReadWholeFile(path), "second");
  // The target is a non-empty directory: the rename fails after the temp file was written.
  fs::create_directories(dir + "/blocked.snap/inside");
  const absl::Status s = WriteFileAtomic(dir + "/blocked.snap", "data");
  EXPECT_FALSE(s.ok());
  // A directory that does not exist: nothing can be created.
  EXPECT_FALSE(WriteFileAtomic(dir + "/missing/x.snap", "data").ok());
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"blocked.snap", "s.snap"}));
  EXPECT_EQ(ReadWholeFile(dir + "/none").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace steady
