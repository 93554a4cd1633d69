// Bad requests over gRPC (tests/server/rpc/service_fixture.h): every refused field maps to its status
// code with a message naming it, and a refused call changes nothing.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "tests/server/rpc/service_fixture.h"

namespace steady {
namespace {

struct BadGenerate {
  const char* name;
  void (*mutate)(v1::GenerateRequest*);
  grpc::StatusCode code;
  const char* field;
};

TEST_F(ServiceTest, BadGenerateRequestsMapToCodesNamingTheField) {
  CreateSession("ok");
  const BadGenerate cases[] = {
      {"negative max_tokens", [](v1::GenerateRequest* r) { r->set_max_tokens(-1); },
       grpc::StatusCode::INVALID_ARGUMENT, "max_tokens"},
      {"huge max_tokens", [](v1::GenerateRequest* r) { r->set_max_tokens(int64_t(1) << 50); },
       grpc::StatusCode::INVALID_ARGUMENT, "max_tokens"},
      {"negative temperature", [](v1::GenerateRequest* r) { r->set_temperature(-0.5f); },
       grpc::StatusCode::INVALID_ARGUMENT, "temperature"},
      {"NaN temperature", [](v1::GenerateRequest* r) { r->set_temperature(std::nanf("")); },
       grpc::StatusCode::INVALID_ARGUMENT, "temperature"},
      {"negative top_k", [](v1::GenerateRequest* r) { r->set_top_k(-3); }, grpc::StatusCode::INVALID_ARGUMENT,
       "top_k"},
      {"top_p above 1", [](v1::GenerateRequest* r) { r->set_top_p(1.5f); }, grpc::StatusCode::INVALID_ARGUMENT,
       "top_p"},
      {"negative repetition_penalty", [](v1::GenerateRequest* r) { r->set_repetition_penalty(-1.0f); },
       grpc::StatusCode::INVALID_ARGUMENT, "repetition_penalty"},
      {"infinite repetition_penalty",
       [](v1::GenerateRequest* r) { r->set_repetition_penalty(std::numeric_limits<float>::infinity()); },
       grpc::StatusCode::INVALID_ARGUMENT, "repetition_penalty"},
      {"empty stop string", [](v1::GenerateRequest* r) { r->add_stop(""); }, grpc::StatusCode::INVALID_ARGUMENT,
       "stop[0]"},
      {"too many stop strings",
       [](v1::GenerateRequest* r) {
         for (int i = 0; i < 100; ++i) r->add_stop("x" + std::to_string(i));
       },
       grpc::StatusCode::INVALID_ARGUMENT, "stop"},
      {"session_id with a slash", [](v1::GenerateRequest* r) { r->set_session_id("../etc"); },
       grpc::StatusCode::INVALID_ARGUMENT, "session_id"},
      {"unknown session", [](v1::GenerateRequest* r) { r->set_session_id("nobody"); }, grpc::StatusCode::NOT_FOUND,
       "nobody"},
      {"top_logprobs without logprobs", [](v1::GenerateRequest* r) { r->set_top_logprobs(3); },
       grpc::StatusCode::INVALID_ARGUMENT, "top_logprobs"},
      {"too many top_logprobs",
       [](v1::GenerateRequest* r) {
         r->set_logprobs(true);
         r->set_top_logprobs(21);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "top_logprobs"},
      {"prompt and prompt_token_ids", [](v1::GenerateRequest* r) { r->add_prompt_token_ids(5); },
       grpc::StatusCode::INVALID_ARGUMENT, "prompt_token_ids"},
      {"token id out of range",
       [](v1::GenerateRequest* r) {
         r->clear_prompt();
         r->add_prompt_token_ids(-1);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "prompt_token_ids: [0]"},
  };
  for (const BadGenerate& c : cases) {
    v1::GenerateRequest r = Request("ok", "hello", 4);
    c.mutate(&r);
    const Streamed s = Generate(r);
    EXPECT_EQ(s.status.error_code(), c.code) << c.name << ": " << s.status.error_message();
    EXPECT_NE(s.status.error_message().find(c.field), std::string::npos)
        << c.name << ": message \"" << s.status.error_message() << "\" does not name " << c.field;
    EXPECT_TRUE(s.messages.empty()) << c.name;
  }
  // The session is untouched by the refused calls.
  v1::Session ok;
  ASSERT_TRUE(GetSession("ok", &ok).ok());
  EXPECT_EQ(ok.position(), 0);
}

// Each bad session request answers its code, naming the field where there is one.
TEST_F(ServiceTest, BadSessionRequestsMapToCodesNamingTheField) {
  CreateSession("taken");
  auto expect = [](const grpc::Status& s, grpc::StatusCode code, const std::string& field, const char* what) {
    EXPECT_EQ(s.error_code(), code) << what << ": " << s.error_message();
    if (!field.empty()) {
      EXPECT_NE(s.error_message().find(field), std::string::npos) << what << ": " << s.error_message();
    }
  };
  v1::Session s;
  expect(Create("", "has space"), grpc::StatusCode::INVALID_ARGUMENT, "session_id", "a space in an id");
  expect(Create("", std::string(200, 'a')), grpc::StatusCode::INVALID_ARGUMENT, "session_id", "a long id");
  expect(Create("", "taken"), grpc::StatusCode::ALREADY_EXISTS, "", "a taken id");
  expect(Get("", "", &s), grpc::StatusCode::INVALID_ARGUMENT, "session_id", "an empty id");
  expect(Fork("", "taken", ".hidden"), grpc::StatusCode::INVALID_ARGUMENT, "new_session_id", "a bad new id");
  expect(Fork("", "missing", ""), grpc::StatusCode::NOT_FOUND, "", "forking a missing session");
  expect(Fork("", "taken", "taken"), grpc::StatusCode::ALREADY_EXISTS, "", "forking onto a taken id");
  expect(Delete("", "missing"), grpc::StatusCode::NOT_FOUND, "", "deleting a missing session");
  std::string blob;
  expect(Export("", "missing", &blob), grpc::StatusCode::NOT_FOUND, "", "exporting a missing session");
  EXPECT_TRUE(blob.empty());
  const grpc::Status garbage = Import("", "fresh", "not a snapshot");
  EXPECT_FALSE(garbage.ok());
  EXPECT_NE(garbage.error_code(), grpc::StatusCode::UNKNOWN) << garbage.error_message();
  EXPECT_EQ(List(""), std::vector<std::string>{"taken"});  // nothing was made
}

}  // namespace
}  // namespace steady
