#include "tests/server/rpc/service_fixture.h"

#include <chrono>
#include <thread>
#include <utility>

#include <grpcpp/health_check_service_interface.h>

#include "server/store/directory_store.h"
#include "tests/testutil.h"

namespace steady {

Model* ServiceTest::model_ = nullptr;
Tokenizer* ServiceTest::tokenizer_ = nullptr;

void ServiceTest::SetUpTestSuite() {
  auto model = Model::Random(testing::TinyConfig("taylor", {{"order", 2}}), 42);
  ASSERT_TRUE(model.ok()) << model.status();
  model_ = new Model(*std::move(model));
  auto tokenizer = Tokenizer::Load(testing::SourcePath("tests/data/tokenizer/tokenizer.model"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  tokenizer_ = tokenizer->release();
}

void ServiceTest::StartServer(EngineOptions options, ServiceOptions security) {
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

void ServiceTest::StopServer() {
  if (service_) {
    service_->BeginDrain();
    service_->CancelRunning();
  }
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(10));
  engine_.reset();
  server_.reset();
  service_.reset();
}

std::unique_ptr<grpc::ClientContext> ServiceTest::As(const std::string& key) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  if (!key.empty()) context->AddMetadata("authorization", "Bearer " + key);
  return context;
}

ServiceTest::Streamed ServiceTest::GenerateAs(const std::string& key, const v1::GenerateRequest& request) {
  auto context = As(key);
  Streamed out;
  auto reader = stub_->Generate(context.get(), request);
  v1::GenerateResponse m;
  while (reader->Read(&m)) {
    out.messages.push_back(m);
    out.text += m.text();
    out.ids.insert(out.ids.end(), m.token_ids().begin(), m.token_ids().end());
  }
  out.status = reader->Finish();
  return out;
}

grpc::Status ServiceTest::Create(const std::string& key, const std::string& id, v1::Session* out) {
  v1::CreateSessionRequest r;
  r.set_session_id(id);
  v1::Session session;
  return stub_->CreateSession(As(key).get(), r, out ? out : &session);
}

grpc::Status ServiceTest::Get(const std::string& key, const std::string& id, v1::Session* out) {
  v1::GetSessionRequest r;
  r.set_session_id(id);
  return stub_->GetSession(As(key).get(), r, out);
}

std::vector<std::string> ServiceTest::List(const std::string& key, grpc::Status* status) {
  v1::ListSessionsResponse out;
  grpc::Status s = stub_->ListSessions(As(key).get(), {}, &out);
  if (status) *status = s;
  std::vector<std::string> ids;
  for (const v1::Session& session : out.sessions()) ids.push_back(session.session_id());
  return ids;
}

grpc::Status ServiceTest::Fork(const std::string& key, const std::string& id, const std::string& new_id,
                               v1::Session* out) {
  v1::ForkSessionRequest r;
  r.set_session_id(id);
  r.set_new_session_id(new_id);
  v1::Session session;
  return stub_->ForkSession(As(key).get(), r, out ? out : &session);
}

grpc::Status ServiceTest::Delete(const std::string& key, const std::string& id) {
  v1::DeleteSessionRequest r;
  r.set_session_id(id);
  v1::DeleteSessionResponse out;
  return stub_->DeleteSession(As(key).get(), r, &out);
}

grpc::Status ServiceTest::Export(const std::string& key, const std::string& id, std::string* blob) {
  v1::ExportSessionRequest r;
  r.set_session_id(id);
  auto context = As(key);
  auto reader = stub_->ExportSession(context.get(), r);
  v1::SessionChunk chunk;
  blob->clear();
  while (reader->Read(&chunk)) {
    EXPECT_LE(chunk.data().size(), 1000u);  // ServiceOptions::export_chunk_bytes
    blob->append(chunk.data());
  }
  return reader->Finish();
}

grpc::Status ServiceTest::Import(const std::string& key, const std::string& id, const std::string& blob,
                                 v1::Session* out, size_t chunk_bytes) {
  auto context = As(key);
  v1::Session session;
  auto writer = stub_->ImportSession(context.get(), out ? out : &session);
  const size_t step = chunk_bytes > 0 ? chunk_bytes : std::max<size_t>(blob.size(), 1);
  for (size_t offset = 0; offset < std::max<size_t>(blob.size(), 1); offset += step) {
    v1::ImportSessionRequest r;
    if (offset == 0) r.set_session_id(id);
    r.set_data(blob.substr(offset, step));
    if (!writer->Write(r)) break;
  }
  writer->WritesDone();
  return writer->Finish();
}

v1::Session ServiceTest::CreateSession(const std::string& id) {
  v1::Session session;
  const grpc::Status s = Create("", id, &session);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return session;
}

v1::Session ServiceTest::WaitIdle(const std::string& id) {
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

v1::GenerateRequest ServiceTest::Request(const std::string& session, const std::string& prompt, int64_t max_tokens) {
  v1::GenerateRequest r;
  r.set_session_id(session);
  r.set_prompt(prompt);
  r.set_max_tokens(max_tokens);
  return r;
}

GenerateResult Reference(const Model& model, const Tokenizer& tokenizer, const std::string& prompt, int max_tokens,
                         const SamplingParams& sampling, std::vector<std::string> stop) {
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

}  // namespace steady
