#include "clients/loadtest/driver.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "clients/loadtest/resume.h"

namespace steady::loadtest {
namespace {

double SecondsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double UnixNow() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

void SetDeadline(grpc::ClientContext* context, double timeout_s) {
  if (timeout_s > 0) {
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::microseconds(int64_t(timeout_s * 1e6)));
  }
}

std::string CodeName(grpc::StatusCode code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

// A unary call about session `id`, resent like a cut stream (resume.h) up to w.resumes times;
// `done_before` is the code that, on a resent call, means the cut attempt was applied.
grpc::Status UnaryWithResumes(const Workload& w, const std::string& id,
                              const std::function<grpc::Status(grpc::ClientContext*)>& call,
                              grpc::StatusCode done_before = grpc::StatusCode::OK) {
  for (int attempt = 0;; ++attempt) {
    grpc::ClientContext context;
    SetDeadline(&context, w.timeout_s);
    context.AddMetadata("x-steady-session", id);
    if (attempt > 0) context.set_wait_for_ready(true);
    const grpc::Status status = call(&context);
    if (attempt > 0 && status.error_code() == done_before) return grpc::Status::OK;
    const bool refused = context.GetServerTrailingMetadata().count("retry-after") > 0;
    if (status.ok() || attempt >= w.resumes || !Resumable(status.error_code(), status.error_message(), refused)) {
      return status;
    }
  }
}

// Records collected from many threads, then ordered by index.
class RecordSink {
 public:
  void Add(RequestRecord r) {
    std::lock_guard<std::mutex> lock(mu_);
    records_.push_back(std::move(r));
  }
  std::vector<RequestRecord> Take() {
    std::lock_guard<std::mutex> lock(mu_);
    std::sort(records_.begin(), records_.end(),
              [](const RequestRecord& a, const RequestRecord& b) { return a.index < b.index; });
    return std::move(records_);
  }

 private:
  std::mutex mu_;
  std::vector<RequestRecord> records_;  // guarded by mu_
};

}  // namespace

RequestRecord TimedGenerate(const Target& target, const Workload& w, const RequestSpec& spec,
                            const std::string& session_id, Clock::time_point run_start,
                            std::optional<int64_t> expected_position) {
  v1::GenerateRequest request;
  request.set_session_id(session_id);
  if (expected_position) request.mutable_expected_position()->set_value(*expected_position);
  // A turn cut before its end (nginx died, and the replica saw the call cancelled) is rolled back
  // rather than kept in part, so the resend runs it whole: the client gets one call's text.
  request.set_all_or_nothing(w.resumes > 0 && !session_id.empty());
  request.set_prompt(spec.prompt);
  request.set_max_tokens(spec.output_tokens_target);
  request.set_temperature(float(w.sampling.temperature));
  request.set_top_k(int32_t(w.sampling.top_k));
  request.set_top_p(float(w.sampling.top_p));
  request.set_repetition_penalty(float(w.sampling.repetition_penalty));
  request.set_seed(w.seed + uint64_t(spec.index));
  if (!w.speculative.empty() || w.draft_tokens > 0) {
    request.mutable_speculation()->set_mode(w.speculative);
    request.mutable_speculation()->set_draft_tokens(w.draft_tokens);
  }
  // No stop strings: generation runs to max_tokens unless the model samples end-of-sequence.

  RequestRecord r;
  r.index = spec.index;
  r.prompt_tokens_target = spec.prompt_tokens_target;
  r.output_tokens_target = spec.output_tokens_target;
  r.prompt_words = spec.prompt_words;

  const Clock::time_point sent = Clock::now();
  r.start_s = SecondsBetween(run_start, sent);
  // Token ids received so far, over every attempt: a resumed attempt's first ones must repeat them
  // (the same state, request and seed give the same tokens) and are not passed on.
  std::vector<int32_t> received;
  Clock::time_point previous;
  for (int attempt = 0;; ++attempt) {
    grpc::ClientContext context;
    SetDeadline(&context, w.timeout_s);
    if (!session_id.empty()) context.AddMetadata("x-steady-session", session_id);
    // A resumed call waits for the channel (nginx restarting) instead of failing at once.
    if (attempt > 0) context.set_wait_for_ready(true);
    std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader = target.stub->Generate(&context, request);
    v1::GenerateResponse message;
    ResumedPrefix prefix(received);
    while (reader->Read(&message)) {
      const Clock::time_point now = Clock::now();
      const int k = prefix.Take(message.token_ids());
      for (int i = message.token_ids_size() - k; i < message.token_ids_size(); ++i) {
        // FNV-1a over the token ids: compares a turn's text across runs
        r.output_hash = (r.output_hash ^ uint64_t(uint32_t(message.token_ids(i)))) * 0x100000001b3ULL;
        received.push_back(message.token_ids(i));
      }
      if (k > 0) {
        if (r.output_tokens == 0) {
          r.ttft_s = SecondsBetween(sent, now);  // the message's other k - 1 tokens arrived with the first
        } else {
          // k tokens in one message: the gap since the previous message is split evenly among them
          // (after a resume: the gap since the last token before the cut).
          const double gap = SecondsBetween(previous, now) / double(k);
          r.itl_s.insert(r.itl_s.end(), size_t(k), gap);
        }
        previous = now;
        r.output_tokens += k;
      }
      if (!message.finish_reason().empty()) {
        r.finish_reason = message.finish_reason();
        r.prompt_tokens = message.usage().prompt_tokens();
        r.session_position = message.usage().session_position();
        r.drafted_tokens = message.usage().drafted_tokens();
        r.accepted_tokens = message.usage().accepted_tokens();
        r.replayed = message.usage().replayed();
      }
    }
    const grpc::Status status = reader->Finish();
    if (!prefix.status().ok()) {  // the server broke the determinism a resume relies on
      r.code = CodeName(grpc::StatusCode::DATA_LOSS);
      r.error = std::string(prefix.status().message());
      break;
    }
    if (status.ok()) {
      r.code = "OK";
      r.error.clear();
      break;
    }
    r.code = CodeName(status.error_code());
    r.error = status.error_message();
    if (attempt > 0 && status.error_code() == grpc::StatusCode::ABORTED && expected_position) {
      // The cut attempt had been committed, its last message lost, and the server did not replay it
      // (another call has moved the session since, or a server without replays): the turn is done,
      // once. Tokens it sent after the cut are not known to this client.
      r.applied_unacknowledged = true;
      break;
    }
    const bool refused = context.GetServerTrailingMetadata().count("retry-after") > 0;
    // A session's turn is resent only with expected_position, so it can never be applied twice; an
    // ephemeral call changes nothing durable.
    const bool safe = expected_position || session_id.empty();
    if (!safe || attempt >= w.resumes || !Resumable(status.error_code(), status.error_message(), refused)) break;
    ++r.resumes;
    r.cut_s.push_back(SecondsBetween(run_start, Clock::now()));
  }
  r.e2e_s = SecondsBetween(sent, Clock::now());
  return r;
}

RequestRecord GenerateWithRetries(const Target& target, const Workload& w, const RequestSpec& spec,
                                  const std::string& session_id, Clock::time_point run_start,
                                  std::optional<int64_t> expected_position) {
  // UNAVAILABLE, a call a stopping server cancelled (CANCELLED: this client cancels none; its own
  // deadline is DEADLINE_EXCEEDED), or a stream a balancer cut when its replica died (INTERNAL,
  // RST_STREAM).
  auto retryable = [](const RequestRecord& r) {
    return r.code == "UNAVAILABLE" || r.code == "CANCELLED" ||
           (r.code == "INTERNAL" && r.error.find("RST_STREAM") != std::string::npos);
  };
  RequestRecord r = TimedGenerate(target, w, spec, session_id, run_start, expected_position);
  for (int retry = 1; retry <= w.retries && retryable(r); ++retry) {
    std::this_thread::sleep_for(std::chrono::duration<double>(w.retry_backoff_s * retry));
    r = TimedGenerate(target, w, spec, session_id, run_start, expected_position);
    r.retries = retry;
    if (r.code == "ABORTED" && expected_position) {
      // An earlier attempt was applied, its last message lost: the turn is done, once.
      r.applied_unacknowledged = true;
      break;
    }
  }
  return r;
}

absl::StatusOr<double> CalibrateTokensPerWord(const Target& target, uint64_t seed, int64_t words) {
  std::mt19937_64 rng = RngFor(seed, /*stream=*/3, 0);
  v1::GenerateRequest request;
  request.set_prompt(MakePromptText(words, /*leading_space=*/false, rng));
  request.set_max_tokens(0);  // prefill only: the server tokenizes and reports the count
  grpc::ClientContext context;
  SetDeadline(&context, 60);
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader = target.stub->Generate(&context, request);
  v1::GenerateResponse message;
  int64_t tokens = 0;
  while (reader->Read(&message)) {
    if (message.has_usage()) tokens = message.usage().prompt_tokens();
  }
  const grpc::Status status = reader->Finish();
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        absl::StrCat("calibration request: ", status.error_message()));
  }
  if (tokens <= 0) return absl::InternalError("calibration request: the server reported no prompt tokens");
  return double(tokens) / double(words);
}

RunResult RunClosedLoop(const Target& target, const Workload& w, int concurrency, int64_t requests, double duration_s) {
  RecordSink sink;
  std::atomic<int64_t> next{0};
  const Clock::time_point start = Clock::now();
  const double start_unix_s = UnixNow();
  std::vector<std::thread> callers;
  for (int c = 0; c < concurrency; ++c) {
    callers.emplace_back([&] {
      while (true) {
        const int64_t i = next.fetch_add(1);
        if (requests > 0 && i >= requests) break;
        if (requests <= 0 && SecondsBetween(start, Clock::now()) >= duration_s) break;
        const RequestSpec spec = MakeRequestSpec(w.seed, i, w.prompt_tokens, w.output_tokens, w.tokens_per_word,
                                                 /*leading_space=*/false);
        sink.Add(GenerateWithRetries(target, w, spec, "", start));
      }
    });
  }
  for (std::thread& t : callers) t.join();
  RunResult result;
  result.duration_s = SecondsBetween(start, Clock::now());
  result.start_unix_s = start_unix_s;
  result.records = sink.Take();
  return result;
}

RunResult RunOpenLoop(const Target& target, const Workload& w, const std::vector<double>& arrivals) {
  RecordSink sink;
  // Calls run on detached threads (a long open-loop run would otherwise keep one finished thread per
  // request until the end); the run waits until the last one has counted itself out.
  std::mutex mu;
  std::condition_variable idle;
  int64_t in_flight = 0;  // guarded by mu
  const Clock::time_point start = Clock::now();
  const double start_unix_s = UnixNow();
  for (size_t i = 0; i < arrivals.size(); ++i) {
    // The prompt is built before the arrival time so that building it does not delay the send.
    RequestSpec spec = MakeRequestSpec(w.seed, int64_t(i), w.prompt_tokens, w.output_tokens, w.tokens_per_word,
                                       /*leading_space=*/false);
    std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double>(arrivals[i])));
    {
      std::lock_guard<std::mutex> lock(mu);
      ++in_flight;
    }
    std::thread([&, i, spec = std::move(spec)] {
      RequestRecord record = GenerateWithRetries(target, w, spec, "", start);
      record.scheduled_s = arrivals[i];
      sink.Add(std::move(record));
      std::lock_guard<std::mutex> lock(mu);
      if (--in_flight == 0) idle.notify_all();  // under the lock: the waiter cannot return before we unlock
    }).detach();
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    idle.wait(lock, [&] { return in_flight == 0; });
  }
  RunResult result;
  result.duration_s = SecondsBetween(start, Clock::now());
  result.start_unix_s = start_unix_s;
  result.records = sink.Take();
  return result;
}

RunResult RunMultiTurn(const Target& target, const Workload& w, int sessions, int turns, const std::string& prefix) {
  RecordSink sink;
  std::mutex errors_mu;
  std::map<std::string, int64_t> session_errors;  // guarded by errors_mu
  const auto session_error = [&](const char* rpc, const grpc::Status& s) {
    std::lock_guard<std::mutex> lock(errors_mu);
    ++session_errors[absl::StrCat(rpc, " ", CodeName(s.error_code()))];
  };
  std::atomic<int64_t> checked{0}, lost{0};
  const Clock::time_point start = Clock::now();
  const double start_unix_s = UnixNow();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(w.duration_s));
  std::vector<std::thread> clients;
  for (int s = 0; s < sessions; ++s) {
    clients.emplace_back([&, s] {
      const std::string id = absl::StrCat(prefix, "-", s);
      // The session's position, or an error (counted under `rpc`).
      auto get_position = [&](const char* rpc) -> std::optional<int64_t> {
        v1::GetSessionRequest get;
        get.set_session_id(id);
        v1::Session session;
        const grpc::Status status = UnaryWithResumes(w, id, [&](grpc::ClientContext* c) {
          return target.stub->GetSession(c, get, &session);
        });
        if (!status.ok()) {
          session_error(rpc, status);
          return std::nullopt;
        }
        return session.position();
      };
      {
        v1::CreateSessionRequest request;
        request.set_session_id(id);
        v1::Session session;
        // ALREADY_EXISTS after a resume: the cut attempt created it.
        const grpc::Status status = UnaryWithResumes(w, id, [&](grpc::ClientContext* c) {
          return target.stub->CreateSession(c, request, &session);
        }, grpc::StatusCode::ALREADY_EXISTS);
        if (!status.ok()) {
          session_error("CreateSession", status);
          return;
        }
      }
      std::mt19937_64 think_rng = RngFor(w.seed, /*stream=*/4, uint64_t(s));
      std::exponential_distribution<double> think(w.think_time_s > 0 ? 1.0 / w.think_time_s : 1.0);
      int64_t position = 0;  // the session's, after its last acknowledged turn
      bool lost_turns = false;
      for (int t = 1; t <= turns; ++t) {
        if (w.think_time_s > 0) {
          auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(think(think_rng)));
          if (w.duration_s > 0) until = std::min(until, deadline);
          std::this_thread::sleep_until(until);
        }
        if (w.duration_s > 0 && Clock::now() >= deadline) break;
        const int64_t index = int64_t(s) * turns + (t - 1);
        const RequestSpec spec = MakeRequestSpec(w.seed, index, w.prompt_tokens, w.output_tokens, w.tokens_per_word,
                                                 /*leading_space=*/t > 1);
        RequestRecord r = GenerateWithRetries(target, w, spec, id, start, position);
        r.session = s;
        r.turn = t;
        if (r.ok()) position = r.session_position;
        if (r.applied_unacknowledged || !r.ok()) {
          // The session may not be where this client left it: a turn was applied without its last
          // message (ahead: a stream cut after its commit, as when its replica dies), or the server
          // lost acknowledged turns (behind). The next turn's expected_position must be the
          // session's, or it is refused with ABORTED although nothing went wrong.
          if (std::optional<int64_t> now = get_position("GetSession")) {
            lost_turns = lost_turns || *now < position;
            position = *now;
          }
        }
        sink.Add(std::move(r));
      }
      if (std::optional<int64_t> now = get_position("GetSession")) {
        ++checked;
        lost_turns = lost_turns || *now < position;
      }
      if (lost_turns) ++lost;
      if (w.keep_sessions) return;
      v1::DeleteSessionRequest request;
      request.set_session_id(id);
      v1::DeleteSessionResponse response;
      // NOT_FOUND after a resume: the cut attempt deleted it.
      const grpc::Status status = UnaryWithResumes(w, id, [&](grpc::ClientContext* c) {
        return target.stub->DeleteSession(c, request, &response);
      }, grpc::StatusCode::NOT_FOUND);
      if (!status.ok()) session_error("DeleteSession", status);
    });
  }
  for (std::thread& t : clients) t.join();
  RunResult result;
  result.duration_s = SecondsBetween(start, Clock::now());
  result.start_unix_s = start_unix_s;
  result.records = sink.Take();
  result.session_errors = std::move(session_errors);
  result.sessions_checked = checked.load();
  result.sessions_lost_turns = lost.load();
  return result;
}

}  // namespace steady::loadtest
