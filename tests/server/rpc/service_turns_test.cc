// Idempotent turns over gRPC (docs/deployment.md, "Resuming a cut stream"): the request fingerprint
// covers what determines the output and nothing a resend changes; a resent last turn streams the
// stored outcome, flagged in its usage; an all_or_nothing turn cancelled by its client is rolled back.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "tests/server/rpc/service_fixture.h"

namespace steady {
namespace {

TEST(RequestFingerprintTest, CoversTheOutputsInputsOnly) {
  v1::GenerateRequest r;
  r.set_session_id("s");
  r.set_prompt("hello");
  r.set_max_tokens(8);
  r.set_seed(3);
  (*r.mutable_logit_bias())[5] = 1.5f;
  (*r.mutable_logit_bias())[9] = -2.0f;
  const uint64_t f = RequestFingerprint(r);
  EXPECT_NE(f, 0u);
  v1::GenerateRequest resend = r;
  resend.mutable_expected_position()->set_value(42);
  resend.set_all_or_nothing(true);
  EXPECT_EQ(RequestFingerprint(resend), f) << "a resend adds expected_position and all_or_nothing";
  auto differs = [&](auto change) {
    v1::GenerateRequest other = r;
    change(&other);
    return RequestFingerprint(other) != f;
  };
  EXPECT_TRUE(differs([](v1::GenerateRequest* o) { o->set_prompt("hello!"); }));
  EXPECT_TRUE(differs([](v1::GenerateRequest* o) { o->set_seed(4); }));
  EXPECT_TRUE(differs([](v1::GenerateRequest* o) { o->set_max_tokens(9); }));
  EXPECT_TRUE(differs([](v1::GenerateRequest* o) { o->set_temperature(0.5f); }));
  EXPECT_TRUE(differs([](v1::GenerateRequest* o) { o->add_stop("x"); }));
  EXPECT_TRUE(differs([](v1::GenerateRequest* o) { (*o->mutable_logit_bias())[9] = -1.0f; }));
  EXPECT_TRUE(differs([](v1::GenerateRequest* o) { o->set_session_id("t"); }));
}

TEST_F(ServiceTest, AResentLastTurnStreamsItsStoredOutcome) {
  CreateSession("r");
  ASSERT_TRUE(Generate(Request("r", "Once", 3)).status.ok());
  v1::Session before;
  ASSERT_TRUE(GetSession("r", &before).ok());
  v1::GenerateRequest turn = Request("r", " upon a time", 12);
  turn.set_temperature(0.7f);
  turn.set_seed(3);
  turn.mutable_expected_position()->set_value(before.position());
  const Streamed original = Generate(turn);
  ASSERT_TRUE(original.status.ok()) << original.status.error_message();
  const Streamed replay = Generate(turn);
  ASSERT_TRUE(replay.status.ok()) << replay.status.error_message();
  EXPECT_EQ(replay.ids, original.ids);
  EXPECT_EQ(replay.text, original.text);
  const v1::GenerateResponse &a = original.messages.back(), &b = replay.messages.back();
  EXPECT_FALSE(a.usage().replayed());
  EXPECT_TRUE(b.usage().replayed());
  EXPECT_EQ(b.finish_reason(), a.finish_reason());
  EXPECT_EQ(b.usage().prompt_tokens(), a.usage().prompt_tokens());
  EXPECT_EQ(b.usage().completion_tokens(), a.usage().completion_tokens());
  EXPECT_EQ(b.usage().session_position(), a.usage().session_position());
  EXPECT_EQ(b.sampling().max_tokens(), 12);
  // Another request at that position is still refused.
  v1::GenerateRequest other = turn;
  other.set_seed(4);
  EXPECT_EQ(Generate(other).status.error_code(), grpc::StatusCode::ABORTED);
}

TEST_F(ServiceTest, AnAllOrNothingTurnItsClientCancelsIsRolledBack) {
  CreateSession("a");
  ASSERT_TRUE(Generate(Request("a", "The", 2)).status.ok());
  const int64_t before = WaitIdle("a").position();
  grpc::ClientContext context;
  v1::GenerateRequest r = Request("a", " long", 60000);
  r.set_all_or_nothing(true);
  auto reader = stub_->Generate(&context, r);
  v1::GenerateResponse m;
  ASSERT_TRUE(reader->Read(&m));
  context.TryCancel();
  while (reader->Read(&m)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(WaitIdle("a").position(), before) << "the cut turn is not kept";
}

// A session turn's initial metadata gives the session's position before it (what a gateway whose
// stream was cut resends at: clients/gateway/resume.go), ahead of the turn's first message; a
// replay gives where the replayed turn started; an ephemeral call gives none.
TEST_F(ServiceTest, ASessionTurnSendsItsStartPositionFirst) {
  CreateSession("p");
  auto start_of = [&](const v1::GenerateRequest& r, int64_t* position, std::vector<int64_t>* ends = nullptr) {
    grpc::ClientContext context;
    auto reader = stub_->Generate(&context, r);
    reader->WaitForInitialMetadata();
    const auto& md = context.GetServerInitialMetadata();
    auto it = md.find(std::string(kStartPositionHeader));
    const bool found = it != md.end() && md.count(std::string(kStartPositionHeader)) == 1;
    if (found) *position = std::stoll(std::string(it->second.data(), it->second.size()));
    v1::GenerateResponse m;
    while (reader->Read(&m)) {
      if (ends && m.has_usage()) ends->push_back(m.usage().session_position());
    }
    EXPECT_TRUE(reader->Finish().ok());
    return found;
  };
  int64_t first = -1, second = -1, replayed = -1, ephemeral = -1;
  std::vector<int64_t> ends;
  ASSERT_TRUE(start_of(Request("p", "Once", 3), &first, &ends));
  EXPECT_EQ(first, 0);
  v1::GenerateRequest turn = Request("p", " upon a time", 4);
  turn.mutable_expected_position()->set_value(ends.at(0));
  ASSERT_TRUE(start_of(turn, &second, &ends));
  EXPECT_EQ(second, ends.at(0)) << "the second turn starts where the first ended";
  ASSERT_TRUE(start_of(turn, &replayed, &ends)) << "a replay";
  EXPECT_EQ(replayed, ends.at(0));
  EXPECT_EQ(ends.at(2), ends.at(1)) << "the resend was replayed, not run again";
  EXPECT_FALSE(start_of(Request("", "Once", 2), &ephemeral)) << "an ephemeral call has no position";
}

}  // namespace
}  // namespace steady
