// build/bin/steady-loadtest: a load generator for steady.v1.Inference (docs/loadtest.md). Closed loop
// (--concurrency), open loop (--request-rate, --burstiness) or multi-turn sessions (--sessions,
// --turns); reports TTFT, inter-token latency, TPOT, end-to-end latency, throughput, goodput and
// errors. It speaks the API only (the generated proto code), never model/ or kernels/.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/flags.h"
#include "base/status.h"
#include "clients/common/channel.h"
#include "clients/loadtest/driver.h"
#include "clients/loadtest/stats.h"
#include "clients/loadtest/workload.h"

namespace steady::loadtest {
namespace {

constexpr char kUsage[] = R"(usage: steady-loadtest [--addr HOST:PORT] [load shape] [workload] [--json FILE]

load shape (one of):
  --concurrency N        closed loop: N callers, each sends its next request when the last one ends (default 1)
  --request-rate R       open loop: R requests/s on average, sent whatever the server's state
    --burstiness B       gamma-distributed gaps with shape B (default 1: Poisson arrivals)
  --sessions N --turns T multi-turn: N sessions at once, each CreateSession, T Generate calls appending
                         new text to the same session (each with expected_position: never applied
                         twice), GetSession (every acknowledged turn there?), DeleteSession
    --think-time-ms MS   a pause before each turn, exponentially distributed with this mean (default 0)
    --duration S         take turns for S seconds (each session at most --turns, if given)
    --keep-sessions      leave the sessions on the server at the end
  --requests N | --duration S   how many requests (default 100), or for how long (closed and open loop)

workload:
  --prompt-tokens D      prompt length distribution: fixed:N | uniform:A:B | file:PATH (default fixed:64)
  --output-tokens D      max_tokens, same forms (default fixed:16); no stop strings
  --seed S               the same seed sends the same prompts at the same offsets (default 0)
  --tokens-per-word X    skip calibration (by default one prefill-only call measures the server's tokens per word)
  --temperature T --top-k K --top-p P --repetition-penalty R   sent as given (default greedy)
  --speculative off|ngram|draft [--draft-tokens K]   speculative decoding on every call
                         (GenerateRequest.speculation; default: the server's); the report adds the
                         drafted and accepted tokens and the acceptance rate
  --timeout SECONDS      deadline of each call (default: none)
  --resume N             resume a stream cut by a replica's or the balancer's death (UNAVAILABLE,
                         CANCELLED, INTERNAL RST_STREAM; not a refusal carrying retry-after) up to N
                         times within the same call (default 3; 0: report the cut as a failure): the
                         same request (same seed, expected_position) is sent again, waiting for the
                         channel, and its tokens past those already received are taken; the server
                         commits a turn only when it ends, so the next replica gives the same tokens,
                         and answers the resend of a turn it had committed with that turn's stored
                         outcome (docs/deployment.md); session turns are sent all_or_nothing, so a
                         cut one is rolled back, not kept in part. Only ephemeral calls and turns
                         with expected_position are resumed. A resumed call is one request in the report, its TTFT and E2E
                         including the wait; the report counts the resumes
  --retries N            send a call that failed with UNAVAILABLE, CANCELLED (by a stopping server) or
                         INTERNAL RST_STREAM (a stream a balancer cut when its replica died) again,
                         once its resumes are spent, after a backoff, up to N times (default 0);
                         multi-turn turns carry expected_position, so a retry never applies a turn
                         twice; the report counts retried calls and those that still failed
  --retry-backoff-ms MS  wait k x MS before retry k (default 1000)

report:
  --slo-ttft-ms MS --slo-tpot-ms MS   goodput counts completed requests meeting both (those given)
  --json FILE            config, summary, every request, per-turn aggregates (multi-turn)
  --label TEXT           a name stored in the JSON's config (plot legends)
  --addr HOST:PORT       the server (default $STEADY_ADDR, else 127.0.0.1:50051)
)";
constexpr char kExitUsage[] = R"(
Exit status: 0 when the run completed (failed requests are counted in the report), 1 when the server
could not be reached, 2 for usage errors.
)";

void PrintUsage() {
  std::printf("%s\nconnection (docs/security.md):\n%s%s", kUsage, kChannelUsage, kExitUsage);
}

const std::set<std::string> kFlags = {
    "addr",        "concurrency",  "request-rate", "burstiness",  "requests",       "duration",
    "prompt-tokens", "output-tokens", "seed",       "tokens-per-word", "temperature", "top-k",
    "top-p",       "repetition-penalty", "timeout", "slo-ttft-ms", "slo-tpot-ms",    "json",
    "label",       "sessions",     "turns",        "retries",     "resume",     "retry-backoff-ms", "think-time-ms",
    "speculative", "draft-tokens"};

enum class Mode { kClosedLoop, kOpenLoop, kMultiTurn };

const char* ModeName(Mode m) {
  switch (m) {
    case Mode::kClosedLoop: return "closed_loop";
    case Mode::kOpenLoop: return "open_loop";
    case Mode::kMultiTurn: return "multi_turn";
  }
  return "";
}

struct Config {
  std::string addr, label, json_path;
  Mode mode = Mode::kClosedLoop;
  int64_t concurrency = 1, requests = 0, sessions = 0, turns = 0;
  double request_rate = 0, burstiness = 1, duration_s = 0;
  Slo slo;
  Workload workload;
};

absl::Status Usage(const std::string& message) { return absl::InvalidArgumentError(message); }

absl::StatusOr<Config> ConfigFromArgs(const Flags& a) {
  Config c;
  const char* env_addr = std::getenv("STEADY_ADDR");
  c.addr = a.Get("addr", env_addr ? env_addr : "127.0.0.1:50051");
  c.label = a.Get("label");
  c.json_path = a.Get("json");
  auto concurrency = a.GetInt("concurrency", 1, 1, 100000);
  auto requests = a.GetInt("requests", 0, 1, int64_t(1) << 40);
  auto sessions = a.GetInt("sessions", 0, 1, 100000);
  auto turns = a.GetInt("turns", 1, 1, 1000000);
  auto rate = a.GetDouble("request-rate", 0);
  auto burstiness = a.GetDouble("burstiness", 1);
  auto duration = a.GetDouble("duration", 0);
  auto seed = a.GetUint("seed", 0);
  auto ttft = a.GetDouble("slo-ttft-ms", 0);
  auto tpot = a.GetDouble("slo-tpot-ms", 0);
  auto tokens_per_word = a.GetDouble("tokens-per-word", 0);
  auto timeout = a.GetDouble("timeout", 0);
  auto retries = a.GetInt("retries", 0, 0, 1000);
  auto resumes = a.GetInt("resume", 3, 0, 1000);
  auto backoff = a.GetDouble("retry-backoff-ms", 1000);
  auto think = a.GetDouble("think-time-ms", 0);
  auto temperature = a.GetDouble("temperature", 0, /*allow_nonfinite=*/true);
  auto top_k = a.GetInt("top-k", 0, INT32_MIN, INT32_MAX);
  auto top_p = a.GetDouble("top-p", 0, /*allow_nonfinite=*/true);
  auto penalty = a.GetDouble("repetition-penalty", 0, /*allow_nonfinite=*/true);
  auto draft_tokens = a.GetInt("draft-tokens", 0, 0, 1000);  // the server checks the range
  auto prompt = LengthDistribution::Parse("prompt-tokens", a.Get("prompt-tokens", "fixed:64"));
  auto output = LengthDistribution::Parse("output-tokens", a.Get("output-tokens", "fixed:16"));
  if (absl::Status s = FirstError({concurrency.status(), requests.status(), sessions.status(), turns.status(),
                                   rate.status(), burstiness.status(), duration.status(), seed.status(), ttft.status(),
                                   tpot.status(), tokens_per_word.status(), timeout.status(), temperature.status(),
                                   top_k.status(), top_p.status(), penalty.status(), prompt.status(), output.status(),
                                   retries.status(), resumes.status(), backoff.status(), think.status(),
                                   draft_tokens.status()});
      !s.ok()) {
    return s;
  }
  c.concurrency = *concurrency;
  c.requests = *requests;
  c.sessions = *sessions;
  c.turns = *turns;
  c.request_rate = *rate;
  c.burstiness = *burstiness;
  c.duration_s = *duration;
  c.slo = {*ttft, *tpot};
  c.workload.seed = *seed;
  c.workload.prompt_tokens = *prompt;
  c.workload.output_tokens = *output;
  c.workload.tokens_per_word = *tokens_per_word;
  c.workload.timeout_s = *timeout;
  c.workload.retries = int(*retries);
  c.workload.resumes = int(*resumes);
  c.workload.retry_backoff_s = std::max(0.0, *backoff) / 1e3;
  c.workload.think_time_s = *think / 1e3;
  c.workload.keep_sessions = a.Has("keep-sessions");
  c.workload.sampling = {*temperature, *top_p, *penalty, *top_k};
  c.workload.speculative = a.Get("speculative");
  c.workload.draft_tokens = int(*draft_tokens);

  if (a.Has("sessions")) {
    c.mode = Mode::kMultiTurn;
    if (a.Has("concurrency") || a.Has("request-rate") || a.Has("requests")) {
      return Usage("--sessions runs every session at once; it takes --turns or --duration, not --concurrency, "
                   "--request-rate or --requests");
    }
    if (a.Has("duration")) {
      if (!(c.duration_s > 0)) return Usage("--duration: expected seconds > 0");
      if (!a.Has("turns")) c.turns = 1000000;
      c.workload.duration_s = c.duration_s;
    }
    if (!(c.workload.think_time_s >= 0)) return Usage("--think-time-ms: expected milliseconds >= 0");
  } else {
    if (a.Has("turns")) return Usage("--turns needs --sessions");
    if (a.Has("think-time-ms") || a.Has("keep-sessions")) return Usage("--think-time-ms and --keep-sessions need --sessions");
    if (a.Has("request-rate")) {
      if (a.Has("concurrency")) return Usage("--concurrency (closed loop) and --request-rate (open loop) exclude each other");
      if (!(c.request_rate > 0)) return Usage("--request-rate: expected a rate > 0 requests/s");
      c.mode = Mode::kOpenLoop;
    } else if (a.Has("burstiness")) {
      return Usage("--burstiness needs --request-rate");
    }
    if (a.Has("requests") && a.Has("duration")) return Usage("--requests and --duration exclude each other");
    if (a.Has("duration") && !(c.duration_s > 0)) return Usage("--duration: expected seconds > 0");
    if (!a.Has("requests") && !a.Has("duration")) c.requests = 100;
  }
  if (!(c.burstiness > 0)) return Usage("--burstiness: expected a shape > 0");
  if (a.Has("tokens-per-word") && !(c.workload.tokens_per_word > 0)) return Usage("--tokens-per-word: expected > 0");
  if (c.slo.ttft_ms < 0 || c.slo.tpot_ms < 0) return Usage("--slo-ttft-ms, --slo-tpot-ms: expected milliseconds > 0");
  return c;
}

nlohmann::ordered_json ConfigJson(const Config& c, const v1::ModelInfo& info, bool calibrated) {
  nlohmann::ordered_json j;
  j["label"] = c.label;
  j["addr"] = c.addr;
  j["mode"] = ModeName(c.mode);
  j["concurrency"] = c.mode == Mode::kClosedLoop ? nlohmann::ordered_json(c.concurrency) : nullptr;
  j["request_rate"] = c.mode == Mode::kOpenLoop ? nlohmann::ordered_json(c.request_rate) : nullptr;
  j["burstiness"] = c.mode == Mode::kOpenLoop ? nlohmann::ordered_json(c.burstiness) : nullptr;
  j["requests"] = c.requests > 0 ? nlohmann::ordered_json(c.requests) : nullptr;
  j["duration_s"] = c.duration_s > 0 ? nlohmann::ordered_json(c.duration_s) : nullptr;
  j["sessions"] = c.mode == Mode::kMultiTurn ? nlohmann::ordered_json(c.sessions) : nullptr;
  j["turns"] = c.mode == Mode::kMultiTurn ? nlohmann::ordered_json(c.turns) : nullptr;
  j["think_time_ms"] = c.mode == Mode::kMultiTurn ? nlohmann::ordered_json(c.workload.think_time_s * 1e3) : nullptr;
  j["prompt_tokens"] = c.workload.prompt_tokens.spec;
  j["output_tokens"] = c.workload.output_tokens.spec;
  j["seed"] = c.workload.seed;
  j["tokens_per_word"] = c.workload.tokens_per_word;
  j["tokens_per_word_calibrated"] = calibrated;
  j["temperature"] = c.workload.sampling.temperature;
  j["top_k"] = c.workload.sampling.top_k;
  j["top_p"] = c.workload.sampling.top_p;
  j["repetition_penalty"] = c.workload.sampling.repetition_penalty;
  j["speculative"] = c.workload.speculative.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(c.workload.speculative);
  j["draft_tokens"] = c.workload.draft_tokens;
  j["timeout_s"] = c.workload.timeout_s;
  j["retries"] = c.workload.retries;
  j["resume"] = c.workload.resumes;
  j["retry_backoff_s"] = c.workload.retry_backoff_s;
  j["slo_ttft_ms"] = c.slo.ttft_ms > 0 ? nlohmann::ordered_json(c.slo.ttft_ms) : nullptr;
  j["slo_tpot_ms"] = c.slo.tpot_ms > 0 ? nlohmann::ordered_json(c.slo.tpot_ms) : nullptr;
  j["server"] = {{"model_name", info.model_name()},
                 {"mechanism", info.mechanism()},
                 {"state_bytes_per_session", info.state_bytes_per_session()},
                 {"kv_cache_bytes_per_token", info.kv_cache_bytes_per_token()},
                 {"max_batch", info.limits().max_batch()},
                 {"max_queue", info.limits().max_queue()}};
  return j;
}

std::string Describe(const Config& c) {
  switch (c.mode) {
    case Mode::kClosedLoop:
      return absl::StrCat("closed loop, concurrency ", c.concurrency);
    case Mode::kOpenLoop:
      return absl::StrFormat("open loop, %.3g requests/s, burstiness %.3g", c.request_rate, c.burstiness);
    case Mode::kMultiTurn:
      return c.duration_s > 0 ? absl::StrFormat("multi-turn, %d sessions for %.0f s", c.sessions, c.duration_s)
                              : absl::StrCat("multi-turn, ", c.sessions, " sessions x ", c.turns, " turns");
  }
  return "";
}

absl::Status Run(const std::vector<std::string>& argv) {
  std::set<std::string> flags = kFlags;
  flags.insert(kChannelFlags.begin(), kChannelFlags.end());
  auto args = Flags::Parse(argv, {.with_value = flags, .switches = {"keep-sessions"}});
  if (!args.ok()) return args.status();
  if (args->help()) {
    PrintUsage();
    return absl::OkStatus();
  }
  auto config = ConfigFromArgs(*args);
  if (!config.ok()) return config.status();
  Config& c = *config;

  Target target;
  auto channel_options = ChannelOptionsFromFlags(*args, c.addr);
  if (!channel_options.ok()) return channel_options.status();
  auto channel = OpenChannel(*channel_options);
  if (!channel.ok()) return channel.status();
  target.channel = *std::move(channel);
  target.stub = v1::Inference::NewStub(target.channel);
  v1::ModelInfo info;
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    context.set_wait_for_ready(true);
    const grpc::Status s = target.stub->GetModelInfo(&context, {}, &info);
    if (!s.ok()) {
      return absl::UnavailableError(absl::StrCat("GetModelInfo on ", c.addr, ": ", s.error_message()));
    }
  }
  const bool calibrate = c.workload.tokens_per_word <= 0;
  if (calibrate) {
    auto ratio = CalibrateTokensPerWord(target, c.workload.seed, 256);
    if (!ratio.ok()) return absl::UnavailableError(ratio.status().message());
    c.workload.tokens_per_word = *ratio;
  }
  std::printf("steady-loadtest: %s on %s (%s, %s), prompts %s tokens (%.2f tokens/word), outputs %s tokens\n",
              Describe(c).c_str(), c.addr.c_str(), info.model_name().c_str(), info.mechanism().c_str(),
              c.workload.prompt_tokens.spec.c_str(), c.workload.tokens_per_word,
              c.workload.output_tokens.spec.c_str());
  std::fflush(stdout);

  RunResult run;
  switch (c.mode) {
    case Mode::kClosedLoop:
      run = RunClosedLoop(target, c.workload, int(c.concurrency), c.requests, c.duration_s);
      break;
    case Mode::kOpenLoop:
      run = RunOpenLoop(target, c.workload,
                        ArrivalOffsets(c.workload.seed, c.request_rate, c.burstiness, c.requests, c.duration_s));
      break;
    case Mode::kMultiTurn: {
      // Ids unique to this run, so two load tests against one server do not collide.
      std::random_device entropy;
      const std::string prefix = absl::StrFormat("loadtest-%d-%08x", getpid(), entropy());
      run = RunMultiTurn(target, c.workload, int(c.sessions), int(c.turns), prefix);
      break;
    }
  }

  const Summary summary = Summarize(run.records, run.duration_s, c.slo);
  const std::vector<TurnStats> turns = PerTurn(run.records);
  std::fputs(FormatSummary(summary, c.slo).c_str(), stdout);
  for (const auto& [what, n] : run.session_errors) std::printf("errors     %s: %lld\n", what.c_str(), (long long)n);
  if (c.mode == Mode::kMultiTurn) {
    std::printf("sessions   %lld checked at the end, %lld with acknowledged turns lost\n",
                (long long)run.sessions_checked, (long long)run.sessions_lost_turns);
  }
  if (c.mode == Mode::kMultiTurn) std::fputs(FormatTurns(turns).c_str(), stdout);

  if (!c.json_path.empty()) {
    nlohmann::ordered_json report;
    report["format"] = "steady-loadtest/1";
    report["config"] = ConfigJson(c, info, calibrate);
    report["summary"] = ToJson(summary);
    report["summary"]["session_errors"] = nlohmann::ordered_json::object();
    for (const auto& [what, n] : run.session_errors) report["summary"]["session_errors"][what] = n;
    report["summary"]["start_unix_s"] = run.start_unix_s;
    if (c.mode == Mode::kMultiTurn) {
      report["summary"]["sessions_checked"] = run.sessions_checked;
      report["summary"]["sessions_lost_turns"] = run.sessions_lost_turns;
    }
    if (c.mode == Mode::kMultiTurn) report["turns"] = ToJson(turns);
    report["requests"] = nlohmann::ordered_json::array();
    for (const RequestRecord& r : run.records) report["requests"].push_back(ToJson(r));
    std::ofstream out(c.json_path, std::ios::trunc);
    out << report.dump(1) << "\n";
    out.close();
    if (!out) return absl::UnavailableError(absl::StrCat("--json: cannot write ", c.json_path));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace steady::loadtest

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "help") {
    steady::loadtest::PrintUsage();
    return 0;
  }
  const absl::Status s = steady::loadtest::Run(std::vector<std::string>(argv + 1, argv + argc));
  if (s.ok()) return 0;
  std::fprintf(stderr, "steady-loadtest: %s: %s\n", absl::StatusCodeToString(s.code()).c_str(),
               std::string(s.message()).c_str());
  if (s.code() == absl::StatusCode::kInvalidArgument) {
    std::fprintf(stderr, "(steady-loadtest --help lists the flags)\n");
    return 2;
  }
  return 1;
}
