#include "model/model_flags.h"

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "model/load.h"

namespace steady {

const std::set<std::string> kMechanismFlags = {"mechanism", "order", "param", "scale"};
const std::set<std::string> kSamplingFlags = {"temperature", "top-k", "top-p", "repetition-penalty", "seed"};
const std::set<std::string> kSpeculationFlags = {"speculative", "draft-tokens", "draft-model"};
const std::set<std::string> kDeviceFlags = {"device", "threads", "cpu-weights", "cpu-gemm"};
const std::set<std::string> kCudaFlags = {"cuda-weights", "cuda-kv"};

absl::StatusOr<std::optional<MechanismOverride>> MechanismOverrideFromFlags(const Flags& flags) {
  if (!flags.Has("mechanism")) {
    for (const char* f : {"order", "param", "scale"}) {
      if (flags.Has(f)) return absl::InvalidArgumentError(absl::StrCat("--", f, " needs --mechanism"));
    }
    return std::optional<MechanismOverride>();
  }
  MechanismOverride o;
  o.mechanism = flags.Get("mechanism");
  if (flags.Has("order")) {
    auto order = flags.GetInt("order", 0, -1000000, 1000000);
    if (!order.ok()) return order.status();
    o.params["order"] = *order;
  }
  if (flags.Has("scale")) {
    auto scale = flags.GetDouble("scale", 0);
    if (!scale.ok()) return scale.status();
    o.params["scale"] = *scale;
  }
  for (const std::string& kv : flags.GetAll("param")) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(absl::StrCat("--param: expected key=value, got \"", kv, "\""));
    }
    // JSON values (numbers, true/false, quoted strings); anything else is taken as a plain string.
    nlohmann::json v = nlohmann::json::parse(kv.substr(eq + 1), nullptr, false);
    o.params[kv.substr(0, eq)] = v.is_discarded() ? nlohmann::json(kv.substr(eq + 1)) : v;
  }
  return std::optional<MechanismOverride>(o);
}

absl::Status SpeculationFromFlags(const Flags& flags, Speculation* mode, int* draft_tokens) {
  const std::string name = flags.Get("speculative", "off");
  if (name == "off") {
    *mode = Speculation::kOff;
  } else if (name == "ngram") {
    *mode = Speculation::kNgram;
  } else if (name == "draft") {
    *mode = Speculation::kDraft;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--speculative: expected off, ngram or draft, got \"", name, "\""));
  }
  if ((*mode == Speculation::kDraft) != flags.Has("draft-model")) {
    return absl::InvalidArgumentError("--speculative draft and --draft-model DIR go together");
  }
  auto k = flags.GetInt("draft-tokens", 4, 1, kMaxDraftTokens);
  if (!k.ok()) return k.status();
  *draft_tokens = int(*k);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Model>> LoadDraftModelFromFlags(const Flags& flags, const Tokenizer& target_tokenizer) {
  if (!flags.Has("draft-model")) return std::unique_ptr<Model>();
  const std::string path = flags.Get("draft-model");
  auto model = LoadModel(path);
  if (!model.ok()) return model.status();
  auto tokenizer = LoadTokenizer(path);
  if (!tokenizer.ok()) return tokenizer.status();
  if (absl::Status s = CheckSameTokenizer(target_tokenizer, **tokenizer); !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": ", s.message()));
  }
  return std::make_unique<Model>(*std::move(model));
}

absl::StatusOr<SamplingParams> SamplingFromFlags(const Flags& flags) {
  SamplingParams p;
  auto temperature = flags.GetDouble("temperature", 0.0);
  auto top_k = flags.GetInt("top-k", 0, 0, 1 << 30);
  auto top_p = flags.GetDouble("top-p", 1.0);
  auto penalty = flags.GetDouble("repetition-penalty", 1.0);
  auto seed = flags.GetInt("seed", 0, 0, INT64_MAX);
  if (absl::Status s = FirstError({temperature.status(), top_k.status(), top_p.status(), penalty.status(),
                                   seed.status()});
      !s.ok()) {
    return s;
  }
  p.temperature = float(*temperature);
  p.top_k = int(*top_k);
  p.top_p = float(*top_p);
  p.repetition_penalty = float(*penalty);
  p.seed = uint64_t(*seed);
  if (absl::Status s = ValidateSamplingParams(p); !s.ok()) return s;
  return p;
}

SamplingParams WithGenerationDefaults(const Flags& flags, const GenerationDefaults& defaults, SamplingParams p) {
  if (!flags.Has("temperature") && defaults.temperature) p.temperature = *defaults.temperature;
  if (!flags.Has("top-k") && defaults.top_k) p.top_k = *defaults.top_k;
  if (!flags.Has("top-p") && defaults.top_p) p.top_p = *defaults.top_p;
  if (!flags.Has("repetition-penalty") && defaults.repetition_penalty) p.repetition_penalty = *defaults.repetition_penalty;
  return p;
}

absl::Status CpuOptionsFromFlags(const Flags& flags, BackendOptions* options) {
  auto threads = flags.GetInt("threads", 0, 0, 4096);
  if (!threads.ok()) return threads.status();
  auto weights = ParseCpuWeights(flags.Get("cpu-weights", "auto"));
  if (!weights.ok()) return weights.status();
  auto gemm = ParseCpuGemm(flags.Get("cpu-gemm", "auto"));
  if (!gemm.ok()) return gemm.status();
  if (absl::Status s = CpuGemmAvailable(*gemm); !s.ok()) return s;
  options->cpu_threads = int(*threads);
  options->cpu_weights = *weights;
  options->cpu_gemm = *gemm;
  return absl::OkStatus();
}

absl::Status CudaOptionsFromFlags(const Flags& flags, BackendOptions* options) {
  for (const char* name : {"cuda-weights", "cuda-kv"}) {
    const std::string value = flags.Get(name, "bf16");
    if (value != "bf16" && value != "f32") {
      return absl::InvalidArgumentError(absl::StrCat("--", name, ": expected bf16 or f32, got \"", value, "\""));
    }
  }
  options->cuda_bf16 = flags.Get("cuda-weights", "bf16") == "bf16";
  options->cuda_kv_bf16 = flags.Get("cuda-kv", "bf16") == "bf16";
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Backend>> BackendFromFlags(const Flags& flags, const Model& model,
                                                          const BackendOptions& options) {
  BackendOptions o = options;
  if (absl::Status s = CpuOptionsFromFlags(flags, &o); !s.ok()) return s;
  if (absl::Status s = CudaOptionsFromFlags(flags, &o); !s.ok()) return s;
  return MakeBackend(model, flags.Get("device", "auto"), o);
}

}  // namespace steady
