#include "tests/server/engine/engine_harness.h"

#include <gtest/gtest.h>

#include "server/store/directory_store.h"
#include "server/store/redis_store.h"
#include "tests/testutil.h"

namespace steady::testing {

const Tokenizer& TestTokenizer() {
  static const Tokenizer* t = [] {
    auto loaded = Tokenizer::Load(SourcePath("tests/data/tokenizer/tokenizer.model"));
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    return loaded->release();
  }();
  return *t;
}

Model EngineTinyModel(const std::string& mechanism, const nlohmann::json& params, uint64_t seed, int eos) {
  return TinyModel(mechanism, params, seed,
                   eos < 0 ? nlohmann::json{{"eos_token_id", nullptr}} : nlohmann::json{{"eos_token_id", eos}});
}

std::string Prompt(int i) {
  static const char* words[] = {"the", "license", "software", "free", "you", "may", "copy", "work",
                                "source", "code", "terms", "of", "any", "program", "modify", "and"};
  std::string s;
  const int n = 1 + (i * 37) % 90;
  for (int w = 0; w < n; ++w) {
    if (w) s += ' ';
    s += words[(i * 7 + w * 3) % 16];
  }
  return s;
}

std::future<Outcome> SubmitAsync(Engine& e, GenerateJob job) {
  auto outcome = std::make_shared<Outcome>();
  auto promise = std::make_shared<std::promise<Outcome>>();
  auto future = promise->get_future();
  auto user_output = job.on_output;
  job.on_output = [outcome, user_output](const std::string& text, const std::vector<int32_t>& ids,
                                         const std::vector<TokenLogprobs>& logprobs) {
    outcome->text += text;
    outcome->ids.insert(outcome->ids.end(), ids.begin(), ids.end());
    outcome->logprobs.insert(outcome->logprobs.end(), logprobs.begin(), logprobs.end());
    if (user_output) user_output(text, ids, logprobs);
  };
  job.on_choice_output = [outcome](int index, const std::string& text, const std::vector<int32_t>&,
                                   const std::vector<TokenLogprobs>&) {
    if (outcome->choice_text.size() <= size_t(index)) outcome->choice_text.resize(index + 1);
    outcome->choice_text[index] += text;
  };
  job.on_choice_done = [outcome](int index, const std::string& reason) {
    if (outcome->choice_reason.size() <= size_t(index)) outcome->choice_reason.resize(index + 1);
    outcome->choice_reason[index] = reason;
  };
  job.on_done = [outcome, promise](const absl::Status& st, const std::string& reason, const Usage& usage) {
    outcome->status = st;
    outcome->finish_reason = reason;
    outcome->usage = usage;
    promise->set_value(*outcome);
  };
  e.Submit(std::move(job));
  return future;
}

GenerateJob Job(const std::string& session, const std::string& prompt, int64_t max_tokens) {
  GenerateJob j;
  j.session_id = session;
  j.prompt = prompt;
  j.max_tokens = max_tokens;
  return j;
}

Outcome Generate(Engine& e, const std::string& session, const std::string& prompt, int64_t max_tokens) {
  return SubmitAsync(e, Job(session, prompt, max_tokens)).get();
}

absl::StatusOr<SessionInfo> Create(Engine& e, const std::string& id) {
  return Call<absl::StatusOr<SessionInfo>>([&](auto done) { e.CreateSession(id, done); });
}
absl::StatusOr<SessionInfo> Get(Engine& e, const std::string& id) {
  return Call<absl::StatusOr<SessionInfo>>([&](auto done) { e.GetSession(id, done); });
}

std::shared_ptr<SessionStore> DirStore(const std::string& dir) {
  auto store = DirectoryStore::Open(dir);
  EXPECT_TRUE(store.ok()) << store.status();
  return *std::move(store);
}

std::shared_ptr<SessionStore> RedisStoreAt(const std::string& url, const std::string& key_prefix,
                                           const std::string& owner, int64_t lease_ms) {
  RedisStoreOptions r;
  r.url = url;
  r.key_prefix = key_prefix;
  r.owner = owner;
  r.lease_ms = lease_ms;
  auto store = RedisStore::Open(r);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

std::unique_ptr<Engine> StartEngine(const Model& m, EngineOptions o) {
  auto e = Engine::Start(m, TestTokenizer(), std::move(o));
  EXPECT_TRUE(e.ok()) << e.status();
  return *std::move(e);
}

EngineOptions Options(int max_batch, int64_t state_memory) {
  EngineOptions o;
  o.max_batch = max_batch;
  o.prefill_budget = 64;  // several prompts need more than one chunk
  o.state_memory_bytes = state_memory;
  return o;
}

std::vector<std::vector<int32_t>> Play(Engine& e, const std::string& session, const Turns& turns) {
  std::vector<std::vector<int32_t>> out;
  for (const auto& [prompt, n] : turns) {
    const Outcome o = Generate(e, session, prompt, n);
    EXPECT_TRUE(o.status.ok()) << o.status;
    out.push_back(o.ids);
  }
  return out;
}

}  // namespace steady::testing
