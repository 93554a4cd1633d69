#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "tools/steady/commands.h"

namespace steady {
namespace {

// Shapes for random checkpoints. "tiny" matches the scale of the shipped models; "llama1b" is the
// ~1B-parameter Llama-like shape used by benchmarks.
absl::StatusOr<nlohmann::json> Preset(const std::string& name) {
  if (name == "tiny") {
    return nlohmann::json{{"vocab_size", 512},          {"hidden_size", 128}, {"intermediate_size", 384},
                          {"num_hidden_layers", 4},     {"num_attention_heads", 8}, {"num_key_value_heads", 4},
                          {"head_dim", 16},             {"rms_norm_eps", 1e-5}, {"rope_theta", 10000.0},
                          {"tie_word_embeddings", true}, {"qk_norm", true},   {"bos_token_id", 1},
                          {"eos_token_id", 2}};
  }
  if (name == "llama1b") {
    return nlohmann::json{{"vocab_size", 32000},          {"hidden_size", 2048}, {"intermediate_size", 5632},
                          {"num_hidden_layers", 16},      {"num_attention_heads", 32}, {"num_key_value_heads", 8},
                          {"head_dim", 64},               {"rms_norm_eps", 1e-5}, {"rope_theta", 10000.0},
                          {"tie_word_embeddings", false}, {"bos_token_id", 1},   {"eos_token_id", 2}};
  }
  return absl::InvalidArgumentError(absl::StrCat("--preset: unknown preset \"", name, "\" (tiny, llama1b)"));
}

absl::StatusOr<DType> ParseDType(const std::string& s) {
  if (s == "f32") return DType::kF32;
  if (s == "f16") return DType::kF16;
  if (s == "bf16") return DType::kBF16;
  return absl::InvalidArgumentError(absl::StrCat("--dtype: expected f32, f16 or bf16, got \"", s, "\""));
}

}  // namespace

absl::StatusOr<ModelConfig> ConfigFromFlags(const Flags& flags) {
  if (flags.Has("config") && flags.Has("preset")) {
    return absl::InvalidArgumentError("--config and --preset both name a shape; give one");
  }
  nlohmann::json config_json;
  if (flags.Has("config")) {
    std::ifstream in(flags.Get("config"));
    if (!in) return absl::NotFoundError(absl::StrCat(flags.Get("config"), ": cannot open"));
    std::stringstream ss;
    ss << in.rdbuf();
    config_json = nlohmann::json::parse(ss.str(), nullptr, false);
    if (config_json.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(flags.Get("config"), ": not valid JSON"));
  } else {
    auto preset = Preset(flags.Get("preset", "tiny"));
    if (!preset.ok()) return preset.status();
    config_json = *preset;
  }
  auto config = ParseModelConfig(config_json.dump(), flags.Get("config", "preset " + flags.Get("preset", "tiny")));
  if (!config.ok()) return config.status();
  auto override = MechanismOverrideFromFlags(flags);
  if (!override.ok()) return override.status();
  if (*override) OverrideMechanism((*override)->mechanism, (*override)->params, &*config);
  return config;
}

namespace {

absl::Status RunInit(const Flags& flags) {
  auto out = flags.Require("out");
  auto seed = flags.GetInt("seed", 1, 0, INT64_MAX);
  auto dtype = ParseDType(flags.Get("dtype", "f32"));
  if (absl::Status s = FirstError({out.status(), seed.status(), dtype.status()}); !s.ok()) return s;
  auto config = ConfigFromFlags(flags);
  if (!config.ok()) return config.status();
  auto model = Model::Random(*config, uint64_t(*seed));
  if (!model.ok()) return model.status();
  if (absl::Status s = model->Save(*out, *dtype); !s.ok()) return s;
  const std::string tokenizer = flags.Get("tokenizer", "");
  if (!tokenizer.empty()) {
    std::error_code ec;
    std::filesystem::copy_file(tokenizer, std::filesystem::path(*out) / "tokenizer.model",
                               std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) return absl::InternalError(absl::StrCat(tokenizer, ": cannot copy into ", *out, ": ", ec.message()));
  }
  std::printf("wrote %s: %lld parameters, mechanism %s, %zu state bytes per session\n", out->c_str(),
              static_cast<long long>(model->ParameterCount()), config->layer_attention[0].mechanism.c_str(),
              model->StateFloats() * sizeof(float));
  return absl::OkStatus();
}

}  // namespace

Command InitCommand() {
  return {"init", R"(usage: steady init --out DIR [--config FILE | --preset tiny|llama1b] [--seed S] [--tokenizer FILE]
                   [--dtype f32|f16|bf16] [--mechanism NAME [--order P] [--scale S] [--param key=value ...]]

Writes a randomly initialised checkpoint (config.json, model.safetensors, tokenizer.model).
)",
          {.with_value = FlagUnion({{"out", "config", "preset", "seed", "tokenizer", "dtype"}, kMechanismFlags}), .switches = {}}, RunInit};
}

namespace {

absl::Status RunInfo(const Flags& flags) {
  nlohmann::json info;
  if (flags.Has("model")) {
    auto model = LoadModelFromFlags(flags);
    if (!model.ok()) return model.status();
    info = {{"config", model->config().ToJson()},
            {"parameters", model->ParameterCount()},
            {"attention", model->DescribeAttention()},
            {"state_bytes_per_session", model->StateFloats() * sizeof(float)},
            {"kv_cache_bytes_per_token", KvCacheFloatsPerToken(model->config()) * sizeof(float)}};
  } else {
    // Shape only (--preset / --config): sizes without loading or creating weights.
    auto config = ConfigFromFlags(flags);
    if (!config.ok()) return config.status();
    auto floats = SessionStateFloats(*config);
    if (!floats.ok()) return floats.status();
    info = {{"config", config->ToJson()},
            {"state_bytes_per_session", *floats * sizeof(float)},
            {"kv_cache_bytes_per_token", KvCacheFloatsPerToken(*config) * sizeof(float)}};
  }
  std::printf("%s\n", info.dump(2).c_str());
  return absl::OkStatus();
}

}  // namespace

Command InfoCommand() {
  return {"info", R"(usage: steady info (--model DIR|FILE.gguf | --preset tiny|llama1b | --config FILE)
                   [--mechanism NAME [--order P] [--scale S] [--param key=value ...]]

Prints the shape, mechanism, parameters and state bytes per session (and KV-cache bytes per token
for softmax layers) as JSON; with --preset/--config, sizes only, no weights.
)",
          {.with_value = FlagUnion({{"model", "config", "preset"}, kMechanismFlags}), .switches = {}}, RunInfo};
}

}  // namespace steady
