// The gRPC service end to end in one process: a real server on 127.0.0.1 (ephemeral port) over the
// real engine and a random tiny Taylor model, driven through the generated client stub.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <gtest/gtest.h>

#include "model/decoder/model.h"
#include "model/decoder/state_pool.h"
#include "model/generate.h"
#include "model/text/tokenizer.h"
#include "server/engine/engine.h"
#include "server/metrics/metrics.h"
#include "server/rpc/service.h"
#include "server/store/directory_store.h"
#include "server/store/redis_store.h"
#include "server/store/snapshot_signing.h"
#include "tests/redis_harness.h"
#include "tests/testutil.h"

namespace steady {
namespace {

ModelConfig TinyTaylorConfig() { return testing::TinyConfig("taylor", {{"order", 2}}); }

// Everything one server needs, torn down in the order main.cc uses: drain, shut down, stop the engine.
class ServiceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto model = Model::Random(TinyTaylorConfig(), 42);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = new Model(*std::move(model));
    auto tokenizer = Tokenizer::Load(testing::SourcePath("tests/data/tokenizer/tokenizer.model"));
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = tokenizer->release();
  }

  void SetUp() override { StartServer(); }
  void TearDown() override { StopServer(); }

  // Sessions go to options.store, else to a directory store on session_dir_, the same one at every
  // start of a test (a restart finds the sessions, as steady-server does on the same --session-dir).
  void StartServer(EngineOptions options = {}, ServiceOptions security = {}) {
    options.state_memory_bytes = 1 << 24;
    if (!options.store) {
      if (session_dir_.empty()) session_dir_ = testing::MakeTempDir("service_sessions");
      auto store = DirectoryStore::Open(session_dir_);
      ASSERT_TRUE(store.ok()) << store.status();
      options.store = *std::move(store);
    }
    auto engine = Engine::Start(*model_, *tokenizer_, options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *std::move(engine);
    metrics_ = std::make_unique<Metrics>();
    ServiceOptions service_options = security;
    service_options.model_name = "tiny-taylor";
    service_options.export_chunk_bytes = 1000;  // several chunks even for a tiny state
    service_ = std::make_unique<InferenceService>(*engine_, *metrics_, service_options);
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_NE(port, 0);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
    stub_ = v1::Inference::NewStub(channel_);
  }

  void StopServer() {
    if (service_) {
      service_->BeginDrain();
      service_->CancelRunning();
    }
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(10));
    engine_.reset();
    server_.reset();
    service_.reset();
  }

  struct Streamed {
    grpc::Status status;
    std::vector<v1::GenerateResponse> messages;
    std::string text;
    std::vector<int32_t> ids;
  };
  Streamed Generate(const v1::GenerateRequest& request) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    Streamed out;
    auto reader = stub_->Generate(&context, request);
    v1::GenerateResponse m;
    while (reader->Read(&m)) {
      out.messages.push_back(m);
      out.text += m.text();
      out.ids.insert(out.ids.end(), m.token_ids().begin(), m.token_ids().end());
    }
    out.status = reader->Finish();
    return out;
  }

  v1::Session CreateSession(const std::string& id = "") {
    grpc::ClientContext context;
    v1::CreateSessionRequest request;
    request.set_session_id(id);
    v1::Session session;
    grpc::Status s = stub_->CreateSession(&context, request, &session);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return session;
  }

  grpc::Status GetSession(const std::string& id, v1::Session* out) {
    grpc::ClientContext context;
    v1::GetSessionRequest request;
    request.set_session_id(id);
    return stub_->GetSession(&context, request, out);
  }

  // Polls until the session is not busy (the engine ends a cancelled job within one step); at most 20 s.
  v1::Session WaitIdle(const std::string& id) {
    v1::Session s;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    do {
      EXPECT_TRUE(GetSession(id, &s).ok());
      if (!s.busy()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    } while (std::chrono::steady_clock::now() < give_up);
    EXPECT_FALSE(s.busy()) << id;
    return s;
  }

  static v1::GenerateRequest Request(const std::string& session, const std::string& prompt, int64_t max_tokens) {
    v1::GenerateRequest r;
    r.set_session_id(session);
    r.set_prompt(prompt);
    r.set_max_tokens(max_tokens);
    return r;
  }

  static Model* model_;
  static Tokenizer* tokenizer_;
  std::string session_dir_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<InferenceService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Inference::Stub> stub_;
};

Model* ServiceTest::model_ = nullptr;
Tokenizer* ServiceTest::tokenizer_ = nullptr;

// The single-session reference: model/generate.h on a fresh slot.
GenerateResult Reference(const Model& model, const Tokenizer& tokenizer, const std::string& prompt, int max_tokens,
                         const SamplingParams& sampling, std::vector<std::string> stop = {}) {
  std::unique_ptr<Backend> cpu = MakeCpuBackend(model, {});
  GenerateRequest request;
  request.prompt = prompt;
  request.max_tokens = max_tokens;
  request.sampling = sampling;
  request.stop = std::move(stop);
  auto result = GenerateText(model, tokenizer, *cpu, 0, request);
  EXPECT_TRUE(result.ok()) << result.status();
  return *result;
}

TEST_F(ServiceTest, StreamedGreedyOutputEqualsTheCollectedReference) {
  const Streamed s = Generate(Request("", "This License applies to", 24));
  ASSERT_TRUE(s.status.ok()) << s.status.error_message();
  const GenerateResult ref = Reference(*model_, *tokenizer_, "This License applies to", 24, {});
  EXPECT_EQ(s.text, ref.text);
  EXPECT_EQ(s.ids, ref.tokens);
  ASSERT_FALSE(s.messages.empty());
  for (size_t i = 0; i + 1 < s.messages.size(); ++i) {
    EXPECT_TRUE(s.messages[i].finish_reason().empty()) << "finish_reason before the last message";
    EXPECT_FALSE(s.messages[i].has_usage());
  }
  const v1::GenerateResponse& last = s.messages.back();
  EXPECT_EQ(last.finish_reason(), ref.finish_reason);
  EXPECT_EQ(last.usage().prompt_tokens(), ref.prompt_tokens);
  EXPECT_EQ(last.usage().completion_tokens(), int64_t(ref.tokens.size()));
  EXPECT_EQ(last.usage().session_position(), ref.prompt_tokens + int64_t(ref.tokens.size()));
}

TEST_F(ServiceTest, StreamedSampledOutputWithStopEqualsTheReference) {
  v1::GenerateRequest r = Request("", "The", 40);
  r.set_temperature(1.0f);
  r.set_top_k(50);
  r.set_top_p(0.9f);
  r.set_repetition_penalty(1.1f);
  r.set_seed(1234);
  // A stop string taken from the reference's own output, so it is certain to trigger.
  SamplingParams sampling{1.0f, 50, 0.9f, 1.1f, 1234};
  const GenerateResult free_run = Reference(*model_, *tokenizer_, "The", 40, sampling);
  // Two ASCII bytes from the second half (a stop string must be valid UTF-8).
  std::string stop;
  for (size_t i = free_run.text.size() / 2; i + 1 < free_run.text.size() && stop.empty(); ++i) {
    const unsigned char a = free_run.text[i], b = free_run.text[i + 1];
    if (a > 0x20 && a < 0x7f && b > 0x20 && b < 0x7f) stop = free_run.text.substr(i, 2);
  }
  ASSERT_FALSE(stop.empty()) << free_run.text;
  r.add_stop(stop);
  const Streamed s = Generate(r);
  ASSERT_TRUE(s.status.ok()) << s.status.error_message();
  const GenerateResult ref = Reference(*model_, *tokenizer_, "The", 40, sampling, {stop});
  EXPECT_EQ(s.text, ref.text);
  EXPECT_EQ(s.messages.back().finish_reason(), "stop");
  EXPECT_EQ(s.text.find(stop), std::string::npos);
  // Zero values mean "off": top_p 0 and repetition_penalty 0 are top_p 1 and penalty 1.
  v1::GenerateRequest zero = Request("", "The", 12);
  zero.set_temperature(0.8f);
  zero.set_seed(5);
  v1::GenerateRequest ones = zero;
  ones.set_top_p(1.0f);
  ones.set_repetition_penalty(1.0f);
  EXPECT_EQ(Generate(zero).ids, Generate(ones).ids);
}

TEST_F(ServiceTest, SessionsContinueForkAndDelete) {
  const v1::Session created = CreateSession("alpha");
  EXPECT_EQ(created.session_id(), "alpha");
  EXPECT_EQ(created.position(), 0);
  // Prefill only, then continue: the same as one call with the whole text.
  const Streamed prefill = Generate(Request("alpha", "This License applies", 0));
  ASSERT_TRUE(prefill.status.ok()) << prefill.status.error_message();
  EXPECT_TRUE(prefill.ids.empty());
  const int64_t position = prefill.messages.back().usage().session_position();
  EXPECT_GT(position, 0);
  v1::Session got;
  ASSERT_TRUE(GetSession("alpha", &got).ok());
  EXPECT_EQ(got.position(), position);
  EXPECT_GT(got.state_bytes(), 0);

  grpc::ClientContext fork_context;
  v1::ForkSessionRequest fork;
  fork.set_session_id("alpha");
  v1::Session forked;
  ASSERT_TRUE(stub_->ForkSession(&fork_context, fork, &forked).ok());
  EXPECT_FALSE(forked.session_id().empty());
  EXPECT_NE(forked.session_id(), "alpha");
  EXPECT_EQ(forked.position(), position);

  const Streamed a = Generate(Request("alpha", " to", 16));
  const Streamed b = Generate(Request(forked.session_id(), " to", 16));
  ASSERT_TRUE(a.status.ok() && b.status.ok());
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.text, b.text);
  EXPECT_EQ(a.messages.back().usage().session_position(), position + a.messages.back().usage().prompt_tokens() +
                                                              int64_t(a.ids.size()));

  grpc::ClientContext list_context;
  v1::ListSessionsResponse list;
  ASSERT_TRUE(stub_->ListSessions(&list_context, {}, &list).ok());
  ASSERT_EQ(list.sessions_size(), 2);
  EXPECT_LT(list.sessions(0).session_id(), list.sessions(1).session_id());  // ordered by id

  grpc::ClientContext delete_context;
  v1::DeleteSessionRequest del;
  del.set_session_id("alpha");
  v1::DeleteSessionResponse deleted;
  ASSERT_TRUE(stub_->DeleteSession(&delete_context, del, &deleted).ok());
  const grpc::Status gone = GetSession("alpha", &got);
  EXPECT_EQ(gone.error_code(), grpc::StatusCode::NOT_FOUND) << gone.error_message();
  const Streamed after = Generate(Request("alpha", "x", 1));
  EXPECT_EQ(after.status.error_code(), grpc::StatusCode::NOT_FOUND) << after.status.error_message();
}

TEST_F(ServiceTest, ExportThenImportContinuesIdentically) {
  CreateSession("src");
  ASSERT_TRUE(Generate(Request("src", "Everyone is permitted to copy", 4)).status.ok());
  std::string blob;
  {
    grpc::ClientContext context;
    v1::ExportSessionRequest request;
    request.set_session_id("src");
    auto reader = stub_->ExportSession(&context, request);
    v1::SessionChunk chunk;
    int chunks = 0;
    while (reader->Read(&chunk)) {
      EXPECT_LE(chunk.data().size(), 1000u);
      blob += chunk.data();
      ++chunks;
    }
    ASSERT_TRUE(reader->Finish().ok());
    EXPECT_GT(chunks, 1);
  }
  v1::Session imported;
  {
    grpc::ClientContext context;
    auto writer = stub_->ImportSession(&context, &imported);
    for (size_t offset = 0; offset < blob.size(); offset += 777) {
      v1::ImportSessionRequest request;
      if (offset == 0) request.set_session_id("copy");
      request.set_data(blob.substr(offset, 777));
      ASSERT_TRUE(writer->Write(request));
    }
    writer->WritesDone();
    const grpc::Status s = writer->Finish();
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  EXPECT_EQ(imported.session_id(), "copy");
  v1::Session src;
  ASSERT_TRUE(GetSession("src", &src).ok());
  EXPECT_EQ(imported.position(), src.position());
  const Streamed a = Generate(Request("src", " and distribute", 12));
  const Streamed b = Generate(Request("copy", " and distribute", 12));
  ASSERT_TRUE(a.status.ok() && b.status.ok());
  EXPECT_EQ(a.ids, b.ids);

  // A corrupted snapshot is refused (the engine's snapshot checks name the problem), never imported.
  std::string bad = blob;
  bad[bad.size() / 2] ^= 0x5a;
  grpc::ClientContext context;
  v1::Session none;
  auto writer = stub_->ImportSession(&context, &none);
  v1::ImportSessionRequest request;
  request.set_session_id("bad");
  request.set_data(bad);
  writer->Write(request);
  writer->WritesDone();
  const grpc::Status s = writer->Finish();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.error_code(), grpc::StatusCode::UNKNOWN) << s.error_message();
  EXPECT_EQ(GetSession("bad", &none).error_code(), grpc::StatusCode::NOT_FOUND);
}

struct BadGenerate {
  const char* name;
  void (*mutate)(v1::GenerateRequest*);
  grpc::StatusCode code;
  const char* field;
};

// Chat messages are rendered with the model's template (here the default): the same output as the
// rendered text sent as a prompt, with the template's stop strings; prompt and messages together,
// or an unknown role, are refused naming the field.
TEST_F(ServiceTest, ChatMessagesAreRenderedWithTheTemplate) {
  v1::GenerateRequest chat = Request("", "", 12);
  auto* system = chat.add_messages();
  system->set_role("system");
  system->set_content("Be brief.");
  auto* user = chat.add_messages();
  user->set_role("user");
  user->set_content("This License");
  const Streamed a = Generate(chat);
  ASSERT_TRUE(a.status.ok()) << a.status.error_message();
  v1::GenerateRequest plain = Request("", "Be brief.\n\nUser: This License\nAssistant:", 12);
  plain.add_stop("\nUser:");
  const Streamed b = Generate(plain);
  ASSERT_TRUE(b.status.ok()) << b.status.error_message();
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.text, b.text);

  v1::GenerateRequest both = chat;
  both.set_prompt("x");
  const Streamed refused = Generate(both);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.status.error_message().find("messages: give prompt, prompt_token_ids or messages"),
            std::string::npos)
      << refused.status.error_message();
  v1::GenerateRequest unknown = Request("", "", 2);
  auto* tool = unknown.add_messages();
  tool->set_role("tool");
  tool->set_content("x");
  const Streamed refused_role = Generate(unknown);
  EXPECT_EQ(refused_role.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused_role.status.error_message().find("messages[0].role"), std::string::npos)
      << refused_role.status.error_message();
}

// Log-probabilities come one per streamed id, with the asked number of alternatives; the tokens'
// texts spell the streamed text. A token-id prompt gives what its text gives.
TEST_F(ServiceTest, LogprobsAndTokenIdPrompts) {
  v1::GenerateRequest r = Request("", "This License", 10);
  r.set_logprobs(true);
  r.set_top_logprobs(3);
  const Streamed s = Generate(r);
  ASSERT_TRUE(s.status.ok()) << s.status.error_message();
  std::string spelled;
  bool escaped = false;
  int logprobs = 0;
  for (const v1::GenerateResponse& m : s.messages) {
    ASSERT_EQ(m.logprobs_size(), m.token_ids_size());
    for (int i = 0; i < m.logprobs_size(); ++i) {
      const v1::TokenLogprob& l = m.logprobs(i);
      EXPECT_EQ(l.token_id(), m.token_ids(i));
      EXPECT_LE(l.logprob(), 0.0f);
      ASSERT_EQ(l.top_logprobs_size(), 3);
      EXPECT_EQ(l.top_logprobs(0).token_id(), l.token_id());  // greedy
      EXPECT_FLOAT_EQ(l.top_logprobs(0).logprob(), l.logprob());
      spelled += l.token();
      escaped = escaped || l.token().find("\\x") != std::string::npos;
      ++logprobs;
    }
  }
  EXPECT_EQ(logprobs, int(s.ids.size()));
  if (!escaped) EXPECT_EQ(spelled, s.text);

  auto ids = tokenizer_->Encode("This License");
  ASSERT_TRUE(ids.ok());
  v1::GenerateRequest by_ids = Request("", "", 10);
  by_ids.mutable_prompt_token_ids()->Add(ids->begin(), ids->end());
  const Streamed t = Generate(by_ids);
  ASSERT_TRUE(t.status.ok()) << t.status.error_message();
  EXPECT_EQ(t.ids, s.ids);
  EXPECT_EQ(t.text, s.text);
}

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

TEST_F(ServiceTest, BadSessionRequestsMapToCodesNamingTheField) {
  CreateSession("taken");
  {
    grpc::ClientContext context;
    v1::CreateSessionRequest r;
    r.set_session_id("has space");
    v1::Session s;
    const grpc::Status status = stub_->CreateSession(&context, r, &s);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(status.error_message().find("session_id"), std::string::npos) << status.error_message();
  }
  {
    grpc::ClientContext context;
    v1::CreateSessionRequest r;
    r.set_session_id(std::string(200, 'a'));
    v1::Session s;
    const grpc::Status status = stub_->CreateSession(&context, r, &s);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(status.error_message().find("session_id"), std::string::npos) << status.error_message();
  }
  {
    grpc::ClientContext context;
    v1::CreateSessionRequest r;
    r.set_session_id("taken");
    v1::Session s;
    const grpc::Status status = stub_->CreateSession(&context, r, &s);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::ALREADY_EXISTS) << status.error_message();
  }
  {
    v1::Session s;
    const grpc::Status status = GetSession("", &s);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(status.error_message().find("session_id"), std::string::npos) << status.error_message();
  }
  {
    grpc::ClientContext context;
    v1::ForkSessionRequest r;
    r.set_session_id("taken");
    r.set_new_session_id(".hidden");
    v1::Session s;
    const grpc::Status status = stub_->ForkSession(&context, r, &s);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(status.error_message().find("new_session_id"), std::string::npos) << status.error_message();
  }
  {
    grpc::ClientContext context;
    v1::ForkSessionRequest r;
    r.set_session_id("missing");
    v1::Session s;
    EXPECT_EQ(stub_->ForkSession(&context, r, &s).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  {
    grpc::ClientContext context;
    v1::ForkSessionRequest r;
    r.set_session_id("taken");
    r.set_new_session_id("taken");
    v1::Session s;
    EXPECT_EQ(stub_->ForkSession(&context, r, &s).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  }
  {
    grpc::ClientContext context;
    v1::DeleteSessionRequest r;
    r.set_session_id("missing");
    v1::DeleteSessionResponse d;
    EXPECT_EQ(stub_->DeleteSession(&context, r, &d).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  {
    grpc::ClientContext context;
    v1::ExportSessionRequest r;
    r.set_session_id("missing");
    auto reader = stub_->ExportSession(&context, r);
    v1::SessionChunk chunk;
    EXPECT_FALSE(reader->Read(&chunk));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::NOT_FOUND);
  }
  {
    grpc::ClientContext context;
    v1::Session s;
    auto writer = stub_->ImportSession(&context, &s);
    v1::ImportSessionRequest r;
    r.set_session_id("fresh");
    r.set_data("not a snapshot");
    writer->Write(r);
    writer->WritesDone();
    const grpc::Status status = writer->Finish();
    EXPECT_FALSE(status.ok());
    EXPECT_NE(status.error_code(), grpc::StatusCode::UNKNOWN) << status.error_message();
  }
}

TEST_F(ServiceTest, CancelAndDeadlineEndTheJobAndKeepTheSessionUsable) {
  CreateSession("long");
  {
    grpc::ClientContext context;
    auto reader = stub_->Generate(&context, Request("long", "The", 60000));
    v1::GenerateResponse m;
    ASSERT_TRUE(reader->Read(&m));
    context.TryCancel();
    while (reader->Read(&m)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  const int64_t after_cancel = WaitIdle("long").position();
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(300));
    auto reader = stub_->Generate(&context, Request("long", "The", 60000));
    v1::GenerateResponse m;
    while (reader->Read(&m)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  // The engine ends the job within one step; the session is then free again and consistent.
  const v1::Session s = WaitIdle("long");
  EXPECT_GE(s.position(), after_cancel);
  EXPECT_GT(after_cancel, 1);  // the first call streamed a token before its cancel: it is in the state
  const Streamed next = Generate(Request("long", " again", 3));
  ASSERT_TRUE(next.status.ok()) << next.status.error_message();
  const v1::Usage& usage = next.messages.back().usage();
  EXPECT_EQ(usage.session_position(), s.position() + usage.prompt_tokens() + usage.completion_tokens());
}

TEST_F(ServiceTest, ConcurrentStreamsEachEqualTheirReference) {
  const std::vector<std::string> prompts = {"This", "You may", "The licenses for most software", "Copyright"};
  std::vector<std::future<Streamed>> running;
  for (const std::string& p : prompts) {
    running.push_back(std::async(std::launch::async, [this, p] { return Generate(Request("", p, 20)); }));
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    const Streamed s = running[i].get();
    ASSERT_TRUE(s.status.ok()) << s.status.error_message();
    EXPECT_EQ(s.ids, Reference(*model_, *tokenizer_, prompts[i], 20, {}).tokens) << prompts[i];
  }
}

TEST_F(ServiceTest, ModelInfoDescribesTheServedModel) {
  grpc::ClientContext context;
  v1::ModelInfo info;
  ASSERT_TRUE(stub_->GetModelInfo(&context, {}, &info).ok());
  EXPECT_EQ(info.model_name(), "tiny-taylor");
  EXPECT_EQ(info.mechanism(), "taylor");
  ASSERT_EQ(info.layers_size(), 2);
  EXPECT_NE(info.layers(0).params_json().find("\"order\":2"), std::string::npos) << info.layers(0).params_json();
  EXPECT_EQ(info.vocab_size(), 512);
  EXPECT_EQ(info.state_bytes_per_session(), int64_t(model_->StateFloats() * sizeof(float)));
  EXPECT_EQ(info.kv_cache_bytes_per_token(), 0);
  EXPECT_EQ(info.limits().max_new_tokens(), EngineOptions{}.max_new_tokens);
  EXPECT_GT(info.limits().max_stop_strings(), 0);
}

TEST_F(ServiceTest, HealthCheckServes) {
  // grpc.health.v1.Health/Check with an empty request; the response's field 1 is the status.
  grpc::GenericStub stub(channel_);
  grpc::ClientContext context;
  grpc::Slice empty;
  grpc::ByteBuffer request(&empty, 1), response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status s) { done.set_value(std::move(s)); });
  const grpc::Status status = done.get_future().get();
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));  // status: SERVING
}

TEST_F(ServiceTest, DrainRefusesNewCallsWithUnavailable) {
  service_->BeginDrain();
  v1::Session s;
  EXPECT_EQ(GetSession("any", &s).error_code(), grpc::StatusCode::UNAVAILABLE);
  const Streamed g = Generate(Request("", "x", 2));
  EXPECT_EQ(g.status.error_code(), grpc::StatusCode::UNAVAILABLE);
}

// A blocking HTTP GET against the metrics endpoint; returns the whole response.
std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  const std::string request = "GET " + path + " HTTP/1.1\r\nHost: localhost\r\n\r\n";
  (void)!write(fd, request.data(), request.size());
  std::string response;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) response.append(buf, size_t(n));
  close(fd);
  return response;
}

TEST_F(ServiceTest, MetricsCountRequestsTokensAndLatencies) {
  ASSERT_TRUE(Generate(Request("", "The", 5)).status.ok());
  Generate(Request("", "The", -1));
  Engine* engine = engine_.get();
  Metrics* metrics = metrics_.get();
  auto http = MetricsHttpServer::Start("127.0.0.1", 0, [engine, metrics] { return metrics->Render(engine->stats()); });
  ASSERT_TRUE(http.ok()) << http.status();
  // The engine adds a step's token counts after the step's callbacks: poll briefly for them.
  std::string page;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  do {
    page = HttpGet((*http)->port(), "/metrics");
    if (page.find("steady_generated_tokens_total 5\n") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  } while (std::chrono::steady_clock::now() < give_up);
  EXPECT_EQ(page.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << page;
  for (const char* needle :
       {"steady_requests_total{rpc=\"Generate\",code=\"OK\"} 1\n",
        "steady_requests_total{rpc=\"Generate\",code=\"INVALID_ARGUMENT\"} 1\n",
        "steady_time_to_first_token_seconds_count 1\n", "steady_inter_token_latency_seconds_count 4\n",
        "steady_inter_token_latency_seconds_bucket{le=\"+Inf\"} 4\n", "# TYPE steady_queue_depth gauge\n",
        "steady_sessions{state=\"resident\"}", "steady_sessions{state=\"offloaded\"}", "steady_state_bytes ",
        "steady_engine_step_seconds ", "steady_generated_tokens_total 5\n"}) {
    EXPECT_NE(page.find(needle), std::string::npos) << "missing " << needle << " in\n" << page;
  }
  EXPECT_EQ(HttpGet((*http)->port(), "/other").rfind("HTTP/1.1 404", 0), 0u);
}

TEST(StatusMapping, EveryCodeMapsOneToOneKeepingTheMessage) {
  for (int code = 1; code <= 16; ++code) {
    const grpc::Status g = ToGrpcStatus(absl::Status(absl::StatusCode(code), "field: reason"));
    EXPECT_EQ(int(g.error_code()), code);
    EXPECT_EQ(g.error_message(), "field: reason");
  }
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
}


// --- Tenants (docs/security.md): every RPC with and without keys, across tenants.
class TenantServiceTest : public ServiceTest {
 protected:
  void SetUp() override {
    keys_path_ = testing::MakeTempDir("tenants") + "/keys.json";
    WriteKeys(0);
    auto auth = Authenticator::Load(keys_path_);
    ASSERT_TRUE(auth.ok()) << auth.status();
    security_.auth = *std::move(auth);
    security_.snapshot_key = std::string(32, 'k');
    StartServer({}, security_);
  }

  // alice may hold 3 sessions, bob is unlimited, carol's sessions may hold `carol_max_state_bytes`
  // (0: unlimited). Rewriting the file and calling security_.auth->Reload() changes the quotas of a
  // running server, as SIGHUP does.
  void WriteKeys(int64_t carol_max_state_bytes) {
    std::ofstream(keys_path_, std::ios::trunc) << R"({"tenants": {
        "alice": {"keys_sha256": [")" + HexDigest(Sha256("alice-key")) + R"("], "max_sessions": 3},
        "bob": {"keys_sha256": [")" + HexDigest(Sha256("bob-key")) + R"("]},
        "carol": {"keys_sha256": [")" + HexDigest(Sha256("carol-key")) + R"("], "max_state_bytes": )" +
                                         std::to_string(carol_max_state_bytes) + "}}}";
  }

  // The /metrics page as the server's --metrics-port would serve it.
  std::string MetricsPage() const { return metrics_->Render(engine_->stats(), engine_->options().store.get()); }

  // A context carrying `key` (none when empty).
  static std::unique_ptr<grpc::ClientContext> As(const std::string& key) {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    if (!key.empty()) context->AddMetadata("authorization", "Bearer " + key);
    return context;
  }
  grpc::Status Create(const std::string& key, const std::string& id) {
    v1::CreateSessionRequest r;
    r.set_session_id(id);
    v1::Session out;
    return stub_->CreateSession(As(key).get(), r, &out);
  }
  grpc::Status Get(const std::string& key, const std::string& id, v1::Session* out) {
    v1::GetSessionRequest r;
    r.set_session_id(id);
    return stub_->GetSession(As(key).get(), r, out);
  }
  std::vector<std::string> List(const std::string& key, grpc::Status* status = nullptr) {
    v1::ListSessionsResponse out;
    grpc::Status s = stub_->ListSessions(As(key).get(), {}, &out);
    if (status) *status = s;
    std::vector<std::string> ids;
    for (const v1::Session& session : out.sessions()) ids.push_back(session.session_id());
    return ids;
  }
  Streamed GenerateAs(const std::string& key, const v1::GenerateRequest& request) {
    auto context = As(key);
    Streamed out;
    auto reader = stub_->Generate(context.get(), request);
    v1::GenerateResponse m;
    while (reader->Read(&m)) out.text += m.text();
    out.status = reader->Finish();
    return out;
  }
  grpc::Status Fork(const std::string& key, const std::string& id, const std::string& new_id) {
    v1::ForkSessionRequest r;
    r.set_session_id(id);
    r.set_new_session_id(new_id);
    v1::Session out;
    return stub_->ForkSession(As(key).get(), r, &out);
  }
  grpc::Status Delete(const std::string& key, const std::string& id) {
    v1::DeleteSessionRequest r;
    r.set_session_id(id);
    v1::DeleteSessionResponse out;
    return stub_->DeleteSession(As(key).get(), r, &out);
  }
  grpc::Status Export(const std::string& key, const std::string& id, std::string* blob) {
    v1::ExportSessionRequest r;
    r.set_session_id(id);
    auto context = As(key);
    auto reader = stub_->ExportSession(context.get(), r);
    v1::SessionChunk chunk;
    blob->clear();
    while (reader->Read(&chunk)) blob->append(chunk.data());
    return reader->Finish();
  }
  grpc::Status Import(const std::string& key, const std::string& id, const std::string& blob) {
    auto context = As(key);
    v1::Session out;
    auto writer = stub_->ImportSession(context.get(), &out);
    v1::ImportSessionRequest r;
    r.set_session_id(id);
    r.set_data(blob);
    writer->Write(r);
    writer->WritesDone();
    return writer->Finish();
  }

  // Alice's and bob's same-named sessions through restarts on the store `open_store` opens each time.
  void ExpectTenantsKeepTheirSessionsAcrossRestarts(const std::function<std::shared_ptr<SessionStore>()>& open_store);

  std::string keys_path_;
  ServiceOptions security_;
  std::unique_ptr<testing::RedisServer> redis_;  // stops after TearDown has stopped the server using it
};

TEST_F(TenantServiceTest, EveryRpcNeedsAKey) {
  for (const std::string key : {"", "wrong-key"}) {
    v1::ModelInfo info;
    EXPECT_EQ(stub_->GetModelInfo(As(key).get(), {}, &info).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(Create(key, "x").error_code(), grpc::StatusCode::UNAUTHENTICATED);
    v1::Session s;
    EXPECT_EQ(Get(key, "x", &s).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    grpc::Status list;
    List(key, &list);
    EXPECT_EQ(list.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(GenerateAs(key, Request("", "Hello", 2)).status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(Fork(key, "x", "y").error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(Delete(key, "x").error_code(), grpc::StatusCode::UNAUTHENTICATED);
    std::string blob;
    EXPECT_EQ(Export(key, "x", &blob).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(Import(key, "x", "bytes").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  v1::ModelInfo info;
  EXPECT_TRUE(stub_->GetModelInfo(As("alice-key").get(), {}, &info).ok());
  // Each refusal is counted once by reason (9 RPCs each way); the good key is not.
  const std::string page = MetricsPage();
  EXPECT_NE(page.find("steady_auth_failures_total{reason=\"missing\"} 9\n"), std::string::npos) << page;
  EXPECT_NE(page.find("steady_auth_failures_total{reason=\"unknown\"} 9\n"), std::string::npos) << page;
}

TEST_F(TenantServiceTest, AnotherTenantsSessionIsNotFound) {
  ASSERT_TRUE(Create("alice-key", "s").ok());
  const Streamed turn = GenerateAs("alice-key", Request("s", "Hello there", 6));
  ASSERT_TRUE(turn.status.ok()) << turn.status.error_message();
  // Bob gets what a session that does not exist gets, on every RPC, and alice's session is untouched.
  v1::Session got;
  for (const std::string id : {"s", "no-such"}) {
    grpc::Status get = Get("bob-key", id, &got);
    EXPECT_EQ(get.error_code(), grpc::StatusCode::NOT_FOUND) << id;
    EXPECT_EQ(get.error_message(), "session_id: no session " + id);
    EXPECT_EQ(GenerateAs("bob-key", Request(id, "more", 2)).status.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_EQ(Fork("bob-key", id, "mine").error_code(), grpc::StatusCode::NOT_FOUND);
    std::string blob;
    EXPECT_EQ(Export("bob-key", id, &blob).error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_EQ(Delete("bob-key", id).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  // Naming the engine's id of another tenant's session is not a way in: '~' is not an id character.
  EXPECT_EQ(Get("bob-key", "alice~s", &got).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(GenerateAs("bob-key", Request("alice~s", "more", 2)).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ASSERT_TRUE(Get("alice-key", "s", &got).ok());
  const int64_t alice_position = got.position();
  EXPECT_GT(alice_position, 0);
  // The same id under two tenants: two sessions, each listing only its own.
  ASSERT_TRUE(Create("bob-key", "s").ok());
  EXPECT_EQ(List("alice-key"), std::vector<std::string>{"s"});
  EXPECT_EQ(List("bob-key"), std::vector<std::string>{"s"});
  ASSERT_TRUE(Get("bob-key", "s", &got).ok());
  EXPECT_EQ(got.position(), 0);
  ASSERT_TRUE(Delete("bob-key", "s").ok());
  ASSERT_TRUE(Get("alice-key", "s", &got).ok());
  EXPECT_EQ(got.position(), alice_position);
  // Quota: alice may hold 3 sessions.
  ASSERT_TRUE(Create("alice-key", "t").ok());
  ASSERT_TRUE(Fork("alice-key", "s", "u").ok());
  grpc::Status over = Create("alice-key", "v");
  EXPECT_EQ(over.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(over.error_message().find("max_sessions"), std::string::npos) << over.error_message();
  EXPECT_EQ(Fork("alice-key", "s", "w").error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(Create("bob-key", "v").ok());  // bob's own count
}

TEST_F(TenantServiceTest, SnapshotsImportOnlyForTheTenantThatSignedThem) {
  ASSERT_TRUE(Create("alice-key", "s").ok());
  ASSERT_TRUE(GenerateAs("alice-key", Request("s", "Hello there", 6)).status.ok());
  std::string blob;
  ASSERT_TRUE(Export("alice-key", "s", &blob).ok());
  ASSERT_TRUE(IsSignedSnapshot(blob));
  // Another tenant's, a modified one, a truncated one, an unsigned one: refused before parsing.
  EXPECT_EQ(Import("bob-key", "stolen", blob).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  std::string modified = blob;
  modified[modified.size() / 2] ^= 0x40;
  EXPECT_EQ(Import("alice-key", "m", modified).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Import("alice-key", "t", blob.substr(0, blob.size() - 1)).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Import("alice-key", "h", blob.substr(0, kSignedSnapshotHeaderBytes - 1)).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);  // cut inside the MAC
  grpc::Status unsigned_import = Import("alice-key", "u", blob.substr(kSignedSnapshotHeaderBytes));
  EXPECT_EQ(unsigned_import.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(unsigned_import.error_message().find("unsigned"), std::string::npos) << unsigned_import.error_message();
  EXPECT_TRUE(List("bob-key").empty());
  // The longest id behind a tenant's prefix goes through a snapshot too.
  const std::string longest(kMaxSessionIdBytes, 'z');
  ASSERT_TRUE(Create("alice-key", longest).ok());
  std::string long_blob;
  ASSERT_TRUE(Export("alice-key", longest, &long_blob).ok());
  ASSERT_TRUE(Delete("alice-key", longest).ok());
  EXPECT_TRUE(Import("alice-key", longest, long_blob).ok());
  // Its own tenant imports it, and the copy continues like the original.
  ASSERT_TRUE(Import("alice-key", "copy", blob).ok());
  const Streamed a = GenerateAs("alice-key", Request("s", " and then", 8));
  const Streamed b = GenerateAs("alice-key", Request("copy", " and then", 8));
  ASSERT_TRUE(a.status.ok() && b.status.ok());
  EXPECT_EQ(a.text, b.text);
}

// max_state_bytes (docs/security.md, Quotas): a session that would take its tenant's state bytes over
// the quota is not made (Create, Fork, Import), and a tenant already over it (its quota lowered by a
// reload) starts no Generate; each answers RESOURCE_EXHAUSTED naming the quota and the tenant.
// Nothing is created, nothing is lost, other tenants are not counted, and /metrics counts each refusal.
TEST_F(TenantServiceTest, MaxStateBytesRefusesWhatWouldGoOverItAndChangesNothing) {
  // A Taylor session's state has one size whatever its position.
  const int64_t per_session = int64_t(model_->StateFloats() * sizeof(float));
  const int64_t quota = 2 * per_session + per_session / 2;  // room for two sessions, not three
  WriteKeys(quota);
  ASSERT_TRUE(security_.auth->Reload().ok());
  ASSERT_TRUE(Create("carol-key", "a").ok());
  ASSERT_TRUE(Create("carol-key", "b").ok());
  ASSERT_TRUE(GenerateAs("carol-key", Request("a", "Hello there", 4)).status.ok());
  v1::Session a;
  ASSERT_TRUE(Get("carol-key", "a", &a).ok());
  ASSERT_EQ(a.state_bytes(), per_session);
  ASSERT_GT(a.position(), 0);
  std::string blob;
  ASSERT_TRUE(Export("carol-key", "a", &blob).ok());

  auto expect_refused = [](const grpc::Status& s, int64_t limit, int64_t would_hold, const std::string& rpc) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << rpc << ": " << s.error_message();
    const std::string want = "quota max_state_bytes of tenant carol (" + std::to_string(limit) +
                             ") reached: its sessions would hold " + std::to_string(would_hold) + " bytes";
    EXPECT_EQ(s.error_message(), want) << rpc;
  };
  expect_refused(Create("carol-key", "c"), quota, 3 * per_session, "CreateSession");
  expect_refused(Fork("carol-key", "a", "c"), quota, 3 * per_session, "ForkSession");
  expect_refused(Import("carol-key", "c", blob), quota, 3 * per_session, "ImportSession");
  EXPECT_EQ(List("carol-key"), (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(std::filesystem::exists(session_dir_ + "/carol~c.snap"));
  EXPECT_TRUE(Create("bob-key", "c").ok());  // bob's bytes are his own

  WriteKeys(per_session);  // carol now holds twice her quota
  ASSERT_TRUE(security_.auth->Reload().ok());
  const Streamed over = GenerateAs("carol-key", Request("a", " and more", 4));
  expect_refused(over.status, per_session, 2 * per_session, "Generate");
  EXPECT_TRUE(over.text.empty());
  v1::Session after;
  ASSERT_TRUE(Get("carol-key", "a", &after).ok());
  EXPECT_EQ(after.position(), a.position());
  EXPECT_EQ(List("carol-key"), (std::vector<std::string>{"a", "b"}));
  // Back within it, the same session goes on from where it was.
  ASSERT_TRUE(Delete("carol-key", "b").ok());
  const Streamed under = GenerateAs("carol-key", Request("a", " and more", 4));
  ASSERT_TRUE(under.status.ok()) << under.status.error_message();
  ASSERT_TRUE(Get("carol-key", "a", &after).ok());
  EXPECT_GT(after.position(), a.position());

  const std::string page = MetricsPage();
  EXPECT_NE(page.find("steady_quota_refusals_total{tenant=\"carol\",quota=\"max_state_bytes\"} 4\n"), std::string::npos)
      << page;
  EXPECT_EQ(page.find("steady_quota_refusals_total{tenant=\"bob\""), std::string::npos) << page;
}

// --allow-unsigned-imports (docs/security.md, Signed snapshots). With a snapshot key an unsigned
// snapshot is PERMISSION_DENIED ("unsigned") by default and imports with the flag, continuing like the
// original; signed blobs are still checked either way. Without a snapshot key a signed blob is
// FAILED_PRECONDITION and an unsigned one imports.
TEST_F(TenantServiceTest, UnsignedSnapshotsImportOnlyWithTheFlag) {
  ASSERT_TRUE(Create("alice-key", "s").ok());
  ASSERT_TRUE(GenerateAs("alice-key", Request("s", "Hello there", 6)).status.ok());
  std::string blob;
  ASSERT_TRUE(Export("alice-key", "s", &blob).ok());
  ASSERT_TRUE(IsSignedSnapshot(blob));
  const std::string unsigned_blob = blob.substr(kSignedSnapshotHeaderBytes);
  ASSERT_FALSE(IsSignedSnapshot(unsigned_blob));
  const grpc::Status refused = Import("alice-key", "u", unsigned_blob);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED) << refused.error_message();
  EXPECT_NE(refused.error_message().find("snapshot: unsigned"), std::string::npos) << refused.error_message();
  EXPECT_EQ(List("alice-key"), std::vector<std::string>{"s"});

  StopServer();
  ServiceOptions allowing = security_;
  allowing.allow_unsigned_imports = true;
  StartServer({}, allowing);
  grpc::Status imported = Import("alice-key", "u", unsigned_blob);
  ASSERT_TRUE(imported.ok()) << imported.error_message();
  imported = Import("alice-key", "v", blob);
  ASSERT_TRUE(imported.ok()) << imported.error_message();
  std::string modified = blob;
  modified[modified.size() / 2] ^= 0x40;
  const grpc::Status forged = Import("alice-key", "m", modified);
  EXPECT_EQ(forged.error_code(), grpc::StatusCode::PERMISSION_DENIED) << forged.error_message();
  EXPECT_NE(forged.error_message().find("does not verify"), std::string::npos) << forged.error_message();
  EXPECT_EQ(Import("bob-key", "stolen", blob).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(List("alice-key"), (std::vector<std::string>{"s", "u", "v"}));
  EXPECT_TRUE(List("bob-key").empty());
  const Streamed original = GenerateAs("alice-key", Request("s", " and then", 8));
  const Streamed from_unsigned = GenerateAs("alice-key", Request("u", " and then", 8));
  const Streamed from_signed = GenerateAs("alice-key", Request("v", " and then", 8));
  ASSERT_TRUE(original.status.ok() && from_unsigned.status.ok() && from_signed.status.ok());
  EXPECT_EQ(from_unsigned.text, original.text);
  EXPECT_EQ(from_signed.text, original.text);

  ASSERT_TRUE(Delete("alice-key", "v").ok());  // alice may hold 3 sessions
  StopServer();
  ServiceOptions keyless = security_;
  keyless.snapshot_key.clear();
  StartServer({}, keyless);
  const grpc::Status no_key = Import("alice-key", "w", blob);
  EXPECT_EQ(no_key.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << no_key.error_message();
  imported = Import("alice-key", "w", unsigned_blob);
  EXPECT_TRUE(imported.ok()) << imported.error_message();
}

// The session store's keys carry the tenant (docs/security.md): alice's and bob's session "s", made
// from different prompts, come back after a restart on the same store as two sessions, each to its
// own tenant (its position, and the continuation it would have given before the restart); a delete
// by one tenant leaves the other's. `open_store` opens the same store at each start.
void TenantServiceTest::ExpectTenantsKeepTheirSessionsAcrossRestarts(
    const std::function<std::shared_ptr<SessionStore>()>& open_store) {
  auto restart = [&] {
    StopServer();
    EngineOptions options;
    options.store = open_store();
    ASSERT_NE(options.store, nullptr);
    StartServer(options, security_);
  };
  ASSERT_NO_FATAL_FAILURE(restart());
  const std::map<std::string, std::string> prompts = {{"alice-key", "This License applies to any program or other work"},
                                                      {"bob-key", "Hello"}};
  std::map<std::string, int64_t> positions;
  std::map<std::string, std::string> continuations;  // of a fork, made before the restart
  for (const auto& [key, prompt] : prompts) {
    ASSERT_TRUE(Create(key, "s").ok()) << key;
    ASSERT_TRUE(GenerateAs(key, Request("s", prompt, 3)).status.ok()) << key;
    v1::Session got;
    ASSERT_TRUE(Get(key, "s", &got).ok()) << key;
    positions[key] = got.position();
    ASSERT_TRUE(Fork(key, "s", "probe").ok()) << key;
    const Streamed probe = GenerateAs(key, Request("probe", " and then", 8));
    ASSERT_TRUE(probe.status.ok()) << probe.status.error_message();
    continuations[key] = probe.text;
    ASSERT_TRUE(Delete(key, "probe").ok()) << key;
  }
  ASSERT_NE(positions["alice-key"], positions["bob-key"]);
  EXPECT_NE(continuations["alice-key"], continuations["bob-key"]);  // else a swap would go unseen

  ASSERT_NO_FATAL_FAILURE(restart());
  auto stored = engine_->options().store->List();
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(*stored, (std::vector<std::string>{"alice~s", "bob~s"}));
  for (const auto& [key, prompt] : prompts) {
    EXPECT_EQ(List(key), std::vector<std::string>{"s"}) << key;
    v1::Session got;
    ASSERT_TRUE(Get(key, "s", &got).ok()) << key;
    EXPECT_EQ(got.position(), positions[key]) << key;
    const Streamed next = GenerateAs(key, Request("s", " and then", 8));
    ASSERT_TRUE(next.status.ok()) << next.status.error_message();
    EXPECT_EQ(next.text, continuations[key]) << key;
  }

  ASSERT_TRUE(Delete("bob-key", "s").ok());
  ASSERT_NO_FATAL_FAILURE(restart());
  v1::Session got;
  EXPECT_EQ(Get("bob-key", "s", &got).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(List("bob-key").empty());
  ASSERT_TRUE(Get("alice-key", "s", &got).ok());
  EXPECT_GT(got.position(), positions["alice-key"]);  // with the turn made after the first restart
}

TEST_F(TenantServiceTest, TenantsKeepTheirSessionsAcrossRestartsOnADirectory) {
  const std::string dir = testing::MakeTempDir("tenant_sessions");
  ExpectTenantsKeepTheirSessionsAcrossRestarts([&]() -> std::shared_ptr<SessionStore> {
    auto store = DirectoryStore::Open(dir);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  });
  EXPECT_TRUE(std::filesystem::exists(dir + "/alice~s.snap"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/bob~s.snap"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/s.snap"));
}

TEST_F(TenantServiceTest, TenantsKeepTheirSessionsAcrossRestartsInRedis) {
  redis_ = testing::RedisServer::Start(testing::MakeTempDir("redis"));
  if (!redis_) GTEST_SKIP() << "SKIPPED: redis-server is not installed (scripts/install-deps.sh installs it)";
  int replica = 0;  // each start is another process to Redis: a lease owner of its own
  ExpectTenantsKeepTheirSessionsAcrossRestarts([&]() -> std::shared_ptr<SessionStore> {
    RedisStoreOptions o;
    o.url = redis_->url();
    o.key_prefix = "steady:service-test:";
    o.owner = "replica-" + std::to_string(++replica);
    auto store = RedisStore::Open(o);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  });
}

}  // namespace
}  // namespace steady
