// The gRPC service end to end in one process, for the tests of server/rpc/: a real server on 127.0.0.1
// (ephemeral port) over the real engine and a random tiny Taylor model, driven through the generated
// client stub. Every RPC helper takes the API key to send ("" sends none).
#ifndef STEADY_TESTS_SERVER_RPC_SERVICE_FIXTURE_H_
#define STEADY_TESTS_SERVER_RPC_SERVICE_FIXTURE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "model/decoder/model.h"
#include "model/generate.h"
#include "model/sampling/sampling.h"
#include "model/text/tokenizer.h"
#include "server/engine/engine.h"
#include "server/metrics/metrics.h"
#include "server/rpc/service.h"

namespace steady {

// Everything one server needs, torn down in the order main.cc uses: drain, shut down, stop the engine.
class ServiceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite();
  void SetUp() override { StartServer(); }
  void TearDown() override { StopServer(); }

  // Sessions go to options.store, else to a directory store on session_dir_, the same one at every
  // start of a test (a restart finds the sessions, as steady-server does on the same --session-dir).
  void StartServer(EngineOptions options = {}, ServiceOptions security = {});
  void StopServer();

  struct Streamed {
    grpc::Status status;
    std::vector<v1::GenerateResponse> messages;
    std::string text;
    std::vector<int32_t> ids;
  };

  // A context carrying `key` (none when empty), with a 60 s deadline.
  static std::unique_ptr<grpc::ClientContext> As(const std::string& key);
  Streamed GenerateAs(const std::string& key, const v1::GenerateRequest& request);
  grpc::Status Create(const std::string& key, const std::string& id, v1::Session* out = nullptr);
  grpc::Status Get(const std::string& key, const std::string& id, v1::Session* out);
  // The listed ids in order; `status` (when given) gets the call's status.
  std::vector<std::string> List(const std::string& key, grpc::Status* status = nullptr);
  grpc::Status Fork(const std::string& key, const std::string& id, const std::string& new_id,
                    v1::Session* out = nullptr);
  grpc::Status Delete(const std::string& key, const std::string& id);
  grpc::Status Export(const std::string& key, const std::string& id, std::string* blob);
  // The whole blob in one message, or in messages of `chunk_bytes` when that is positive.
  grpc::Status Import(const std::string& key, const std::string& id, const std::string& blob,
                      v1::Session* out = nullptr, size_t chunk_bytes = 0);

  // Without a key.
  Streamed Generate(const v1::GenerateRequest& request) { return GenerateAs("", request); }
  v1::Session CreateSession(const std::string& id = "");  // expects success
  grpc::Status GetSession(const std::string& id, v1::Session* out) { return Get("", id, out); }
  // Polls until the session is not busy (the engine ends a cancelled job within one step); at most 20 s.
  v1::Session WaitIdle(const std::string& id);

  static v1::GenerateRequest Request(const std::string& session, const std::string& prompt, int64_t max_tokens);

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

// The single-session reference: model/generate.h on a fresh slot.
GenerateResult Reference(const Model& model, const Tokenizer& tokenizer, const std::string& prompt, int max_tokens,
                         const SamplingParams& sampling, std::vector<std::string> stop = {});

}  // namespace steady

#endif  // STEADY_TESTS_SERVER_RPC_SERVICE_FIXTURE_H_
