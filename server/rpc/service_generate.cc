// Generate: a server-streaming write reactor fed by the engine's callbacks.
#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <mutex>
#include <utility>

#include "server/rpc/service.h"

#include "base/status.h"

namespace steady {

namespace {

using Clock = std::chrono::steady_clock;

// One Generate call. Engine callbacks (engine thread) merge output into the last queued message of
// the same choice; gRPC reactions write the queue's front once the previous write is done, so at
// most one write is in flight and a slow reader gets fewer, larger messages (at most one per choice
// beyond the ones already ended) rather than an unbounded queue. The reactor finishes only after
// the engine's on_done, the last moment the engine touches it.
class GenerateReactor final : public grpc::ServerWriteReactor<v1::GenerateResponse> {
 public:
  GenerateReactor(Metrics& metrics, grpc::CallbackServerContext* context, std::function<void()> on_destroy)
      : metrics_(metrics), context_(context), on_destroy_(std::move(on_destroy)), start_(Clock::now()) {}

  // A quota refusal that knows when to retry: trailing metadata "retry-after" (seconds), which the
  // gateway turns into HTTP's Retry-After.
  void RejectRetryAfter(const absl::Status& status, int64_t seconds) {
    context_->AddTrailingMetadata("retry-after", std::to_string(seconds));
    Reject(status);
  }

  // A request refused before it reached the engine.
  void Reject(const absl::Status& status) {
    std::lock_guard lock(mu_);
    engine_done_ = true;
    final_status_ = status;
    AdvanceLocked();
  }

  // Wires the job's callbacks to this reactor.
  void Attach(GenerateJob& job) {
    cancelled_ = job.cancelled;
    choices_ = job.n;
    ToProto(job, &sampling_);
    job.on_output = [this](const std::string& text, const std::vector<int32_t>& ids,
                           const std::vector<TokenLogprobs>& logprobs) { OnOutput(0, text, ids, logprobs); };
    job.on_choice_output = [this](int index, const std::string& text, const std::vector<int32_t>& ids,
                                  const std::vector<TokenLogprobs>& logprobs) { OnOutput(index, text, ids, logprobs); };
    job.on_choice_done = [this](int index, const std::string& finish_reason) { OnChoiceDone(index, finish_reason); };
    job.on_start = [this](int64_t start_position) { OnStart(start_position); };
    job.on_done = [this](const absl::Status& status, const std::string& finish_reason, const Usage& usage) {
      OnEngineDone(status, finish_reason, usage);
    };
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard lock(mu_);
    write_in_flight_ = false;
    if (!ok) broken_ = true;  // the stream is gone (client cancel or deadline)
    AdvanceLocked();
  }

  void OnCancel() override {
    if (cancelled_) cancelled_->store(true);
  }

  void OnDone() override {
    if (on_destroy_) on_destroy_();
    delete this;
  }

 private:
  // The queued message output of choice `index` merges into: the last one, while it is that
  // choice's and not yet ended; else a new one.
  v1::GenerateResponse& Pending(int index) {
    if (queue_.empty() || queue_.back().index() != index || !queue_.back().finish_reason().empty() ||
        queue_.back().has_usage()) {
      queue_.emplace_back();
      queue_.back().set_index(index);
    }
    return queue_.back();
  }

  // A session turn taken up: its start position goes out at once as initial metadata, before the
  // prefill, so that a client (the gateway) whose stream is cut later can resend the turn with
  // expected_position even when it did not know the session's position (resume.go).
  void OnStart(int64_t start_position) {
    std::lock_guard lock(mu_);
    if (finished_ || sent_start_) return;
    sent_start_ = true;
    context_->AddInitialMetadata(std::string(kStartPositionHeader), std::to_string(start_position));
    StartSendInitialMetadata();
  }

  void OnChoiceDone(int index, const std::string& finish_reason) {
    std::lock_guard lock(mu_);
    if (!finish_reason.empty()) Pending(index).set_finish_reason(finish_reason);
    AdvanceLocked();
  }

  void OnOutput(int index, const std::string& text, const std::vector<int32_t>& ids,
                const std::vector<TokenLogprobs>& logprobs) {
    const Clock::time_point now = Clock::now();
    std::lock_guard lock(mu_);
    if (!ids.empty()) {
      if (!saw_token_) {
        metrics_.ObserveTimeToFirstToken(std::chrono::duration<double>(now - start_).count());
      } else {
        const double per_token = std::chrono::duration<double>(now - last_token_).count() / double(ids.size());
        for (size_t i = 0; i < ids.size(); ++i) metrics_.ObserveInterTokenLatency(per_token);
      }
      saw_token_ = true;
      last_token_ = now;
    }
    v1::GenerateResponse& next = Pending(index);
    next.mutable_text()->append(text);
    next.mutable_token_ids()->Add(ids.begin(), ids.end());
    for (const TokenLogprobs& l : logprobs) {
      v1::TokenLogprob* out = next.add_logprobs();
      SetChoice(l.chosen, out);
      for (const TokenChoice& t : l.top) SetChoice(t, out->add_top_logprobs());
    }
    AdvanceLocked();
  }

  static void SetChoice(const TokenChoice& c, v1::TokenLogprob* out) {
    out->set_token_id(c.token);
    out->set_token(c.text);
    out->set_logprob(c.logprob);
  }

  void OnEngineDone(const absl::Status& status, const std::string& finish_reason, const Usage& usage) {
    std::lock_guard lock(mu_);
    engine_done_ = true;
    final_status_ = status;
    if (status.ok()) {
      // One choice: its end and the usage in one last message. Several: each choice's end came
      // through OnChoiceDone; the usage closes the stream.
      v1::GenerateResponse* last = nullptr;
      if (choices_ == 1) {
        last = &Pending(0);
        last->set_finish_reason(finish_reason);
      } else {
        if (queue_.empty() || queue_.back().has_usage()) queue_.emplace_back();
        last = &queue_.back();
      }
      v1::Usage* u = last->mutable_usage();
      u->set_prompt_tokens(usage.prompt_tokens);
      u->set_completion_tokens(usage.completion_tokens);
      u->set_session_position(usage.session_position);
      u->set_cached_tokens(usage.cached_tokens);
      u->set_drafted_tokens(usage.drafted_tokens);
      u->set_accepted_tokens(usage.accepted_tokens);
      u->set_replayed(usage.replayed);
      *last->mutable_sampling() = sampling_;
    }
    AdvanceLocked();
  }

  // Starts the next write, or finishes once the engine is done and everything is written.
  void AdvanceLocked() {
    if (write_in_flight_ || finished_) return;
    if (!queue_.empty() && !broken_) {
      writing_ = std::move(queue_.front());
      queue_.pop_front();
      write_in_flight_ = true;
      StartWrite(&writing_);
      return;
    }
    if (!engine_done_) return;
    finished_ = true;
    absl::Status status = final_status_;
    if (status.ok() && broken_) status = absl::CancelledError("the client cancelled the call");
    // A session another replica is serving: when it may be free (the gateway's Retry-After).
    if (std::optional<int64_t> ms = RetryAfterMs(status); ms && status.code() == absl::StatusCode::kUnavailable) {
      context_->AddTrailingMetadata("retry-after", std::to_string(std::max<int64_t>(1, (*ms + 999) / 1000)));
    }
    metrics_.CountRequest("Generate", absl::StatusCodeToString(status.code()));
    Finish(ToGrpcStatus(status));
  }

  // Constant after construction.
  Metrics& metrics_;
  grpc::CallbackServerContext* const context_;
  const std::function<void()> on_destroy_;
  const Clock::time_point start_;
  std::shared_ptr<std::atomic<bool>> cancelled_;  // set before the job is submitted

  std::mutex mu_;
  v1::GenerateResponse writing_;  // guarded by mu_: the message in flight
  std::deque<v1::GenerateResponse> queue_;  // guarded by mu_: output not yet written
  int choices_ = 1;               // GenerateJob::n, set before the job is submitted
  v1::Sampling sampling_;         // the job's sampling values, set before it is submitted
  bool write_in_flight_ = false;  // guarded by mu_
  bool broken_ = false;           // guarded by mu_: a write failed; drop further output
  bool engine_done_ = false;      // guarded by mu_: on_done ran (or the request was refused)
  bool finished_ = false;         // guarded by mu_
  absl::Status final_status_;     // guarded by mu_
  bool sent_start_ = false;       // guarded by mu_: the initial metadata went out (OnStart)
  bool saw_token_ = false;        // guarded by mu_
  Clock::time_point last_token_;  // guarded by mu_
};

}  // namespace

grpc::ServerWriteReactor<v1::GenerateResponse>* InferenceService::Generate(grpc::CallbackServerContext* context,
                                                                           const v1::GenerateRequest* request) {
  absl::StatusOr<std::shared_ptr<const Tenant>> tenant = Authorize(context);
  absl::StatusOr<GenerateJob> job =
      tenant.ok() ? JobFromRequest(*request, engine_.options(), options_, *options_.chat,
                                   engine_.model().config().generation)
                  : absl::StatusOr<GenerateJob>(tenant.status());
  if (job.ok() && request->has_response_format()) {
    // Compiled here, on the RPC thread, so a bad schema is refused before the engine sees the call.
    absl::Status s = constraints_ ? SetConstraint(request->response_format(), *constraints_, &*job)
                                  : (request->response_format().type().empty() || request->response_format().type() == "text"
                                         ? absl::OkStatus()
                                         : constraints_error_);
    if (!s.ok()) job = s;
  }
  if (!job.ok()) {
    auto* reactor = new GenerateReactor(metrics_, context, nullptr);
    reactor->Reject(job.status());
    return reactor;
  }
  std::shared_ptr<const Tenant> t = *tenant;
  if (t) {
    int64_t retry_after = 0;
    if (absl::Status s = limits_.BeginGenerate(*t, &retry_after); !s.ok()) {
      auto* reactor = new GenerateReactor(metrics_, context, nullptr);
      s = Outward(t.get(), s);
      retry_after > 0 ? reactor->RejectRetryAfter(s, retry_after) : reactor->Reject(s);
      return reactor;
    }
    if (!job->session_id.empty()) job->session_id = Internal(t.get(), job->session_id);
    job->quota = QuotaOf(t.get());
  }
  std::shared_ptr<std::atomic<bool>> cancelled = job->cancelled;
  auto* reactor = new GenerateReactor(metrics_, context, [this, cancelled] { UntrackGenerate(cancelled); });
  reactor->Attach(*job);
  if (t) {
    // The tenant's usage ends with the engine's part: tokens charged, the call no longer counted.
    job->on_done = [this, t, done = std::move(job->on_done)](const absl::Status& status, const std::string& reason,
                                                             const Usage& usage) {
      limits_.EndGenerate(*t, usage.replayed ? 0 : usage.prompt_tokens + usage.completion_tokens);
      done(Outward(t.get(), status), reason, usage);
    };
  }
  // A call whose deadline has already passed, or that the client already cancelled, still goes
  // through the engine: OnCancel will set the flag and the engine ends the job at once.
  const bool queued = Enqueue([&] {
    TrackGenerate(cancelled);
    engine_.Submit(*std::move(job));
  });
  if (!queued) reactor->Reject(ShuttingDownError());
  return reactor;
}

}  // namespace steady
