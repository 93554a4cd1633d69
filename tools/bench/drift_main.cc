// drift: long-context precision of fixed-size attention state. Streams N random tokens through the
// decode path (AttentionForward with n = 1) three ways at once -- float with plain sums, float with
// Kahan sums, and double (plain) as the reference -- and reports at t = 1e3, 1e4, ... the largest
// output error of each float path relative to the fp64 output's scale over the last `window` tokens.
// How to run it and the measured numbers: docs/drift.md.
#include <sys/utsname.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/str_split.h"
#include "base/flags.h"
#include "base/status.h"
#include "model/mechanisms/attention.h"

namespace steady {
namespace {

constexpr char kUsage[] = R"(usage: drift [--mechanisms SPEC[,SPEC...]] [--max-tokens N] [--window W]
             [--seed S] [--json FILE]
  SPEC is name[:key=value...], e.g. taylor:order=3 or dark:features=64; values are read as JSON
  (numbers, true/false), anything else as a string. "accumulation" is set by the tool.
  Default: every name in MechanismNames() but softmax and sliding_window (a KV cache and a ring of
  the last W rows have no running sums to drift; sliding_window:window=64 runs it all the same).
  Mechanisms whose config is refused are reported and skipped; a placeholder whose Step aborts
  cannot be skipped from inside, so leave it out of --mechanisms.
)";

struct Options {
  std::vector<std::string> specs;
  int64_t max_tokens = 1000000;
  int window = 100;
  uint64_t seed = 1;
  std::string json_path;
};

// Small layer: two query heads sharing one kv head, dk = dv = 8.
constexpr AttnShape kShape{2, 1, 8, 8};

// "taylor:order=4" -> mechanism "taylor", params {"order": 4}.
AttentionConfig ParseSpec(const std::string& spec) {
  std::vector<std::string> parts = absl::StrSplit(spec, ':');
  AttentionConfig config;
  config.mechanism = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    const size_t eq = parts[i].find('=');
    const std::string key = parts[i].substr(0, eq);
    const std::string text = eq == std::string::npos ? "true" : parts[i].substr(eq + 1);
    nlohmann::json value = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    config.params[key] = value.is_discarded() ? nlohmann::json(text) : value;
  }
  return config;
}

// Token inputs, drawn in double and rounded to float so that all three paths see identical values.
// q and k: random directions with |q| = |k| = dk^(1/4), so |q.k| / sqrt(dk) <= 1 (bounded logits:
// Taylor is only accurate there, and even orders stay positive). v: a fixed per-channel mean plus
// unit noise, so outputs stay O(1) over long contexts instead of averaging to zero.
class TokenStream {
 public:
  TokenStream(const AttnShape& s, uint64_t seed) : s_(s), rng_(seed) {
    mean_.resize(s.kv_heads * s.value_dim);
    for (double& m : mean_) m = normal_(rng_);
    qf_.resize(s.heads * s.head_dim), kf_.resize(s.kv_heads * s.head_dim), vf_.resize(mean_.size());
  }

  void Next() {
    const double norm = std::pow(double(s_.head_dim), 0.25);
    for (std::vector<float>* x : {&qf_, &kf_}) {
      for (size_t h = 0; h < x->size(); h += s_.head_dim) {
        double sq = 0;
        std::vector<double> dir(s_.head_dim);
        for (double& d : dir) {
          d = normal_(rng_);
          sq += d * d;
        }
        for (int d = 0; d < s_.head_dim; ++d) (*x)[h + d] = float(dir[d] * norm / std::sqrt(sq));
      }
    }
    for (size_t i = 0; i < vf_.size(); ++i) vf_[i] = float(mean_[i] + normal_(rng_));
    qd_.assign(qf_.begin(), qf_.end()), kd_.assign(kf_.begin(), kf_.end()), vd_.assign(vf_.begin(), vf_.end());
  }

  template <typename T>
  const T* q() const { if constexpr (std::is_same_v<T, float>) return qf_.data(); else return qd_.data(); }
  template <typename T>
  const T* k() const { if constexpr (std::is_same_v<T, float>) return kf_.data(); else return kd_.data(); }
  template <typename T>
  const T* v() const { if constexpr (std::is_same_v<T, float>) return vf_.data(); else return vd_.data(); }

 private:
  AttnShape s_;
  std::mt19937_64 rng_;
  std::normal_distribution<double> normal_;
  std::vector<double> mean_, qd_, kd_, vd_;
  std::vector<float> qf_, kf_, vf_;
};

// One decode path: the layer with its accumulation set, and a session state in precision T.
template <typename T>
struct DecodePath {
  LayerAttention layer;
  std::vector<T> fixed, growing, y;

  DecodePath(const LayerAttention& a, Accumulation accumulation) : layer(a) {
    layer.accumulation = accumulation;
    fixed.assign(StateFloats(layer), T(0));
    y.resize(size_t(a.shape.heads) * a.shape.value_dim);
    InitState<T>(layer, StateView<T>{fixed.data(), &growing});
  }
  void Step(const TokenStream& in) {
    AttentionForward<T>(layer, 1, in.q<T>(), in.k<T>(), in.v<T>(), StateView<T>{fixed.data(), &growing},
                        y.data());
  }
};

// max |y - ref| / max |ref| over the tokens of a window; non-finite anywhere -> infinity.
struct WindowError {
  double diff = 0, scale = 0;
  bool finite = true;
  void Add(const std::vector<float>& y, const std::vector<double>& ref) {
    for (size_t i = 0; i < y.size(); ++i) {
      finite = finite && std::isfinite(y[i]) && std::isfinite(ref[i]);
      diff = std::max(diff, std::abs(double(y[i]) - ref[i]));
      scale = std::max(scale, std::abs(ref[i]));
    }
  }
  double Relative() const { return finite ? diff / std::max(scale, 1e-300) : INFINITY; }
};

// Errors go to JSON as numbers, non-finite ones as null (JSON has no inf).
double ErrorOf(const nlohmann::json& j) { return j.is_number() ? j.get<double>() : INFINITY; }

std::vector<int64_t> Checkpoints(int64_t max_tokens) {
  std::vector<int64_t> out;
  for (int64_t t = 1000; t <= max_tokens; t *= 10) out.push_back(t);
  if (out.empty() || out.back() != max_tokens) out.push_back(max_tokens);
  return out;
}

// Runs one mechanism; returns its JSON record (with "error" if its config was refused).
nlohmann::json Study(const std::string& spec, const Options& opt) {
  nlohmann::json record = {{"spec", spec}};
  absl::StatusOr<LayerAttention> a = ParseLayerAttention(ParseSpec(spec), kShape);
  if (!a.ok()) {
    record["error"] = std::string(a.status().message());
    return record;
  }
  RandomInitAttentionTensors(opt.seed, &*a);
  DecodePath<float> plain(*a, Accumulation::kPlain), kahan(*a, Accumulation::kKahan);
  DecodePath<double> ref(*a, Accumulation::kPlain);
  record["describe"] = DescribeAttention(plain.layer);
  record["state_floats"] = {{"plain", plain.fixed.size()}, {"kahan", kahan.fixed.size()}};
  TokenStream in(kShape, opt.seed);
  const std::vector<int64_t> checkpoints = Checkpoints(opt.max_tokens);
  WindowError plain_err, kahan_err;
  size_t next = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t t = 1; next < checkpoints.size(); ++t) {
    in.Next();
    plain.Step(in), kahan.Step(in), ref.Step(in);
    if (t + opt.window <= checkpoints[next]) continue;
    plain_err.Add(plain.y, ref.y), kahan_err.Add(kahan.y, ref.y);
    if (t < checkpoints[next]) continue;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    record["checkpoints"].push_back({{"tokens", t}, {"plain", plain_err.Relative()},
                                     {"kahan", kahan_err.Relative()}, {"seconds", seconds}});
    std::fprintf(stderr, "%s: t = %lld  plain %.3g  kahan %.3g  (%.1f s)\n", spec.c_str(), (long long)t,
                 plain_err.Relative(), kahan_err.Relative(), seconds);
    plain_err = {}, kahan_err = {};
    ++next;
  }
  record["growing_floats_at_end"] = ref.growing.size();
  return record;
}

nlohmann::json Machine() {
  utsname u{};
  uname(&u);
  std::string cpu = "unknown";
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);) {
    if (line.rfind("model name", 0) == 0) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
  }
  return {{"os", std::string(u.sysname) + " " + u.release}, {"arch", u.machine}, {"cpu", cpu},
          {"threads", std::thread::hardware_concurrency()}};
}

int Main(int argc, char** argv) {
  const Flags flags =
      ParseFlagsOrExit(argc, argv, {.with_value = {"mechanisms", "max-tokens", "window", "seed", "json"}}, kUsage);
  Options opt;
  for (const auto& s : absl::StrSplit(flags.Get("mechanisms"), ',', absl::SkipEmpty())) opt.specs.emplace_back(s);
  auto max_tokens = flags.GetDouble("max-tokens", double(opt.max_tokens));  // accepts 1e6
  auto window = flags.GetInt("window", opt.window, 1, 1 << 30);
  auto seed = flags.GetUint("seed", opt.seed);
  ExitOnUsageError(argv[0], FirstError({max_tokens.status(), window.status(), seed.status()}), kUsage);
  if (!(*max_tokens >= 1 && *max_tokens <= 1e15)) {
    ExitOnUsageError(argv[0], absl::InvalidArgumentError("--max-tokens: expected a count in [1, 1e15]"), kUsage);
  }
  opt.max_tokens = int64_t(*max_tokens);
  opt.window = int(*window);
  opt.seed = *seed;
  opt.json_path = flags.Get("json");
  if (opt.specs.empty()) {
    for (const std::string& name : MechanismNames()) {
      if (name != "softmax" && name != "sliding_window") opt.specs.push_back(name);
    }
  }

  nlohmann::json report = {{"machine", Machine()},
                           {"shape", {{"heads", kShape.heads}, {"kv_heads", kShape.kv_heads},
                                      {"head_dim", kShape.head_dim}, {"value_dim", kShape.value_dim}}},
                           {"max_tokens", opt.max_tokens}, {"window", opt.window}, {"seed", opt.seed},
                           {"results", nlohmann::json::array()}};
  for (const std::string& spec : opt.specs) report["results"].push_back(Study(spec, opt));

  std::printf("max |y_fp32 - y_fp64| / max |y_fp64| over the last %d tokens before t (seed %llu)\n",
              opt.window, (unsigned long long)opt.seed);
  std::printf("%-24s %14s %10s %11s %11s\n", "mechanism", "state floats", "tokens", "fp32 plain", "fp32 kahan");
  for (const nlohmann::json& r : report["results"]) {
    const std::string spec = r["spec"];
    if (r.contains("error")) {
      std::printf("%-24s skipped: %s\n", spec.c_str(), r["error"].get<std::string>().c_str());
      continue;
    }
    const std::string floats = std::to_string(r["state_floats"]["plain"].get<size_t>()) + "/" +
                               std::to_string(r["state_floats"]["kahan"].get<size_t>());
    for (const nlohmann::json& c : r["checkpoints"]) {
      std::printf("%-24s %14s %10lld %11.2e %11.2e\n", spec.c_str(), floats.c_str(),
                  (long long)c["tokens"].get<int64_t>(), ErrorOf(c["plain"]), ErrorOf(c["kahan"]));
    }
  }
  if (!opt.json_path.empty()) {
    std::ofstream out(opt.json_path);
    out << report.dump(2) << "\n";
    if (!out) {
      std::fprintf(stderr, "drift: cannot write %s\n", opt.json_path.c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace steady

int main(int argc, char** argv) { return steady::Main(argc, argv); }
