// What steady-loadtest measured: one record per Generate call, and the aggregates of docs/loadtest.md
// (TTFT, inter-token latency, TPOT, end-to-end latency at mean/p50/p90/p99, throughput, goodput,
// errors by gRPC status code, per-turn latency in multi-turn mode).
#ifndef STEADY_CLIENTS_LOADTEST_STATS_H_
#define STEADY_CLIENTS_LOADTEST_STATS_H_

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace steady::loadtest {

constexpr double kNoValue = std::numeric_limits<double>::quiet_NaN();  // written as JSON null

struct RequestRecord {
  int64_t index = 0;
  int session = -1;  // multi-turn: the session's number (0-based); -1 otherwise
  int turn = 0;      // multi-turn: 1-based turn within the session; 0 otherwise
  double start_s = 0;  // when the call was sent, seconds since the run began
  double scheduled_s = kNoValue;  // open loop: its arrival time in the schedule (send lag = start_s - this)
  int64_t prompt_tokens_target = 0;
  int64_t output_tokens_target = 0;
  int64_t prompt_words = 0;
  int64_t prompt_tokens = 0;     // usage.prompt_tokens as the server counted them
  int64_t output_tokens = 0;     // token ids received (before the error, for a failed call)
  uint64_t output_hash = 0xcbf29ce484222325ULL;  // FNV-1a of those token ids
  int64_t session_position = 0;  // usage.session_position after the call
  int64_t drafted_tokens = 0, accepted_tokens = 0;  // usage: speculative decoding's drafts
  double ttft_s = kNoValue;      // sent -> first message carrying a token
  double e2e_s = kNoValue;       // sent -> the stream's status received
  std::vector<double> itl_s;     // one gap per token after the first message's tokens
  std::string code = "OK";       // gRPC status code name
  std::string error;             // the status message, if not OK
  std::string finish_reason;
  int retries = 0;  // attempts after the first (--retries: UNAVAILABLE is retried)
  int resumes = 0;  // cut streams resumed within this attempt (--resume; resume.h)
  std::vector<double> cut_s;  // when each cut was seen, seconds since the run began
  // Multi-turn: a retry found the session past the turn: an attempt whose last message never
  // arrived was applied. Counted as completed; its text and timings are unknown.
  bool applied_unacknowledged = false;
  // A resumed or retried attempt was answered with the turn's stored outcome (Usage.replayed): an
  // earlier attempt had committed the turn; the tokens it had not delivered came from the replay.
  bool replayed = false;

  bool ok() const { return code == "OK"; }
  // (e2e - TTFT) / (output tokens - 1); no value below two tokens.
  double tpot_s() const { return output_tokens >= 2 ? (e2e_s - ttft_s) / double(output_tokens - 1) : kNoValue; }
};

// Linear interpolation between closest ranks (numpy.percentile's default, as vLLM uses). NaN if empty.
double Percentile(std::vector<double> values, double p);

struct Distribution {
  size_t count = 0;
  double mean = kNoValue, p50 = kNoValue, p90 = kNoValue, p99 = kNoValue;
  static Distribution Of(const std::vector<double>& values);
};

struct Slo {
  double ttft_ms = 0;  // 0: not set
  double tpot_ms = 0;
  bool any() const { return ttft_ms > 0 || tpot_ms > 0; }
  bool Met(const RequestRecord& r) const;
};

struct Summary {
  int64_t requests = 0, completed = 0, failed = 0;
  double duration_s = 0;
  int64_t prompt_tokens = 0, output_tokens = 0;  // over completed requests
  // Speculative decoding, over completed requests: drafts verified and accepted; their ratio (NaN
  // when nothing was drafted).
  int64_t drafted_tokens = 0, accepted_tokens = 0;
  double acceptance_rate = kNoValue;
  double requests_per_s = 0, output_tokens_per_s = 0, prompt_tokens_per_s = 0;
  double goodput_requests_per_s = kNoValue;  // only with an SLO
  int64_t good_requests = 0;
  Distribution ttft_ms, itl_ms, tpot_ms, e2e_ms;
  std::map<std::string, int64_t> errors;  // gRPC code name -> Generate calls that ended with it
  int64_t retried = 0;                    // calls that needed at least one retry
  int64_t retries = 0;                    // retries in all
  int64_t applied_unacknowledged = 0;     // see RequestRecord
  int64_t resumed = 0;                    // calls whose stream was cut and resumed at least once
  int64_t resumes = 0;                    // resumes in all
  int64_t replayed = 0;                   // calls a replay completed (see RequestRecord)
  // Failed calls that had received tokens: streams cut mid-way (by a server's death, say).
  int64_t failed_mid_stream = 0;
};

Summary Summarize(const std::vector<RequestRecord>& records, double duration_s, const Slo& slo);

struct TurnStats {
  int turn = 0;
  Distribution ttft_ms, e2e_ms;
};
// Per turn index over every session (completed calls only), in turn order.
std::vector<TurnStats> PerTurn(const std::vector<RequestRecord>& records);

nlohmann::ordered_json ToJson(const Summary& s);
nlohmann::ordered_json ToJson(const RequestRecord& r);
nlohmann::ordered_json ToJson(const std::vector<TurnStats>& turns);

// The human-readable table on stdout.
std::string FormatSummary(const Summary& s, const Slo& slo);
std::string FormatTurns(const std::vector<TurnStats>& turns);

}  // namespace steady::loadtest

#endif  // STEADY_CLIENTS_LOADTEST_STATS_H_
