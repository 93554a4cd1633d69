#include "clients/loadtest/stats.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace steady::loadtest {
namespace {

std::vector<double> Millis(const std::vector<double>& seconds) {
  std::vector<double> ms;
  ms.reserve(seconds.size());
  for (double s : seconds) {
    if (!std::isnan(s)) ms.push_back(s * 1e3);
  }
  return ms;
}

nlohmann::ordered_json ToJson(const Distribution& d, bool with_p99 = true) {
  nlohmann::ordered_json j;
  j["count"] = d.count;
  j["mean"] = d.mean;
  j["p50"] = d.p50;
  j["p90"] = d.p90;
  if (with_p99) j["p99"] = d.p99;
  return j;
}

std::string Cell(double v) { return std::isnan(v) ? "-" : absl::StrFormat("%.2f", v); }

}  // namespace

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return kNoValue;
  std::sort(values.begin(), values.end());
  const double rank = p / 100.0 * double(values.size() - 1);
  const size_t lo = size_t(std::floor(rank)), hi = size_t(std::ceil(rank));
  return values[lo] + (values[hi] - values[lo]) * (rank - double(lo));
}

Distribution Distribution::Of(const std::vector<double>& values) {
  Distribution d;
  d.count = values.size();
  if (values.empty()) return d;
  double sum = 0;
  for (double v : values) sum += v;
  d.mean = sum / double(values.size());
  d.p50 = Percentile(values, 50);
  d.p90 = Percentile(values, 90);
  d.p99 = Percentile(values, 99);
  return d;
}

bool Slo::Met(const RequestRecord& r) const {
  if (!r.ok()) return false;
  if (ttft_ms > 0 && !(r.ttft_s * 1e3 <= ttft_ms)) return false;
  // A request with fewer than two tokens has no TPOT and meets any TPOT objective.
  const double tpot = r.tpot_s();
  if (tpot_ms > 0 && !std::isnan(tpot) && tpot * 1e3 > tpot_ms) return false;
  return true;
}

Summary Summarize(const std::vector<RequestRecord>& records, double duration_s, const Slo& slo) {
  Summary s;
  s.duration_s = duration_s;
  std::vector<double> ttft, itl, tpot, e2e;
  for (const RequestRecord& r : records) {
    ++s.requests;
    s.retried += r.retries > 0;
    s.retries += r.retries;
    s.resumed += r.resumes > 0;
    s.resumes += r.resumes;
    s.replayed += r.replayed;
    if (r.applied_unacknowledged) {
      ++s.completed;
      ++s.applied_unacknowledged;
      continue;
    }
    if (!r.ok()) {
      ++s.failed;
      ++s.errors[r.code];
      s.failed_mid_stream += r.output_tokens > 0;
      continue;
    }
    ++s.completed;
    s.prompt_tokens += r.prompt_tokens;
    s.output_tokens += r.output_tokens;
    s.drafted_tokens += r.drafted_tokens;
    s.accepted_tokens += r.accepted_tokens;
    ttft.push_back(r.ttft_s);
    itl.insert(itl.end(), r.itl_s.begin(), r.itl_s.end());
    tpot.push_back(r.tpot_s());
    e2e.push_back(r.e2e_s);
    if (slo.any() && slo.Met(r)) ++s.good_requests;
  }
  if (duration_s > 0) {
    s.requests_per_s = double(s.completed) / duration_s;
    s.output_tokens_per_s = double(s.output_tokens) / duration_s;
    s.prompt_tokens_per_s = double(s.prompt_tokens) / duration_s;
    if (slo.any()) s.goodput_requests_per_s = double(s.good_requests) / duration_s;
  }
  if (s.drafted_tokens > 0) s.acceptance_rate = double(s.accepted_tokens) / double(s.drafted_tokens);
  s.ttft_ms = Distribution::Of(Millis(ttft));
  s.itl_ms = Distribution::Of(Millis(itl));
  s.tpot_ms = Distribution::Of(Millis(tpot));
  s.e2e_ms = Distribution::Of(Millis(e2e));
  return s;
}

std::vector<TurnStats> PerTurn(const std::vector<RequestRecord>& records) {
  std::map<int, std::pair<std::vector<double>, std::vector<double>>> by_turn;  // turn -> (ttft, e2e) seconds
  for (const RequestRecord& r : records) {
    if (r.turn <= 0 || !r.ok()) continue;
    by_turn[r.turn].first.push_back(r.ttft_s);
    by_turn[r.turn].second.push_back(r.e2e_s);
  }
  std::vector<TurnStats> turns;
  for (const auto& [turn, values] : by_turn) {
    turns.push_back({turn, Distribution::Of(Millis(values.first)), Distribution::Of(Millis(values.second))});
  }
  return turns;
}

nlohmann::ordered_json ToJson(const Summary& s) {
  nlohmann::ordered_json j;
  j["requests"] = s.requests;
  j["completed"] = s.completed;
  j["failed"] = s.failed;
  j["duration_s"] = s.duration_s;
  j["prompt_tokens"] = s.prompt_tokens;
  j["output_tokens"] = s.output_tokens;
  j["requests_per_s"] = s.requests_per_s;
  j["output_tokens_per_s"] = s.output_tokens_per_s;
  j["prompt_tokens_per_s"] = s.prompt_tokens_per_s;
  j["drafted_tokens"] = s.drafted_tokens;
  j["accepted_tokens"] = s.accepted_tokens;
  j["acceptance_rate"] = s.acceptance_rate;
  j["good_requests"] = s.good_requests;
  j["goodput_requests_per_s"] = s.goodput_requests_per_s;
  j["ttft_ms"] = ToJson(s.ttft_ms);
  j["itl_ms"] = ToJson(s.itl_ms);
  j["tpot_ms"] = ToJson(s.tpot_ms);
  j["e2e_ms"] = ToJson(s.e2e_ms);
  j["errors"] = nlohmann::ordered_json::object();
  for (const auto& [code, n] : s.errors) j["errors"][code] = n;
  j["retried"] = s.retried;
  j["retries"] = s.retries;
  j["resumed"] = s.resumed;
  j["resumes"] = s.resumes;
  j["applied_unacknowledged"] = s.applied_unacknowledged;
  j["replayed"] = s.replayed;
  j["failed_mid_stream"] = s.failed_mid_stream;
  return j;
}

nlohmann::ordered_json ToJson(const RequestRecord& r) {
  nlohmann::ordered_json j;
  j["index"] = r.index;
  if (r.turn > 0) {
    j["session"] = r.session;
    j["turn"] = r.turn;
  }
  j["start_s"] = r.start_s;
  if (!std::isnan(r.scheduled_s)) j["scheduled_s"] = r.scheduled_s;
  j["prompt_tokens_target"] = r.prompt_tokens_target;
  j["prompt_words"] = r.prompt_words;
  j["prompt_tokens"] = r.prompt_tokens;
  j["output_tokens_target"] = r.output_tokens_target;
  j["output_tokens"] = r.output_tokens;
  j["output_hash"] = absl::StrFormat("%016x", r.output_hash);
  j["session_position"] = r.session_position;
  if (r.drafted_tokens > 0) {
    j["drafted_tokens"] = r.drafted_tokens;
    j["accepted_tokens"] = r.accepted_tokens;
  }
  j["ttft_ms"] = r.ttft_s * 1e3;
  j["tpot_ms"] = r.tpot_s() * 1e3;
  j["e2e_ms"] = r.e2e_s * 1e3;
  double itl_sum = 0;
  for (double g : r.itl_s) itl_sum += g;
  j["itl_ms_mean"] = r.itl_s.empty() ? kNoValue : itl_sum / double(r.itl_s.size()) * 1e3;
  // Every gap, to 0.01 ms: percentiles over any slice of a run (tools/bench/faults_bench.py's chart).
  j["itl_ms"] = nlohmann::ordered_json::array();
  for (double g : r.itl_s) j["itl_ms"].push_back(std::round(g * 1e5) / 100);
  j["finish_reason"] = r.finish_reason;
  j["code"] = r.code;
  j["retries"] = r.retries;
  if (r.resumes > 0) {
    j["resumes"] = r.resumes;
    j["cut_s"] = r.cut_s;
  }
  if (r.applied_unacknowledged) j["applied_unacknowledged"] = true;
  if (r.replayed) j["replayed"] = true;
  if (!r.error.empty()) j["error"] = r.error;
  return j;
}

nlohmann::ordered_json ToJson(const std::vector<TurnStats>& turns) {
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  for (const TurnStats& t : turns) {
    nlohmann::ordered_json row;
    row["turn"] = t.turn;
    row["ttft_ms"] = ToJson(t.ttft_ms, /*with_p99=*/false);
    row["e2e_ms"] = ToJson(t.e2e_ms, /*with_p99=*/false);
    j.push_back(row);
  }
  return j;
}

std::string FormatSummary(const Summary& s, const Slo& slo) {
  std::string out = absl::StrFormat("requests   %d completed, %d failed, in %.2f s\n", s.completed, s.failed,
                                    s.duration_s);
  absl::StrAppendFormat(&out, "throughput %.2f requests/s, %.1f output tokens/s, %.1f prompt tokens/s\n",
                        s.requests_per_s, s.output_tokens_per_s, s.prompt_tokens_per_s);
  if (s.drafted_tokens > 0) {
    absl::StrAppendFormat(&out, "speculative %d drafted, %d accepted (acceptance rate %.1f%%)\n", s.drafted_tokens,
                          s.accepted_tokens, 100 * s.acceptance_rate);
  }
  if (slo.any()) {
    absl::StrAppendFormat(&out, "goodput    %.2f requests/s (%d requests with TTFT <= %s ms, TPOT <= %s ms)\n",
                          s.goodput_requests_per_s, s.good_requests, slo.ttft_ms > 0 ? Cell(slo.ttft_ms) : "any",
                          slo.tpot_ms > 0 ? Cell(slo.tpot_ms) : "any");
  }
  absl::StrAppendFormat(&out, "%-10s %10s %10s %10s %10s %8s\n", "ms", "mean", "p50", "p90", "p99", "count");
  const std::pair<const char*, const Distribution*> rows[] = {
      {"TTFT", &s.ttft_ms}, {"ITL", &s.itl_ms}, {"TPOT", &s.tpot_ms}, {"E2E", &s.e2e_ms}};
  for (const auto& [name, d] : rows) {
    absl::StrAppendFormat(&out, "%-10s %10s %10s %10s %10s %8d\n", name, Cell(d->mean), Cell(d->p50), Cell(d->p90),
                          Cell(d->p99), d->count);
  }
  for (const auto& [code, n] : s.errors) absl::StrAppendFormat(&out, "errors     %s: %d\n", code, n);
  if (s.failed_mid_stream > 0) {
    absl::StrAppendFormat(&out, "errors     %d of the failed calls had received tokens (cut mid-stream)\n",
                          s.failed_mid_stream);
  }
  if (s.resumes > 0) {
    absl::StrAppendFormat(&out, "resumes    %d cut streams resumed (%d resumes)", s.resumed, s.resumes);
    if (s.replayed > 0) absl::StrAppendFormat(&out, ", %d completed by a replay of the committed turn", s.replayed);
    out += "\n";
  }
  if (s.retries > 0) {
    absl::StrAppendFormat(&out, "retries    %d calls retried (%d retries), %d failed after retrying", s.retried,
                          s.retries, s.failed);
    if (s.applied_unacknowledged > 0) {
      absl::StrAppendFormat(&out, ", %d applied without their last message", s.applied_unacknowledged);
    }
    out += "\n";
  }
  return out;
}

std::string FormatTurns(const std::vector<TurnStats>& turns) {
  std::string out = absl::StrFormat("%-6s %6s %12s %12s %12s %12s %12s %12s\n", "turn", "calls", "TTFT mean",
                                    "TTFT p50", "TTFT p90", "E2E mean", "E2E p50", "E2E p90");
  for (const TurnStats& t : turns) {
    absl::StrAppendFormat(&out, "%-6d %6d %12s %12s %12s %12s %12s %12s\n", t.turn, t.ttft_ms.count,
                          Cell(t.ttft_ms.mean), Cell(t.ttft_ms.p50), Cell(t.ttft_ms.p90), Cell(t.e2e_ms.mean),
                          Cell(t.e2e_ms.p50), Cell(t.e2e_ms.p90));
  }
  return out;
}

}  // namespace steady::loadtest
