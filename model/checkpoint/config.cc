#include "model/checkpoint/config.h"

#include <cmath>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/checkpoint/config_keys.h"
#include "model/checkpoint/hf_config.h"

namespace steady {
namespace config_keys {

absl::Status ReadInt(const nlohmann::json& j, const std::string& file, const char* key, bool required, int64_t lo,
                     int64_t hi, int64_t* out) {
  if (!Has(j, key)) {
    if (required) return absl::InvalidArgumentError(absl::StrCat(file, ": missing required key \"", key, "\""));
    return absl::OkStatus();
  }
  const nlohmann::json& v = j.at(key);
  if (!v.is_number_integer()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": \"", key, "\" must be an integer, got ", v.dump()));
  }
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": \"", key, "\" = ", x, " is out of range [", lo, ", ", hi, "]"));
  }
  *out = x;
  return absl::OkStatus();
}

absl::Status ReadInt(const nlohmann::json& j, const std::string& file, const char* key, bool required, int64_t lo,
                     int64_t hi, int* out) {
  int64_t x = *out;
  absl::Status s = ReadInt(j, file, key, required, lo, hi, &x);
  *out = int(x);
  return s;
}

absl::Status ReadDouble(const nlohmann::json& j, const std::string& file, const char* key, double lo, double hi,
                        double* out) {
  if (!Has(j, key)) return absl::OkStatus();
  const nlohmann::json& v = j.at(key);
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < lo || v.get<double>() > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": \"", key, "\" must be a finite number in [", lo, ", ", hi, "], got ", v.dump()));
  }
  *out = v.get<double>();
  return absl::OkStatus();
}

absl::Status ReadBool(const nlohmann::json& j, const std::string& file, const char* key, bool* out) {
  if (!Has(j, key)) return absl::OkStatus();
  if (!j.at(key).is_boolean()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": \"", key, "\" must be true or false"));
  }
  *out = j.at(key).get<bool>();
  return absl::OkStatus();
}

absl::Status ReadIds(const nlohmann::json& j, const std::string& file, const char* key, std::vector<int>* ids) {
  if (!Has(j, key)) return absl::OkStatus();
  constexpr int64_t kMax = int64_t(1) << 30;
  if (!j.at(key).is_array()) {
    int id = 0;
    if (absl::Status s = ReadInt(j, file, key, true, 0, kMax, &id); !s.ok()) return s;
    *ids = {id};
    return absl::OkStatus();
  }
  // Llama 3 style: several ids end generation; the first is the canonical one.
  ids->clear();
  for (const nlohmann::json& id : j.at(key)) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kMax) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": \"", key, "\" list entries must be non-negative integers, got ", id.dump()));
    }
    ids->push_back(int(id.get<int64_t>()));
  }
  return absl::OkStatus();
}

}  // namespace config_keys

namespace {

using config_keys::ReadBool;
using config_keys::ReadDouble;
using config_keys::ReadIds;
using config_keys::ReadInt;

// Every id below vocab_size.
absl::Status CheckSpecialIds(const ModelConfig& c, const std::string& file) {
  std::vector<int> special = c.eos_token_ids;
  special.push_back(c.bos_token_id);
  for (int id : special) {
    if (id >= c.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": special token id ", id, " is not below vocab_size ", c.vocab_size));
    }
  }
  return absl::OkStatus();
}

// Splits an "attention" object into the mechanism name and its parameters.
absl::StatusOr<AttentionConfig> ReadAttention(const nlohmann::json& j, const std::string& where,
                                              const AttentionConfig& base) {
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(where, ": must be an object"));
  AttentionConfig a = base;
  if (j.contains("mechanism")) {
    if (!j.at("mechanism").is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".mechanism: must be a string"));
    }
    const std::string name = j.at("mechanism").get<std::string>();
    if (name != a.mechanism) a.params = nlohmann::json::object();  // new mechanism: fresh params
    a.mechanism = name;
  }
  for (const auto& [key, value] : j.items()) {
    if (key != "mechanism" && key != "layers") a.params[key] = value;
  }
  return a;
}

}  // namespace

absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text, const std::string& file) {
  nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(file, ": not valid JSON"));
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(file, ": top level must be an object"));

  ModelConfig c;
  constexpr int64_t kMax = int64_t(1) << 30;
  absl::Status s;
  auto check = [&](absl::Status st) {
    if (s.ok()) s = st;
  };
  check(ReadInt(j, file, "vocab_size", true, 1, kMax, &c.vocab_size));
  check(ReadInt(j, file, "hidden_size", true, 1, 1 << 20, &c.hidden_size));
  check(ReadInt(j, file, "intermediate_size", true, 1, 1 << 22, &c.intermediate_size));
  check(ReadInt(j, file, "num_hidden_layers", true, 1, 4096, &c.num_layers));
  check(ReadInt(j, file, "num_attention_heads", true, 1, 4096, &c.num_heads));
  c.num_kv_heads = c.num_heads;
  check(ReadInt(j, file, "num_key_value_heads", false, 1, 4096, &c.num_kv_heads));
  if (s.ok() && c.hidden_size % c.num_heads == 0) c.head_dim = c.hidden_size / c.num_heads;
  check(ReadInt(j, file, "head_dim", false, 1, 4096, &c.head_dim));
  check(ReadDouble(j, file, "rms_norm_eps", 1e-12, 1.0, &c.rms_norm_eps));
  check(ReadBool(j, file, "tie_word_embeddings", &c.tie_word_embeddings));
  check(ReadBool(j, file, "qk_norm", &c.qk_norm));
  check(ReadInt(j, file, "bos_token_id", false, 0, kMax, &c.bos_token_id));
  check(ReadIds(j, file, "eos_token_id", &c.eos_token_ids));
  if (!c.eos_token_ids.empty()) c.eos_token_id = c.eos_token_ids[0];
  check(hf_config::ReadArchitecture(j, file, &c));
  check(hf_config::ReadRope(j, file, &c));
  if (!s.ok()) return s;
  if (c.head_dim == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": hidden_size ", c.hidden_size, " is not divisible by num_attention_heads ",
                     c.num_heads, " and no head_dim is given"));
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": num_attention_heads ", c.num_heads,
                                                   " is not a multiple of num_key_value_heads ",
                                                   c.num_kv_heads));
  }
  if (c.rope_theta > 0 && c.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": RoPE needs an even head_dim, got ", c.head_dim));
  }
  if (absl::Status st = CheckSpecialIds(c, file); !st.ok()) return st;

  if (j.contains("chat_template")) {
    auto t = ParseChatTemplate(j.at("chat_template"), file + ": chat_template");
    if (!t.ok()) return t.status();
    c.chat_template = *std::move(t);
    c.has_chat_template = true;
  }

  // The architecture's own choice per layer (sliding windows), unless Steady's "attention" object
  // says what every layer computes.
  auto windows = hf_config::WindowLayers(j, file, &c);
  if (!windows.ok()) return windows.status();
  AttentionConfig base;
  c.layer_attention.assign(c.num_layers, base);
  for (int l = 0; l < c.num_layers; ++l) {
    if ((*windows)[l] > 0) {
      c.layer_attention[l].mechanism = kSlidingWindowMechanism;
      c.layer_attention[l].params = {{kSlidingWindowKey, (*windows)[l]}};
    }
  }
  if (j.contains("attention")) {
    auto a = ReadAttention(j.at("attention"), file + ": attention", base);
    if (!a.ok()) return a.status();
    base = *a;
    c.layer_attention.assign(c.num_layers, base);
  }
  if (j.contains("attention") && j.at("attention").contains("layers")) {
    const nlohmann::json& layers = j.at("attention").at("layers");
    if (!layers.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": attention.layers must be an object keyed by layer index"));
    }
    for (const auto& [key, value] : layers.items()) {
      int index = -1;
      if (key.empty() || key.size() > 5 || key.find_first_not_of("0123456789") != std::string::npos ||
          (index = std::stoi(key)) >= c.num_layers) {
        return absl::InvalidArgumentError(absl::StrCat(file, ": attention.layers: \"", key,
                                                       "\" is not a layer index below ", c.num_layers));
      }
      auto a = ReadAttention(value, absl::StrCat(file, ": attention.layers.", key), base);
      if (!a.ok()) return a.status();
      c.layer_attention[index] = *a;
    }
  }
  return c;
}

nlohmann::json ModelConfig::ToJson() const {
  static const std::map<std::string, std::string> kArchitecture = {{"llama", "LlamaForCausalLM"},
                                                                   {"mistral", "MistralForCausalLM"},
                                                                   {"qwen2", "Qwen2ForCausalLM"},
                                                                   {"qwen3", "Qwen3ForCausalLM"}};
  const auto arch = kArchitecture.find(model_type);
  nlohmann::json j = {{"architectures", {arch == kArchitecture.end() ? "LlamaForCausalLM" : arch->second}},
                      {"model_type", model_type},
                      {"vocab_size", vocab_size},
                      {"hidden_size", hidden_size},
                      {"intermediate_size", intermediate_size},
                      {"num_hidden_layers", num_layers},
                      {"num_attention_heads", num_heads},
                      {"num_key_value_heads", num_kv_heads},
                      {"head_dim", head_dim},
                      {"rms_norm_eps", rms_norm_eps},
                      {"tie_word_embeddings", tie_word_embeddings},
                      {"qk_norm", qk_norm}};
  if (rope_theta > 0) j["rope_theta"] = rope_theta;
  if (max_position_embeddings > 0) j["max_position_embeddings"] = max_position_embeddings;
  for (const auto& [key, value] : hf_keys.items()) j[key] = value;
  if (bos_token_id >= 0) j["bos_token_id"] = bos_token_id;
  if (eos_token_ids.size() > 1) {
    j["eos_token_id"] = eos_token_ids;
  } else if (eos_token_id >= 0) {
    j["eos_token_id"] = eos_token_id;
  }
  if (has_chat_template) j["chat_template"] = chat_template.ToJson();
  if (!layer_attention.empty()) {
    nlohmann::json a = layer_attention[0].params;
    a["mechanism"] = layer_attention[0].mechanism;
    nlohmann::json overrides = nlohmann::json::object();
    for (size_t l = 1; l < layer_attention.size(); ++l) {
      if (layer_attention[l].mechanism != layer_attention[0].mechanism ||
          layer_attention[l].params != layer_attention[0].params) {
        nlohmann::json o = layer_attention[l].params;
        o["mechanism"] = layer_attention[l].mechanism;
        overrides[std::to_string(l)] = o;
      }
    }
    if (!overrides.empty()) a["layers"] = overrides;
    j["attention"] = a;
  }
  return j;
}

absl::Status ParseGenerationConfig(std::string_view json_text, const std::string& file, ModelConfig* c) {
  nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(file, ": not valid JSON"));
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(file, ": top level must be an object"));
  ModelConfig next = *c;
  std::vector<int> eos;
  bool do_sample = false;
  double temperature = 1.0, top_p = 1.0, penalty = 1.0;
  int top_k = 50;  // Hugging Face's GenerationConfig defaults, for do_sample without the key
  int64_t max_new_tokens = 0;
  absl::Status s;
  auto check = [&](absl::Status st) {
    if (s.ok()) s = st;
  };
  check(ReadIds(j, file, "eos_token_id", &eos));
  check(ReadInt(j, file, "bos_token_id", false, 0, int64_t(1) << 30, &next.bos_token_id));
  check(ReadBool(j, file, "do_sample", &do_sample));
  check(ReadDouble(j, file, "temperature", 0.0, 100.0, &temperature));
  check(ReadDouble(j, file, "top_p", 0.0, 1.0, &top_p));
  check(ReadInt(j, file, "top_k", false, 0, int64_t(1) << 30, &top_k));
  check(ReadDouble(j, file, "repetition_penalty", 1e-6, 100.0, &penalty));
  check(ReadInt(j, file, "max_new_tokens", false, 0, int64_t(1) << 30, &max_new_tokens));
  if (!s.ok()) return s;
  if (config_keys::Has(j, "eos_token_id")) {
    next.eos_token_ids = eos;
    next.eos_token_id = eos.empty() ? -1 : eos[0];
  }
  if (absl::Status st = CheckSpecialIds(next, file); !st.ok()) return st;
  // Greedy unless do_sample; the repetition penalty applies either way (as in Hugging Face).
  if (do_sample) {
    next.generation.temperature = float(temperature);
    next.generation.top_k = top_k;
    next.generation.top_p = top_p == 0 ? 1.0f : float(top_p);
  }
  if (config_keys::Has(j, "repetition_penalty")) next.generation.repetition_penalty = float(penalty);
  if (config_keys::Has(j, "max_new_tokens")) next.generation.max_new_tokens = max_new_tokens;
  *c = std::move(next);
  return absl::OkStatus();
}

void OverrideMechanism(const std::string& mechanism, const nlohmann::json& params, ModelConfig* config) {
  for (AttentionConfig& a : config->layer_attention) {
    // Keep the logit scale the weights were trained with (for the mechanisms that have one: softmax,
    // taylor, dark, sliding_window); everything else comes from the override.
    nlohmann::json p = nlohmann::json::object();
    const bool has_scale =
        mechanism == "softmax" || mechanism == "taylor" || mechanism == "dark" || mechanism == "sliding_window";
    if (has_scale && a.params.contains("scale")) p["scale"] = a.params["scale"];
    for (const auto& [key, value] : params.items()) p[key] = value;
    a.mechanism = mechanism;
    a.params = p;
  }
}

}  // namespace steady
