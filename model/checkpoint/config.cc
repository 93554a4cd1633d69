#include "model/checkpoint/config.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace steady {
namespace {

// Reads a positive integer key; `required` keys must be present.
absl::Status ReadInt(const nlohmann::json& j, const std::string& file, const char* key, bool required,
                     int64_t lo, int64_t hi, int* out) {
  if (!j.contains(key) || j.at(key).is_null()) {
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
  *out = int(x);
  return absl::OkStatus();
}

absl::Status ReadDouble(const nlohmann::json& j, const std::string& file, const char* key, double lo,
                        double hi, double* out) {
  if (!j.contains(key) || j.at(key).is_null()) return absl::OkStatus();
  const nlohmann::json& v = j.at(key);
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < lo || v.get<double>() > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": \"", key, "\" must be a finite number in [", lo, ", ", hi, "], got ", v.dump()));
  }
  *out = v.get<double>();
  return absl::OkStatus();
}

absl::Status ReadBool(const nlohmann::json& j, const std::string& file, const char* key, bool* out) {
  if (!j.contains(key) || j.at(key).is_null()) return absl::OkStatus();
  if (!j.at(key).is_boolean()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": \"", key, "\" must be true or false"));
  }
  *out = j.at(key).get<bool>();
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
  check(ReadDouble(j, file, "rope_theta", 1.0, 1e12, &c.rope_theta));
  check(ReadBool(j, file, "tie_word_embeddings", &c.tie_word_embeddings));
  check(ReadBool(j, file, "qk_norm", &c.qk_norm));
  check(ReadInt(j, file, "bos_token_id", false, 0, kMax, &c.bos_token_id));
  if (j.contains("eos_token_id") && j.at("eos_token_id").is_array()) {
    // Llama 3 style: several ids end generation; the first is the canonical one.
    for (const nlohmann::json& id : j.at("eos_token_id")) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kMax) {
        return absl::InvalidArgumentError(
            absl::StrCat(file, ": \"eos_token_id\" list entries must be non-negative integers, got ", id.dump()));
      }
      c.eos_token_ids.push_back(int(id.get<int64_t>()));
    }
    if (!c.eos_token_ids.empty()) c.eos_token_id = c.eos_token_ids[0];
  } else {
    check(ReadInt(j, file, "eos_token_id", false, 0, kMax, &c.eos_token_id));
    if (c.eos_token_id >= 0) c.eos_token_ids = {c.eos_token_id};
  }
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
  std::vector<int> special = c.eos_token_ids;
  special.push_back(c.bos_token_id);
  for (int id : special) {
    if (id >= c.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": special token id ", id, " is not below vocab_size ", c.vocab_size));
    }
  }

  if (j.contains("chat_template")) {
    auto t = ParseChatTemplate(j.at("chat_template"), file + ": chat_template");
    if (!t.ok()) return t.status();
    c.chat_template = *std::move(t);
    c.has_chat_template = true;
  }

  AttentionConfig base;
  if (j.contains("attention")) {
    auto a = ReadAttention(j.at("attention"), file + ": attention", base);
    if (!a.ok()) return a.status();
    base = *a;
  }
  c.layer_attention.assign(c.num_layers, base);
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
  nlohmann::json j = {{"architectures", {"LlamaForCausalLM"}},
                      {"model_type", "llama"},
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
