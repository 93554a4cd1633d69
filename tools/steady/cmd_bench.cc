// steady bench: synthetic decode and prefill through the Backend interface (model/backend/backend.h), on
// random weights of a shape (--preset, --config) or on a checkpoint (--model), so that one command
// measures whichever backend --device picks. What it measures, the byte accounting and figures:
// docs/benchmarks.md ("steady bench").
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/parallel.h"
#include "model/generate.h"
#include "model/mechanisms/kv_rows.h"
#include "tools/steady/commands.h"

namespace steady {
namespace {

constexpr int kWarmupSteps = 3;
// Real tokens a constant-state slot absorbs before its position is set to the context length: its
// state is a fixed buffer, as costly to read and write after 256 tokens as after a million. A sliding
// window's ring costs more until it holds W tokens, and window_dark's step folds a row into its dark
// sums only once its ring is full: such a slot absorbs up to W (FillTokens).
constexpr int64_t kFillTokens = 256;
// State that grows has to hold the whole context. A softmax KV cache is filled with random rows
// (a decode step reads every row whatever they hold; a real prefill of 128K tokens would cost
// more than the benchmark); other growing state (the exact sliced decoder) is prefilled in slot 0,
// at a cost quadratic in the context, and copied to the other slots. On the cpu backend, more
// multiply-adds than this (about 10 minutes on the 2-core VM) or more cache than kMaxCpuKvBytes
// are refused.
constexpr double kMaxCpuSetupMacs = 1e12;
constexpr double kMaxCpuKvBytes = 4.0 * (1 << 30);
// Timed repetitions of a prefill's attention alone (each a whole prompt: seconds at 128K tokens).
constexpr int kPrefillAttentionReps = 3;

int64_t FillTokens(const Model& m) {
  int64_t fill = kFillTokens;
  for (const LayerWeights& l : m.layers()) {
    if (const auto* p = std::get_if<SlidingWindowParams>(&l.attention.params)) fill = std::max<int64_t>(fill, p->window);
    if (const auto* p = std::get_if<WindowDarkParams>(&l.attention.params)) fill = std::max<int64_t>(fill, p->window);
  }
  return fill;
}

// State bytes of `layer` a decode step at `position` (tokens before it) reads and writes. Running sums
// are read and written whole; a sliding window's ring is read as far as it holds tokens (the step's
// own included) and written one row (and its cursor).
std::pair<double, double> LayerStepBytes(const Backend& b, int layer, int64_t position) {
  const LayerAttention& a = b.model().layers()[layer].attention;
  const double whole = double(b.LayerStateBytes(layer));
  const auto* p = std::get_if<SlidingWindowParams>(&a.params);
  if (p == nullptr) return {whole, whole};
  const double row = double(KvRowFloats(a.shape) * sizeof(float));
  return {whole - row * double(p->window - std::min<int64_t>(position + 1, p->window)), whole - row * (p->window - 1)};
}

using Clock = std::chrono::steady_clock;
double SecondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

struct TokenSource {
  std::mt19937_64 rng;
  std::uniform_int_distribution<int32_t> id;
  std::vector<int32_t> Next(int64_t n) {
    std::vector<int32_t> t(n);
    for (int32_t& x : t) x = id(rng);
    return t;
  }
};

// Prefills slots [0, slots) with random tokens up to position `target`, `chunk` tokens per slot
// per Forward (one segment per slot), then waits for the device.
void PrefillTo(Backend& b, int slots, int64_t target, int64_t chunk, TokenSource& tokens) {
  for (;;) {
    std::vector<Segment> segments;
    for (int s = 0; s < slots; ++s) {
      const int64_t n = std::min(chunk, target - b.position(s));
      if (n > 0) segments.push_back({s, tokens.Next(n), false});
    }
    if (segments.empty()) break;
    b.Forward(segments, nullptr);
  }
  b.Synchronize();
}

int64_t TotalBytesInUse(const Backend& b) {
  int64_t total = 0;
  for (int s = 0; s < b.slots(); ++s) total += b.BytesInUse(s);
  return total;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// --name 1,64,128: comma-separated integers in [lo, hi] (`def` when the flag is absent).
absl::StatusOr<std::vector<int64_t>> IntList(const Flags& flags, const std::string& name, int64_t lo, int64_t hi,
                                             const std::string& def = "") {
  std::vector<int64_t> out;
  for (const std::string& part : std::vector<std::string>(absl::StrSplit(flags.Get(name, def), ','))) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v < lo || v > hi) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, ": expected integers in [", lo, ", ", hi,
                                                     "] separated by commas, got \"", flags.Get(name, def), "\""));
    }
    out.push_back(v);
  }
  return out;
}

// --model DIR, or random weights of the --preset / --config shape.
absl::StatusOr<Model> BenchModel(const Flags& flags, uint64_t seed) {
  if (!flags.Has("model") && !flags.Has("config") && !flags.Has("preset")) {
    return absl::InvalidArgumentError("one of --preset tiny|llama1b, --config FILE or --model DIR is required");
  }
  if (flags.Has("model")) {
    if (flags.Has("config") || flags.Has("preset")) {
      return absl::InvalidArgumentError("--model loads a checkpoint's shape; it conflicts with --config / --preset");
    }
    return LoadModelFromFlags(flags);
  }
  auto config = ConfigFromFlags(flags);
  if (!config.ok()) return config.status();
  return Model::Random(*config, seed);
}

// Multiply-adds of prefilling one slot to `context` tokens: every weight once per token, and
// each token's attention over the tokens before it (q.k and p.v, per query head and layer).
double PrefillMacs(const Model& m, int64_t context) {
  const ModelConfig& c = m.config();
  const double l = double(context);
  return l * double(m.ParameterCount()) + l * l * c.num_layers * c.num_heads * c.head_dim;
}

// Every slot at position `context`, then `steps` timed decode steps (one token per slot each).
absl::StatusOr<nlohmann::json> MeasureDecode(Backend& b, const Model& model, int64_t context, int steps, int64_t chunk,
                                             TokenSource& tokens) {
  const int batch = b.slots();
  const auto setup_start = Clock::now();
  // One real token tells whether the state grows with the context (before any long prefill).
  PrefillTo(b, 1, std::min<int64_t>(context, 1), chunk, tokens);
  const bool grows = b.BytesInUse(0) > b.StateBytesPerSlot();
  int64_t setup_tokens = 1;
  std::string setup;
  if (grows) {
    SlotState state = b.ReadSlot(0);
    bool kv_only = true;  // every growing layer is a softmax KV cache
    double kv_bytes_per_token = 0;
    for (size_t l = 0; l < state.growing.size(); ++l) {
      if (state.growing[l].empty()) continue;
      kv_only = kv_only && model.config().layer_attention[l].mechanism == "softmax";
      kv_bytes_per_token += double(state.growing[l].size() * sizeof(float));
    }
    if (b.Name() == "cpu" && kv_only && double(batch) * double(context) * kv_bytes_per_token > kMaxCpuKvBytes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--batch %d --context %lld: the KV caches would take %.1f GB, more than the cpu backend's limit of "
          "%.0f GB; lower --batch or --context",
          batch, static_cast<long long>(context), batch * context * kv_bytes_per_token / 1e9, kMaxCpuKvBytes / 1e9));
    }
    if (kv_only) {
      setup = "random KV rows";
      uint64_t x = 0x9e3779b97f4a7c15ull;  // xorshift: values in [-2, 2), not zeros (METHOD.md)
      for (std::vector<float>& rows : state.growing) {
        if (rows.empty()) continue;
        rows.resize(size_t(context) * rows.size());
        for (float& r : rows) {
          x ^= x << 13;
          x ^= x >> 7;
          x ^= x << 17;
          r = float(int64_t(x >> 40) - (int64_t(1) << 23)) * (2.0f / float(1 << 23));
        }
      }
      state.position = context;
      b.WriteSlot(0, state);
    } else {
      setup = "prefill";
      setup_tokens = context;
      const double macs = PrefillMacs(model, context);
      if (b.Name() == "cpu" && macs > kMaxCpuSetupMacs) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "--context %lld: this state grows with the context, so a slot must prefill it: %.2g multiply-adds, "
            "more than the cpu backend's limit of %.0g (about 10 minutes on 2 cores); lower --context",
            static_cast<long long>(context), macs, kMaxCpuSetupMacs));
      }
      PrefillTo(b, 1, context, chunk, tokens);
    }
    for (int s = 1; s < batch; ++s) b.CopySlot(0, s);
    b.Synchronize();
  } else {
    setup = "state copied at the context";
    setup_tokens = std::min(context, FillTokens(model));
    PrefillTo(b, 1, setup_tokens, chunk, tokens);
    SlotState state = b.ReadSlot(0);
    state.position = context;
    for (int s = 0; s < batch; ++s) b.WriteSlot(s, state);
    b.Synchronize();
  }
  const double setup_seconds = SecondsSince(setup_start);

  std::vector<double> times;
  double state_read = 0, state_written = 0;  // bytes, summed over the timed steps
  const std::vector<DrawParams> greedy(batch);  // each step ends with a greedy draw per slot
  std::vector<int32_t> ids;
  for (int step = 0; step < kWarmupSteps + steps; ++step) {
    std::vector<Segment> segments(batch);
    for (int s = 0; s < batch; ++s) segments[s] = {s, tokens.Next(1), false};
    const int64_t before = TotalBytesInUse(b);
    // Each slot reads all its state; it rewrites its fixed part and appends what grew (a KV row).
    // A sliding window's ring less what the step leaves alone (LayerStepBytes).
    double read = double(before), written = double(batch) * double(b.StateBytesPerSlot());
    for (int s = 0; s < batch; ++s) {
      for (int l = 0; l < model.config().num_layers; ++l) {
        const auto [r, w] = LayerStepBytes(b, l, b.position(s));
        read -= double(b.LayerStateBytes(l)) - r;
        written -= double(b.LayerStateBytes(l)) - w;
      }
    }
    const auto start = Clock::now();
    b.ForwardSample(segments, greedy, &ids);
    b.Synchronize();
    const double seconds = SecondsSince(start);
    if (step < kWarmupSteps) continue;
    times.push_back(seconds);
    state_read += read;
    state_written += written + double(TotalBytesInUse(b) - before);
  }
  const double median = Median(times);
  const double bytes = double(b.WeightBytes()) + (state_read + state_written) / steps;
  return nlohmann::json{{"batch", batch},
                        {"context", context},
                        {"steps", steps},
                        {"warmup_steps", kWarmupSteps},
                        {"state_grows", grows},
                        {"setup", setup},
                        {"setup_tokens", setup_tokens},
                        {"setup_seconds", setup_seconds},
                        {"step_seconds_median", median},
                        {"step_seconds_min", *std::min_element(times.begin(), times.end())},
                        {"tokens_per_second", batch / median},
                        {"state_bytes_read_per_step", state_read / steps},
                        {"state_bytes_written_per_step", state_written / steps},
                        {"bytes_per_step", bytes},
                        {"bandwidth_bytes_per_second", bytes / median}};
}

// Speculative verification's cost in slot 0 (already at its context): per row count K of `rows`,
// the median time of a verify step of K tokens (Segment::verify) settled by KeepVerified, with every
// draft accepted (keep K: no rollback) and with every draft rejected (keep 1: the state restored and
// one row replayed), against the median plain one-token step of the same slot, measured alongside;
// each step from the same state.
nlohmann::json MeasureVerify(Backend& b, const std::vector<int64_t>& rows, int steps, TokenSource& tokens) {
  // Every step starts from the same state (written back untimed), so that the context stays put.
  const SlotState start_state = b.ReadSlot(0);
  std::vector<float> logits;
  auto time_steps = [&](int64_t k, int64_t keep) {
    std::vector<double> times;
    for (int step = 0; step < kWarmupSteps + steps; ++step) {
      b.WriteSlot(0, start_state);
      Segment seg{0, tokens.Next(k), false};
      seg.verify = k > 1;
      const auto start = Clock::now();
      b.Forward({seg}, &logits);
      if (seg.verify) b.KeepVerified(0, int(keep));
      b.Synchronize();
      if (step >= kWarmupSteps) times.push_back(SecondsSince(start));
    }
    return Median(times);
  };
  const double one = time_steps(1, 1);
  nlohmann::json out = {{"one_row_step_seconds_median", one}, {"steps", steps}, {"rows", nlohmann::json::array()}};
  for (const int64_t k : rows) {
    const double accept_all = time_steps(k, k), reject_all = time_steps(k, 1);
    out["rows"].push_back({{"rows", k},
                           {"accept_all_seconds_median", accept_all},
                           {"reject_all_seconds_median", reject_all},
                           {"accept_all_ratio", accept_all / one},
                           {"reject_all_ratio", reject_all / one}});
  }
  return out;
}

// Layer 0's attention alone for the decode slots (the fused state-update kernel on the GPU), after
// the decode steps: each slot reads and writes its layer state once, and a KV cache is read whole.
nlohmann::json MeasureAttention(Backend& b, int reps, double copy_bandwidth) {
  const int batch = b.slots();
  const ModelConfig& c = b.model().config();
  double bytes = 0;
  for (int s = 0; s < batch; ++s) {
    const auto [read, written] = LayerStepBytes(b, 0, b.position(s));
    bytes += read + written;
  }
  if (c.layer_attention[0].mechanism == "softmax") {
    // Layer 0's share of each slot's KV cache, in the backend's storage (fp32 or bf16 rows).
    int softmax_layers = 0;
    for (const auto& a : c.layer_attention) softmax_layers += a.mechanism == "softmax";
    for (int s = 0; s < batch; ++s) bytes += double(b.BytesInUse(s) - b.StateBytesPerSlot()) / softmax_layers;
  }
  const double seconds = b.TimeAttention(0, batch, reps);
  return {{"layer", 0},
          {"reps", reps},
          {"seconds_median", seconds},
          {"bytes", bytes},
          {"bandwidth_bytes_per_second", bytes / seconds},
          {"bandwidth_fraction_of_copy", bytes / seconds / copy_bandwidth}};
}

// One slot, `total` tokens in chunks of `chunk`, after one untimed chunk; then layer 0's attention
// alone over the whole prompt as one segment, where the backend measures it (the GPU: what
// PyTorch's SDPA is compared with, tools/bench/sdpa_compare.py).
nlohmann::json MeasurePrefill(Backend& b, int64_t total, int64_t chunk, TokenSource& tokens) {
  PrefillTo(b, 1, std::min(total, chunk), chunk, tokens);
  b.Reset(0);
  const auto start = Clock::now();
  PrefillTo(b, 1, total, chunk, tokens);
  const double seconds = SecondsSince(start);
  nlohmann::json out = {{"tokens", total}, {"chunk", chunk}, {"seconds", seconds}, {"tokens_per_second", total / seconds},
                        {"attention_alone", nullptr}};
  b.Reset(0);
  const double attention = b.TimePrefillAttention(0, total, kPrefillAttentionReps);
  if (attention >= 0) {
    out["attention_alone"] = {{"layer", 0}, {"reps", kPrefillAttentionReps}, {"seconds_median", attention},
                              {"tokens_per_second", total / attention}};
  }
  return out;
}

// {"f32": path, "bf16": path, "q8": path, ...}: the instruction path each weight format takes here.
nlohmann::json CpuGemmPathsJson(CpuGemm gemm, CpuWeights weights) {
  nlohmann::json paths = nlohmann::json::object();
  for (const auto& [format, path] : CpuGemmPaths(gemm, weights)) paths[format] = path;
  return paths;
}

std::string Bytes(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  for (; u < 4 && b >= 1000; ++u) b /= 1000;
  return absl::StrFormat(u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
}

void PrintTable(const nlohmann::json& r) {
  const nlohmann::json& m = r["model"];
  const nlohmann::json& d = r["decode"];
  const auto row = [](const char* name, const std::string& value) { std::printf("%-28s %s\n", name, value.c_str()); };
  row("device", r["device"].get<std::string>());
  if (absl::StartsWith(r["device"].get<std::string>(), "cpu")) {
    std::vector<std::string> paths;
    for (const auto& [format, path] : r["cpu_gemm_paths"].items()) paths.push_back(absl::StrCat(format, ": ", path.get<std::string>()));
    row("cpu", r["cpu_model"].get<std::string>());
    row("cpu gemm paths", absl::StrJoin(paths, "; "));
  }
  row("model", m["source"].get<std::string>());
  row("shape", absl::StrFormat("hidden %d, layers %d, heads %d, kv heads %d, head_dim %d, vocab %d, %lld parameters",
                               m["hidden"].get<int>(), m["layers"].get<int>(), m["heads"].get<int>(),
                               m["kv_heads"].get<int>(), m["head_dim"].get<int>(), m["vocab"].get<int>(),
                               m["parameters"].get<long long>()));
  std::vector<std::string> params;
  for (const auto& [key, value] : r["attention"].items()) {
    if (key != "mechanism") params.push_back(absl::StrCat(key, " ", value.is_string() ? value.get<std::string>() : value.dump()));
  }
  row("mechanism", absl::StrCat(r["mechanism"].get<std::string>(), " (", absl::StrJoin(params, ", "), ")"));
  row("state bytes per session", Bytes(r["state_bytes_per_session"].get<double>()) +
                                     (d["state_grows"].get<bool>() ? " fixed, plus what grows (KV cache)" : ""));
  row("weight bytes per step", Bytes(r["weight_bytes"].get<double>()));
  row("copy bandwidth", Bytes(r["copy_bandwidth_bytes_per_second"].get<double>()) + "/s (read + written, " +
                            Bytes(r["copy_bytes"].get<double>()) + " buffers)");
  row("decode batch x context", absl::StrCat(d["batch"].get<int>(), " x ", d["context"].get<int64_t>()));
  row("decode setup", absl::StrFormat("%.2f s (%s; %lld tokens prefilled)", d["setup_seconds"].get<double>(),
                                      d["setup"].get<std::string>(), d["setup_tokens"].get<long long>()));
  row("decode step median / min", absl::StrFormat("%.3f / %.3f ms over %d steps", 1e3 * d["step_seconds_median"].get<double>(),
                                                  1e3 * d["step_seconds_min"].get<double>(), d["steps"].get<int>()));
  row("decode tokens/s", absl::StrFormat("%.1f", d["tokens_per_second"].get<double>()));
  row("decode bytes per step", absl::StrCat(Bytes(d["bytes_per_step"].get<double>()), " (weights ", Bytes(r["weight_bytes"].get<double>()),
                                            " + state read ", Bytes(d["state_bytes_read_per_step"].get<double>()), " + written ",
                                            Bytes(d["state_bytes_written_per_step"].get<double>()), ")"));
  row("decode bandwidth", absl::StrFormat("%s/s = %.1f%% of copy", Bytes(d["bandwidth_bytes_per_second"].get<double>()),
                                          100 * d["bandwidth_fraction_of_copy"].get<double>()));
  const nlohmann::json& a = r["attention_alone"];
  row("attention alone (layer 0)",
      absl::StrFormat("%.3f ms, %s moved, %s/s = %.1f%% of copy", 1e3 * a["seconds_median"].get<double>(),
                      Bytes(a["bytes"].get<double>()), Bytes(a["bandwidth_bytes_per_second"].get<double>()),
                      100 * a["bandwidth_fraction_of_copy"].get<double>()));
  if (!r["verify"].is_null()) {
    const nlohmann::json& v = r["verify"];
    row("1-row step (slot 0)", absl::StrFormat("%.3f ms", 1e3 * v["one_row_step_seconds_median"].get<double>()));
    for (const nlohmann::json& k : v["rows"]) {
      row(absl::StrCat("verify ", k["rows"].get<int64_t>(), " rows").c_str(),
          absl::StrFormat("all accepted %.3f ms (%.2fx), all rejected %.3f ms (%.2fx)",
                          1e3 * k["accept_all_seconds_median"].get<double>(), k["accept_all_ratio"].get<double>(),
                          1e3 * k["reject_all_seconds_median"].get<double>(), k["reject_all_ratio"].get<double>()));
    }
  }
  if (r["prefill"].is_null()) return;
  for (const nlohmann::json& p : r["prefill"].is_array() ? r["prefill"] : nlohmann::json::array({r["prefill"]})) {
    row("prefill (one slot)", absl::StrFormat("%lld tokens in chunks of %lld: %.3f s, %.1f tokens/s",
                                              p["tokens"].get<long long>(), p["chunk"].get<long long>(),
                                              p["seconds"].get<double>(), p["tokens_per_second"].get<double>()));
    if (!p["attention_alone"].is_null()) {
      row("  attention alone (layer 0)",
          absl::StrFormat("%.3f ms, %.1f tokens/s", 1e3 * p["attention_alone"]["seconds_median"].get<double>(),
                          p["attention_alone"]["tokens_per_second"].get<double>()));
    }
  }
}

absl::Status RunBench(const Flags& flags) {
  auto batch_flag = flags.Require("batch");
  auto context_flag = flags.Require("context");
  auto batches = IntList(flags, "batch", 1, 1 << 20);
  auto contexts = IntList(flags, "context", 0, int64_t(1) << 40);
  auto steps = flags.GetInt("steps", 32, 1, 1 << 20);
  auto prefill_tokens = IntList(flags, "prefill-tokens", 0, int64_t(1) << 30, "2048");
  auto chunk = flags.GetInt("prefill-chunk", 512, 1, 1 << 20);
  auto copy_bytes = flags.GetInt("copy-bytes", int64_t(256) << 20, 1, int64_t(1) << 40);
  auto seed = flags.GetInt("seed", 1, 0, INT64_MAX);
  auto verify_rows = IntList(flags, "verify-rows", 2, kMaxDraftTokens + 1, "2");
  if (absl::Status s =
          FirstError({batch_flag.status(), context_flag.status(), batches.status(), contexts.status(), steps.status(),
                      prefill_tokens.status(), chunk.status(), copy_bytes.status(), seed.status(), verify_rows.status()});
      !s.ok()) {
    return s;
  }
  // Refuse an unusable --device or CPU flag before spending seconds on a large random model.
  if (absl::Status s = CheckDevice(flags.Get("device", "auto")); !s.ok()) return s;
  BackendOptions cpu_flags;
  if (absl::Status s = CpuOptionsFromFlags(flags, &cpu_flags); !s.ok()) return s;
  if (absl::Status s = CudaOptionsFromFlags(flags, &cpu_flags); !s.ok()) return s;
  auto model = BenchModel(flags, uint64_t(*seed));
  if (!model.ok()) return model.status();
  const ModelConfig& c = model->config();
  TokenSource tokens{std::mt19937_64(*seed), std::uniform_int_distribution<int32_t>(0, c.vocab_size - 1)};

  const std::string source =
      flags.Has("model") ? flags.Get("model")
                          : absl::StrCat(flags.Has("config") ? flags.Get("config") : "preset " + flags.Get("preset"),
                                         ", random weights (seed ", *seed, ")");
  // One report per (batch, context) pair, on one model (random weights are built once); the
  // prefill figure goes with the first.
  const bool several = batches->size() * contexts->size() > 1;
  // The largest batch's states, checked before the first report instead of after the smaller ones.
  if (DeviceIsCpu(flags.Get("device", "auto"))) {
    const int64_t largest = *std::max_element(batches->begin(), batches->end());
    if (absl::Status s = CheckCpuStateMemory(*model, int(largest)); !s.ok()) return s;
  }
  bool first = true;
  for (const int64_t batch : *batches) {
    for (const int64_t context : *contexts) {
      BackendOptions decode_options;
      decode_options.slots = int(batch);
      decode_options.max_context = context + kWarmupSteps + *steps + 16;
      auto backend = BackendFromFlags(flags, *model, decode_options);
      if (!backend.ok()) return backend.status();
      Backend& b = **backend;
      nlohmann::json report = {
          {"device", b.Name()},
          {"cpu_threads", cpu::ComputeThreads()},
          {"cpu_simd", cpu::SimdTargetName()},
          {"cpu_model", cpu::CpuModelName()},
          {"cpu_gemm", CpuGemmName(cpu_flags.cpu_gemm)},
          {"cpu_gemm_paths", CpuGemmPathsJson(cpu_flags.cpu_gemm, cpu_flags.cpu_weights)},
          {"model", {{"source", source}, {"hidden", c.hidden_size}, {"intermediate", c.intermediate_size},
                     {"layers", c.num_layers}, {"heads", c.num_heads}, {"kv_heads", c.num_kv_heads},
                     {"head_dim", c.head_dim}, {"vocab", c.vocab_size}, {"parameters", model->ParameterCount()}}},
          {"mechanism", c.layer_attention[0].mechanism},
          {"attention", model->DescribeAttention()[0]},
          {"state_bytes_per_session", b.StateBytesPerSlot()},
          {"weight_bytes", b.WeightBytes()},
          {"copy_bytes", *copy_bytes},
          {"copy_bandwidth_bytes_per_second", b.CopyBandwidth(*copy_bytes)}};
      auto decode = MeasureDecode(b, *model, context, int(*steps), *chunk, tokens);
      if (!decode.ok()) return decode.status();
      const double copy = report["copy_bandwidth_bytes_per_second"].get<double>();
      (*decode)["bandwidth_fraction_of_copy"] = (*decode)["bandwidth_bytes_per_second"].get<double>() / copy;
      report["decode"] = *decode;
      report["attention_alone"] = MeasureAttention(b, int(*steps), copy);
      report["verify"] = nullptr;
      if (flags.Has("verify-rows")) {
        if (!b.Verifies()) return absl::FailedPreconditionError(absl::StrCat("--verify-rows: ", b.Name(), " takes no verify segments"));
        report["verify"] = MeasureVerify(b, *verify_rows, int(*steps), tokens);
      }
      backend->reset();  // the decode slots' memory, before the prefill backend takes its own

      // One prefill measurement per --prefill-tokens length (0 skips), with the first report: an
      // object for one length, a list for several.
      report["prefill"] = nullptr;
      nlohmann::json prefills = nlohmann::json::array();
      for (const int64_t total : first ? *prefill_tokens : std::vector<int64_t>{}) {
        if (total == 0) continue;
        BackendOptions prefill_options;
        prefill_options.max_context = total + 1;
        auto prefill_backend = BackendFromFlags(flags, *model, prefill_options);
        if (!prefill_backend.ok()) return prefill_backend.status();
        prefills.push_back(MeasurePrefill(**prefill_backend, total, *chunk, tokens));
      }
      if (prefills.size() == 1) report["prefill"] = prefills[0];
      if (prefills.size() > 1) report["prefill"] = prefills;
      first = false;
      if (flags.Has("json")) {
        // Several reports: one compact JSON object per line (JSON Lines).
        std::printf("%s\n", report.dump(several ? -1 : 2).c_str());
      } else {
        if (several) std::printf("\n");
        PrintTable(report);
      }
      std::fflush(stdout);
    }
  }
  return absl::OkStatus();
}

}  // namespace

Command BenchCommand() {
  return {"bench", R"(usage: steady bench (--preset tiny|llama1b | --config FILE | --model DIR|FILE.gguf) --batch B[,B...]
                    --context L[,L...] [--device D] [--threads N] [--cpu-weights auto|stored|f32|bf16|q8|q4|q4k]
                    [--cpu-gemm auto|simd|openblas|avx512vnni|avxvnni|avx2|armdot] [--cuda-weights bf16|f32] [--cuda-kv bf16|f32]
                    [--steps N] [--prefill-tokens N[,N...]] [--prefill-chunk C] [--copy-bytes N] [--seed S] [--json]
                    [--verify-rows K[,K...]]
                    [--mechanism NAME [--order P] [--scale S] [--param key=value ...]]

Synthetic decode and prefill through the --device backend on random weights of the shape (or the
checkpoint). --threads: the CPU kernels' threads (default 0: every core); --cpu-weights bf16|q8|q4|q4k: the
CPU backend's matrices in bf16, 8-bit or 4-bit blocks (q4k: Q4_K-style sub-block scales) (weight bytes count them so; auto, the default: as stored, bf16 and a GGUF file's quantized blocks on the dot-product kernels, f16 on the packed f16 kernel where bf16 takes AVX2's FMAs; stored: as stored, the widening kernels); --cpu-gemm: auto (AMX
tiles for bf16 weights where the CPU has them, else VDPBF16PS with AVX512_BF16, else FMAs with AVX2; q8, q4, q4k and a GGUF file's quantized blocks on TDPBSUD with
AMX-INT8, else VPDPBUSD with AVX512_VNNI, else AVX-VNNI, else VPMADDUBSW with AVX2; on Arm SMMLA, else SDOT), avx512vnni (the int8 formats on VPDPBUSD where
AMX-INT8 is there too), avxvnni or avx2 (as auto,
the int8 formats on that 256-bit path, to compare the paths on one CPU), armdot (the int8 formats on SDOT where SMMLA is there too), these four with bf16 off AMX tiles (avx512vnni and armdot on VDPBF16PS or BFMMLA where the CPU has it, else AVX2's FMAs; avxvnni and avx2 on AVX2's FMAs, to compare), simd (the widening kernels only), openblas (every fp32 GEMM through OpenBLAS, as before
the small-row kernel; as simd for the other formats), for baselines in the same run (docs/cpu.md); the report names each format's
path on this CPU ("cpu_gemm_paths"). Copy bandwidth: Backend::CopyBandwidth of --copy-bytes buffers (default 256 MiB; read +
written bytes per second). Decode: B slots at position L (constant state: 256 real tokens, or a
sliding window's W if larger, then the position set to L; a KV cache: L random rows in every slot, refused on the cpu backend above 4 GB;
other growing state: L real tokens prefilled, refused on the cpu backend above 1e12 multiply-adds),
3 warm-up steps, then N timed steps (default 32) of one token per slot ending in a greedy draw, each
timed through Synchronize(); tokens/s = B / median step time. --batch and --context take
comma-separated lists: one report per pair on one model (with --json, one JSON object per line); the
prefill figure comes with the first.
  bytes per step = weight bytes + sum over slots of (state read + state written)
    state read    = the slot's BytesInUse() before the step (fixed state + KV cache)
    state written = StateBytesPerSlot() + what the step appended (a KV row)
so 2 x state bytes per slot for constant state; KV cache + one row for softmax; a sliding window's
ring counts as read up to the tokens it holds and as written one row. Bandwidth = bytes per
step / median step time, also as a fraction of the copy bandwidth. Prefill: one slot, N tokens
(default 2048; 0 skips; a list measures each length) in chunks of C (default 512), after one untimed
chunk; on the GPU also layer 0's attention alone over the prompt as one segment. --cuda-weights f32:
the CUDA backend in fp32 (the reference precision; default bf16); --cuda-kv f32: softmax's KV cache
in fp32 (default bf16, as serving stacks keep it). --verify-rows K: after decode, slot 0's
speculative verify step of K tokens (docs/speculative.md) with every draft accepted and with every
draft rejected (the state rolled back, one row replayed), against its plain one-token step measured
alongside: the medians of N steps and their ratios (the CPU backend).
)",
          {.with_value = FlagUnion({{"model", "config", "preset", "batch", "context", "steps", "prefill-tokens", "prefill-chunk", "copy-bytes", "seed", "verify-rows"}, kMechanismFlags, kDeviceFlags, kCudaFlags}), .switches = {"json"}}, RunBench};
}

}  // namespace steady
