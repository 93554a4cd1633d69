// How steady-loadtest drives the server: one timed Generate call, and the three load shapes
// (closed loop, open loop, multi-turn sessions). Each call runs on its own thread with gRPC's
// synchronous streaming API, so a slow stream never delays another call's timestamps.
#ifndef STEADY_CLIENTS_LOADTEST_DRIVER_H_
#define STEADY_CLIENTS_LOADTEST_DRIVER_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "clients/loadtest/stats.h"
#include "clients/loadtest/workload.h"
#include "steady/v1/inference.grpc.pb.h"

namespace steady::loadtest {

using Clock = std::chrono::steady_clock;

// Sampling fields copied into every GenerateRequest, unchecked: the server validates them, and a
// refused value shows up as INVALID_ARGUMENT in the report.
struct Sampling {
  double temperature = 0, top_p = 0, repetition_penalty = 0;
  int64_t top_k = 0;
};

struct Workload {
  uint64_t seed = 0;
  LengthDistribution prompt_tokens, output_tokens;
  double tokens_per_word = 1;
  Sampling sampling;
  double timeout_s = 0;  // deadline of each call; 0: none
  // A stream cut by a replica's or the balancer's death (clients/loadtest/resume.h) is resumed at
  // most this many times: resent and continued past the tokens received, within the same record.
  int resumes = 3;
  int retries = 0;               // a call that fails with UNAVAILABLE is sent again this many times
  double retry_backoff_s = 1.0;  // before retry k: k times this
  // Multi-turn: a user's pause before each turn, drawn from an exponential distribution with this
  // mean (0: none); the first turn waits as long, so the sessions' turns spread out at once.
  double think_time_s = 0;
  double duration_s = 0;       // multi-turn: take turns until then (each session at most `turns`); 0: `turns`
  bool keep_sessions = false;  // multi-turn: no DeleteSession at the end
  // Speculative decoding per call (GenerateRequest.speculation): "" sends none (the server's
  // default), else "off", "ngram" or "draft"; draft_tokens 0: the server's.
  std::string speculative;
  int draft_tokens = 0;
};

struct Target {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Inference::Stub> stub;
};

// Sends `spec` on `session_id` (empty: ephemeral; also sent as metadata x-steady-session, which a
// balancer routes on) and times the stream. `expected_position`: see GenerateRequest. A stream that
// is cut is resumed (w.resumes; resume.h) when it is safe: ephemeral, or with expected_position.
RequestRecord TimedGenerate(const Target& target, const Workload& w, const RequestSpec& spec,
                            const std::string& session_id, Clock::time_point run_start,
                            std::optional<int64_t> expected_position = std::nullopt);
// TimedGenerate, sent again after UNAVAILABLE, CANCELLED (by a stopping server) or a stream cut by
// a balancer (INTERNAL, RST_STREAM), up to w.retries times (the record counts them). With
// `expected_position` a retry cannot apply a turn twice: when the server answers ABORTED because an
// earlier attempt was applied, the record says so (applied_unacknowledged).
RequestRecord GenerateWithRetries(const Target& target, const Workload& w, const RequestSpec& spec,
                                  const std::string& session_id, Clock::time_point run_start,
                                  std::optional<int64_t> expected_position = std::nullopt);

// One ephemeral prefill-only call with `words` words; returns usage.prompt_tokens / words.
absl::StatusOr<double> CalibrateTokensPerWord(const Target& target, uint64_t seed, int64_t words);

struct RunResult {
  std::vector<RequestRecord> records;  // ordered by index
  double duration_s = 0;               // run start -> last call finished
  double start_unix_s = 0;             // when the run began (records' start_s count from it)
  std::map<std::string, int64_t> session_errors;  // "CreateSession NOT_FOUND" -> count (multi-turn)
  // Multi-turn: sessions checked at the end (GetSession), and those found behind their last
  // acknowledged position: acknowledged turns lost (the goal is none).
  int64_t sessions_checked = 0, sessions_lost_turns = 0;
};

// `concurrency` callers, each sending its next request as soon as the previous one ends, until
// `requests` were sent (if > 0) or `duration_s` passed.
RunResult RunClosedLoop(const Target& target, const Workload& w, int concurrency, int64_t requests, double duration_s);

// Requests sent at `arrivals` offsets whatever the server's state.
RunResult RunOpenLoop(const Target& target, const Workload& w, const std::vector<double>& arrivals);

// `sessions` sessions at once; each CreateSession, then `turns` Generate calls with new text each
// turn (or as many as w.duration_s allows), then GetSession (is every acknowledged turn there?) and
// DeleteSession (unless w.keep_sessions). Session ids are `prefix` + "-" + number. Every turn carries
// expected_position, the position after the session's last acknowledged turn, so no turn is applied
// twice; a turn refused with ABORTED resynchronizes the position from GetSession (an earlier turn
// was applied without its last message, or the server lost acknowledged turns: counted).
RunResult RunMultiTurn(const Target& target, const Workload& w, int sessions, int turns, const std::string& prefix);

}  // namespace steady::loadtest

#endif  // STEADY_CLIENTS_LOADTEST_DRIVER_H_
