#include "model/checkpoint/hf_config.h"

#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/checkpoint/config_keys.h"

namespace steady::hf_config {
namespace {

using config_keys::Has;
using config_keys::ReadBool;
using config_keys::ReadDouble;
using config_keys::ReadInt;
using nlohmann::json;

constexpr int64_t kMaxPositions = int64_t(1) << 40;

absl::Status Invalid(const std::string& file, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(file, ": ", what));
}

// Keeps a key's value for ModelConfig::ToJson.
void Keep(const json& j, const char* key, ModelConfig* c) {
  if (j.contains(key)) c->hf_keys[key] = j.at(key);
}

// yarn's attention scale for a context `scale` times the pretraining one (Hugging Face's get_mscale).
double YarnMscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

absl::Status ReadScaling(const json& s, const std::string& file, const std::string& key, ModelConfig* c) {
  if (!s.is_object()) return Invalid(file, absl::StrCat("\"", key, "\" must be an object"));
  static const std::set<std::string> kKnown = {
      "rope_type", "type", "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings",
      "attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "truncate", "rope_theta",
      "partial_rotary_factor"};
  for (const auto& [k, v] : s.items()) {
    if (!kKnown.count(k)) {
      return Invalid(file, absl::StrCat(key, ".", k, ": not a key of the RoPE scalings Steady implements (",
                                        absl::StrJoin(kKnown, ", "), ")"));
    }
  }
  const std::string where = file + ": " + key;
  RopeScaling& r = c->rope_scaling;
  const char* type_key = Has(s, "rope_type") ? "rope_type" : "type";
  if (Has(s, type_key)) {
    if (!s.at(type_key).is_string()) return Invalid(file, absl::StrCat(key, ".", type_key, " must be a string"));
    r.type = s.at(type_key).get<std::string>();
  }
  if (r.type != "default" && r.type != "linear" && r.type != "dynamic" && r.type != "llama3" && r.type != "yarn") {
    return Invalid(file, absl::StrCat(key, ".", type_key, " \"", r.type,
                                      "\" is not supported (default, linear, dynamic, llama3, yarn)"));
  }
  if (Has(s, "partial_rotary_factor") && (!s.at("partial_rotary_factor").is_number() ||
                                          s.at("partial_rotary_factor").get<double>() != 1.0)) {
    return Invalid(file, absl::StrCat(key, ".partial_rotary_factor: only 1 (RoPE on the whole head) is supported"));
  }
  if (r.type == "default") return absl::OkStatus();
  if (!Has(s, "factor")) return Invalid(file, absl::StrCat(key, ": rope type \"", r.type, "\" needs \"factor\""));
  if (absl::Status st = ReadDouble(s, where, "factor", 1e-6, 1e6, &r.factor); !st.ok()) return st;
  if (absl::Status st = ReadInt(s, where, "original_max_position_embeddings", r.type == "llama3", 1, kMaxPositions,
                                &r.original_max_position_embeddings);
      !st.ok()) {
    return st;
  }
  if (r.original_max_position_embeddings == 0) r.original_max_position_embeddings = c->max_position_embeddings;
  if (r.type == "linear") return absl::OkStatus();
  if (r.original_max_position_embeddings == 0) {
    return Invalid(file, absl::StrCat(key, ": rope type \"", r.type,
                                      "\" needs original_max_position_embeddings or max_position_embeddings"));
  }
  if (r.type == "dynamic" && c->head_dim <= 2) {
    return Invalid(file, absl::StrCat(key, ": dynamic NTK scaling needs a head_dim above 2, got ", c->head_dim));
  }
  if (r.type == "llama3") {
    for (const char* k : {"low_freq_factor", "high_freq_factor"}) {
      if (!Has(s, k)) return Invalid(file, absl::StrCat(key, ": rope type \"llama3\" needs \"", k, "\""));
    }
    if (absl::Status st = ReadDouble(s, where, "low_freq_factor", 1e-6, 1e6, &r.low_freq_factor); !st.ok()) return st;
    if (absl::Status st = ReadDouble(s, where, "high_freq_factor", 1e-6, 1e6, &r.high_freq_factor); !st.ok()) return st;
    if (r.high_freq_factor <= r.low_freq_factor) {
      return Invalid(file, absl::StrCat(key, ": high_freq_factor ", r.high_freq_factor,
                                        " must be above low_freq_factor ", r.low_freq_factor));
    }
  }
  if (r.type == "yarn") {
    // Hugging Face reads beta_fast/beta_slow with `or`: 0 and null take the default too.
    for (auto [k, out] : {std::pair{"beta_fast", &r.beta_fast}, {"beta_slow", &r.beta_slow}}) {
      double v = 0;
      if (absl::Status st = ReadDouble(s, where, k, 0, 1e6, &v); !st.ok()) return st;
      if (v != 0) *out = v;
    }
    if (absl::Status st = ReadBool(s, where, "truncate", &r.truncate); !st.ok()) return st;
    // Values Hugging Face only warns about, refused here: each makes the correction range or the
    // extension mean something other than what the config says.
    if (r.factor < 1) {
      return Invalid(file, absl::StrCat(key, ".factor: yarn extends the context, so it must be >= 1, got ", r.factor));
    }
    if (r.beta_fast < r.beta_slow) {
      return Invalid(file, absl::StrCat(key, ".beta_fast ", r.beta_fast, " must not be below ", key, ".beta_slow ",
                                        r.beta_slow, " (the correction range would be reversed)"));
    }
    if (c->max_position_embeddings > 0 && r.original_max_position_embeddings > c->max_position_embeddings) {
      return Invalid(file, absl::StrCat(key, ".original_max_position_embeddings ", r.original_max_position_embeddings,
                                        " is above max_position_embeddings ", c->max_position_embeddings,
                                        ": the context before yarn cannot be longer than the model's"));
    }
    if (Has(s, "attention_factor")) {
      if (absl::Status st = ReadDouble(s, where, "attention_factor", 1e-6, 1e6, &r.attention_factor); !st.ok()) {
        return st;
      }
    } else {
      double mscale = 0, mscale_all_dim = 0;
      if (absl::Status st = ReadDouble(s, where, "mscale", 0, 1e6, &mscale); !st.ok()) return st;
      if (absl::Status st = ReadDouble(s, where, "mscale_all_dim", 0, 1e6, &mscale_all_dim); !st.ok()) return st;
      r.attention_factor = mscale != 0 && mscale_all_dim != 0
                               ? YarnMscale(r.factor, mscale) / YarnMscale(r.factor, mscale_all_dim)
                               : YarnMscale(r.factor, 1.0);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadArchitecture(const json& j, const std::string& file, ModelConfig* c) {
  if (Has(j, "model_type")) {
    if (!j.at("model_type").is_string()) return Invalid(file, "\"model_type\" must be a string");
    c->model_type = j.at("model_type").get<std::string>();
  }
  const std::string& t = c->model_type;
  if (t != "llama" && t != "mistral" && t != "qwen2" && t != "qwen3") {
    return Invalid(file, absl::StrCat("model_type \"", t,
                                      "\" is not supported (Steady computes llama, mistral, qwen2 and qwen3)"));
  }
  if (Has(j, "hidden_act") && j.at("hidden_act") != "silu") {
    return Invalid(file, absl::StrCat("hidden_act ", j.at("hidden_act").dump(),
                                      " is not supported (the MLP is SwiGLU: silu only)"));
  }
  if (Has(j, "partial_rotary_factor") &&
      (!j.at("partial_rotary_factor").is_number() || j.at("partial_rotary_factor").get<double>() != 1.0)) {
    return Invalid(file, "partial_rotary_factor: only 1 (RoPE on the whole head) is supported");
  }
  if (Has(j, "quantization_config")) {
    return Invalid(file, "quantization_config: quantized checkpoints (GPTQ, AWQ, bitsandbytes, ...) are not "
                         "supported; serve the unquantized weights (--cpu-weights q8 quantizes at load)");
  }
  // What Hugging Face's modeling code for each type reads: Llama and Qwen3 put attention_bias on
  // q, k, v and o; Qwen2 always has q/k/v biases and no o bias; only Llama has mlp_bias; Mistral
  // has neither. Keys a type's code does not read are ignored, as Hugging Face ignores them.
  bool attention_bias = false, mlp_bias = false;
  if (absl::Status s = ReadBool(j, file, "attention_bias", &attention_bias); !s.ok()) return s;
  if (absl::Status s = ReadBool(j, file, "mlp_bias", &mlp_bias); !s.ok()) return s;
  if (t == "llama" || t == "qwen3") c->qkv_bias = c->o_bias = attention_bias;
  if (t == "llama") c->mlp_bias = mlp_bias;
  if (t == "qwen2") c->qkv_bias = true;
  if (t == "qwen3") c->qk_norm = true;
  Keep(j, "attention_bias", c);
  Keep(j, "mlp_bias", c);
  return absl::OkStatus();
}

absl::Status ReadRope(const json& j, const std::string& file, ModelConfig* c) {
  if (absl::Status s = ReadInt(j, file, "max_position_embeddings", false, 1, kMaxPositions, &c->max_position_embeddings);
      !s.ok()) {
    return s;
  }
  // transformers 5 writes rope_parameters (with rope_theta inside); earlier versions rope_scaling.
  const char* key = Has(j, "rope_parameters") ? "rope_parameters" : "rope_scaling";
  const bool has_theta = Has(j, "rope_theta");
  if (has_theta) {
    if (absl::Status s = ReadDouble(j, file, "rope_theta", 1.0, 1e12, &c->rope_theta); !s.ok()) return s;
  } else if (Has(j, key) && j.at(key).is_object() && Has(j.at(key), "rope_theta")) {
    if (absl::Status s = ReadDouble(j.at(key), file + ": " + key, "rope_theta", 1.0, 1e12, &c->rope_theta); !s.ok()) {
      return s;
    }
  } else {
    c->rope_theta = j.contains("attention") ? 0.0 : 10000.0;
  }
  if (!Has(j, key)) return absl::OkStatus();
  Keep(j, key, c);
  if (c->rope_theta == 0) return Invalid(file, absl::StrCat("\"", key, "\" scales RoPE, but there is no rope_theta"));
  return ReadScaling(j.at(key), file, key, c);
}

absl::StatusOr<std::vector<int>> WindowLayers(const json& j, const std::string& file, ModelConfig* c) {
  std::vector<int> window(c->num_layers, 0);
  const std::string& t = c->model_type;
  if (t != "mistral" && t != "qwen2" && t != "qwen3") return window;
  for (const char* k : {"sliding_window", "use_sliding_window", "max_window_layers", "layer_types"}) Keep(j, k, c);
  // Validates the layer types even where no window applies, so a typo does not pass silently.
  std::vector<bool> sliding(c->num_layers, t == "mistral");
  if (t != "mistral") {
    int first = 28;  // Qwen2Config's and Qwen3Config's default max_window_layers
    if (absl::Status s = ReadInt(j, file, "max_window_layers", false, 0, 1 << 20, &first); !s.ok()) return s;
    for (int l = 0; l < c->num_layers; ++l) sliding[l] = l >= first;
    if (Has(j, "layer_types")) {
      const json& types = j.at("layer_types");
      if (!types.is_array() || int(types.size()) != c->num_layers) {
        return Invalid(file, absl::StrCat("layer_types must list one type for each of the ", c->num_layers, " layers"));
      }
      for (int l = 0; l < c->num_layers; ++l) {
        if (types[l] != "full_attention" && types[l] != "sliding_attention") {
          return Invalid(file, absl::StrCat("layer_types[", l, "] = ", types[l].dump(),
                                            " is not \"full_attention\" or \"sliding_attention\""));
        }
        sliding[l] = types[l] == "sliding_attention";
      }
    }
    bool use = false;
    if (absl::Status s = ReadBool(j, file, "use_sliding_window", &use); !s.ok()) return s;
    if (!use) return window;  // Hugging Face sets sliding_window to None then: no layer slides
  }
  if (!Has(j, "sliding_window")) return window;
  int w = 0;
  if (absl::Status s = ReadInt(j, file, "sliding_window", true, 0, 1 << 30, &w); !s.ok()) return s;
  if (w == 0) {
    return Invalid(file, "\"sliding_window\" = 0: a window holds at least one position (null means no window)");
  }
  for (int l = 0; l < c->num_layers; ++l) window[l] = sliding[l] ? w : 0;
  return window;
}

}  // namespace steady::hf_config
