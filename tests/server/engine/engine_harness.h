// Helpers for the tests that drive a real Engine (engine_test, durability_test): the test tokenizer,
// tiny models, prompts, blocking calls and a directory store.
#ifndef STEADY_TESTS_SERVER_ENGINE_ENGINE_HARNESS_H_
#define STEADY_TESTS_SERVER_ENGINE_ENGINE_HARNESS_H_

#include <functional>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/decoder/model.h"
#include "model/text/tokenizer.h"
#include "server/engine/engine.h"
#include "server/store/session_store.h"

namespace steady::testing {

const Tokenizer& TestTokenizer();

// A random tiny model (tests/testutil.h's shape); eos -1: generation runs to max_tokens (for tests
// that need a job to keep running).
Model EngineTinyModel(const std::string& mechanism, const nlohmann::json& params, uint64_t seed, int eos = 2);
inline Model Taylor(int eos = 2) { return EngineTinyModel("taylor", {{"order", 2}}, 1234, eos); }

// Prompts of different lengths (a few words to a few hundred tokens).
std::string Prompt(int i);

struct Outcome {
  absl::Status status;
  std::string finish_reason, text;
  std::vector<int32_t> ids;
  std::vector<TokenLogprobs> logprobs;
  Usage usage;
  // n > 1: each choice's text and finish_reason, by index.
  std::vector<std::string> choice_text, choice_reason;
};

// Submits a job whose result is collected into the returned future.
std::future<Outcome> SubmitAsync(Engine& e, GenerateJob job);
GenerateJob Job(const std::string& session, const std::string& prompt, int64_t max_tokens);
Outcome Generate(Engine& e, const std::string& session, const std::string& prompt, int64_t max_tokens);

// Runs an asynchronous engine call and waits for its callback's value.
template <typename T>
T Call(const std::function<void(std::function<void(T)>)>& op) {
  std::promise<T> p;
  op([&p](T v) { p.set_value(std::move(v)); });
  return p.get_future().get();
}
absl::StatusOr<SessionInfo> Create(Engine& e, const std::string& id);
absl::StatusOr<SessionInfo> Get(Engine& e, const std::string& id);

// A DirectoryStore on `dir` (fails the calling test when it cannot open).
std::shared_ptr<SessionStore> DirStore(const std::string& dir);
// A RedisStore on `url` as replica `owner` opens it (fails the calling test when it cannot open).
std::shared_ptr<SessionStore> RedisStoreAt(const std::string& url, const std::string& key_prefix,
                                           const std::string& owner, int64_t lease_ms);
std::unique_ptr<Engine> StartEngine(const Model& m, EngineOptions o);
EngineOptions Options(int max_batch = 64, int64_t state_memory = int64_t(1) << 22);

// A session's history as (prompt, max_tokens) turns; returns each turn's output.
using Turns = std::vector<std::pair<std::string, int>>;
std::vector<std::vector<int32_t>> Play(Engine& e, const std::string& session, const Turns& turns);

}  // namespace steady::testing

#endif  // STEADY_TESTS_SERVER_ENGINE_ENGINE_HARNESS_H_
