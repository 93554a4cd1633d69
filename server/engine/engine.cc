// The engine's lifecycle and its public, thread-safe methods: each posts work to the engine thread
// (engine_loop.cc) or answers from thread-safe state.
#include "server/engine/engine.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "server/engine/engine_impl.h"
#include "server/engine/request_checks.h"

namespace steady {

absl::StatusOr<std::unique_ptr<Engine>> Engine::Start(const Model& model, const Tokenizer& tokenizer,
                                                      EngineOptions options) {
  if (absl::Status st = CheckEngineOptions(options); !st.ok()) return st;
  if (tokenizer.vocab_size() > model.vocab_size()) {
    return absl::FailedPreconditionError(absl::StrCat("tokenizer has ", tokenizer.vocab_size(),
                                                      " pieces but the model only ", model.vocab_size()));
  }
  auto backend = MakeEngineBackend(model, options);
  if (!backend.ok()) return backend.status();
  auto impl = std::make_unique<Impl>(model, tokenizer, std::move(options), *std::move(backend));
  impl->pool->ReleaseCopiedPages();  // Impl's fingerprint and shape measurement read the mapping again
  if (impl->options.draft_model != nullptr && impl->pool->Verifies()) {
    BackendOptions b;
    b.cpu_threads = impl->options.cpu_threads;
    b.cpu_weights = impl->options.cpu_weights;
    b.cpu_gemm = impl->options.cpu_gemm;
    impl->draft = std::make_unique<DraftModel>(*impl->options.draft_model, impl->options.max_batch, model.vocab_size(), b);
    impl->draft_lanes.resize(size_t(impl->options.max_batch));
  }
  if (impl->options.prefix_cache_bytes > 0) impl->prefix_cache = std::make_unique<PrefixCache>(impl->options.prefix_cache_bytes);
  if (impl->store() && !impl->Shared()) {  // a shared store's sessions are read as they are used
    const auto start = std::chrono::steady_clock::now();
    if (absl::Status st = impl->Recover(); !st.ok()) return st;
    impl->stats.recovery_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    impl->stats.sessions_recovered = impl->sessions.named_sessions();
    impl->stats.sessions_unreadable = int64_t(impl->unreadable.size());
  }
  Impl* raw = impl.get();
  raw->UpdateStats(0, 0, 0);
  raw->thread = std::thread([raw] { raw->Run(); });
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop_requested = true;
  }
  impl_->cv.notify_one();
  impl_->thread.join();
}

const Model& Engine::model() const { return impl_->model; }
const Tokenizer& Engine::tokenizer() const { return impl_->tokenizer; }
const EngineOptions& Engine::options() const { return impl_->options; }
const std::string& Engine::device() const { return impl_->device; }

Engine::Stats Engine::stats() const {
  std::lock_guard<std::mutex> lock(impl_->stats_mu);
  Stats s = impl_->stats;
  s.queue_depth = impl_->unfinished_jobs.load();
  return s;
}

namespace {
absl::Status Unavailable() { return absl::UnavailableError("the engine is shutting down"); }
}  // namespace

// Session operations run through RunOrWait: with a shared store, one the store answers UNAVAILABLE
// (another server holds the session, or the store is away) waits, parked, and runs again.
void Engine::CreateSession(std::string id, std::function<void(absl::StatusOr<SessionInfo>)> done, SessionQuota quota) {
  if (!impl_->Post([this, id = std::move(id), done, quota] {
        impl_->RunOrWait<SessionInfo>([this, id, quota] { return impl_->Create(id, quota); }, done);
      })) {
    done(Unavailable());
  }
}

void Engine::GetSession(std::string id, std::function<void(absl::StatusOr<SessionInfo>)> done) {
  if (!impl_->Post([this, id = std::move(id), done]() {
        impl_->RunOrWait<SessionInfo>(
            [this, id]() -> absl::StatusOr<SessionInfo> {
              if (absl::Status st = CheckSessionId(id, "session_id"); !st.ok()) return st;
              auto s = impl_->Lookup(id, "session_id");
              if (!s.ok()) return s.status();
              return impl_->Info(**s);
            },
            done);
      })) {
    done(Unavailable());
  }
}

void Engine::ListSessions(std::function<void(std::vector<SessionInfo>)> done) {
  if (!impl_->Post([this, done] { done(impl_->ListAll()); })) {
    done({});
  }
}

void Engine::DeleteSession(std::string id, std::function<void(absl::Status)> done) {
  if (!impl_->Post([this, id = std::move(id), done] {
        Impl::WaitingCall call;
        call.attempt = [this, id] { return impl_->Delete(id); };
        call.done = done;
        impl_->TryOrWait(std::move(call));
      })) {
    done(Unavailable());
  }
}

void Engine::Drain() {
  impl_->Post([this] { impl_->draining = true; });
}

void Engine::ForkSession(std::string source_id, std::string new_id,
                         std::function<void(absl::StatusOr<SessionInfo>)> done, SessionQuota quota) {
  if (!impl_->Post([this, source_id = std::move(source_id), new_id = std::move(new_id), done, quota] {
        impl_->RunOrWait<SessionInfo>([this, source_id, new_id, quota] { return impl_->Fork(source_id, new_id, quota); },
                                      done);
      })) {
    done(Unavailable());
  }
}

void Engine::ExportSession(std::string id, std::function<void(absl::StatusOr<std::string>)> done) {
  if (!impl_->Post([this, id = std::move(id), done] {
        impl_->RunOrWait<std::string>([this, id] { return impl_->Export(id); }, done);
      })) {
    done(Unavailable());
  }
}

void Engine::ImportSession(std::string blob, std::string id, std::function<void(absl::StatusOr<SessionInfo>)> done,
                           SessionQuota quota) {
  auto shared_blob = std::make_shared<std::string>(std::move(blob));  // not copied with the closure
  if (!impl_->Post([this, shared_blob, id = std::move(id), done, quota] {
        impl_->RunOrWait<SessionInfo>([this, shared_blob, id, quota] { return impl_->Import(*shared_blob, id, quota); },
                                      done);
      })) {
    done(Unavailable());
  }
}

void Engine::Submit(GenerateJob job) {
  if (!job.on_output) job.on_output = [](const std::string&, const std::vector<int32_t>&, const std::vector<TokenLogprobs>&) {};
  if (!job.on_done) job.on_done = [](const absl::Status&, const std::string&, const Usage&) {};
  if (!job.on_choice_output) {
    job.on_choice_output = [](int, const std::string&, const std::vector<int32_t>&, const std::vector<TokenLogprobs>&) {};
  }
  if (!job.on_choice_done) job.on_choice_done = [](int, const std::string&) {};
  if (!job.cancelled) job.cancelled = std::make_shared<std::atomic<bool>>(false);
  Impl& impl = *impl_;
  auto reject = [&impl](GenerateJob job, absl::Status st) {
    if (!impl.Post([job, st] { job.on_done(st, "", Usage{}); })) job.on_done(Unavailable(), "", Usage{});
  };
  // Field checks here, on the caller's thread, so the engine thread only sees well-formed jobs.
  if (absl::Status st = CheckGenerateJob(job, impl.options); !st.ok()) return reject(std::move(job), st);
  if (impl.unfinished_jobs.fetch_add(1) >= impl.options.max_queue) {
    impl.unfinished_jobs.fetch_sub(1);
    return reject(std::move(job), absl::ResourceExhaustedError(absl::StrCat(
                                      "the queue is full (", impl.options.max_queue, " Generate jobs); retry later")));
  }
  const bool by_ids = !job.prompt_token_ids.empty();
  absl::StatusOr<std::vector<int32_t>> tokens =
      by_ids ? absl::StatusOr<std::vector<int32_t>>(job.prompt_token_ids) : impl.tokenizer.Encode(job.prompt);
  const char* field = by_ids ? "prompt_token_ids" : "prompt";
  absl::Status st = tokens.status();
  if (st.ok() && int64_t(tokens->size()) > impl.options.max_prompt_tokens) {
    st = absl::InvalidArgumentError(absl::StrCat(tokens->size(), " tokens, more than max_prompt_tokens (",
                                                 impl.options.max_prompt_tokens, ")"));
  }
  for (size_t i = 0; st.ok() && by_ids && i < tokens->size(); ++i) {
    const int32_t id = (*tokens)[i];
    if (id < 0 || id >= impl.model.vocab_size()) {
      st = absl::InvalidArgumentError(absl::StrCat("[", i, "] = ", id, " is not in [0, ", impl.model.vocab_size(), ")"));
    }
  }
  if (!st.ok()) {
    impl.unfinished_jobs.fetch_sub(1);
    return reject(std::move(job), absl::InvalidArgumentError(absl::StrCat(field, ": ", st.message())));
  }
  // A cache point in tokens: where the encodings of the prompt and of its first `bytes` agree up to
  // (the tokenizer may merge across the byte boundary, so the common token prefix, not its length).
  std::vector<int64_t> cache_points;
  for (size_t bytes : job.cache_at_bytes) {
    if (by_ids || bytes == 0 || bytes >= job.prompt.size()) continue;
    auto head = impl.tokenizer.Encode(job.prompt.substr(0, bytes));
    if (!head.ok()) continue;
    auto mismatch = std::mismatch(head->begin(), head->end(), tokens->begin(), tokens->end());
    if (const int64_t common = mismatch.first - head->begin(); common > 0) cache_points.push_back(common);
  }
  auto shared_tokens = std::make_shared<std::vector<int32_t>>(*std::move(tokens));
  if (!impl.Post([&impl, job, shared_tokens, cache_points] { impl.Accept(job, std::move(*shared_tokens), cache_points); })) {
    impl.unfinished_jobs.fetch_sub(1);
    job.on_done(Unavailable(), "", Usage{});
  }
}

}  // namespace steady
