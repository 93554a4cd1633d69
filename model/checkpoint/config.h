// Model configuration: config.json as Hugging Face writes it for the architectures Steady computes
// (model_type llama, mistral, qwen2, qwen3: model/checkpoint/hf_config.cc), plus Steady's
// "attention" object, and generation_config.json's defaults. Format: docs/checkpoint-format.md.
#ifndef STEADY_MODEL_CHECKPOINT_CONFIG_H_
#define STEADY_MODEL_CHECKPOINT_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "model/text/chat_template.h"

namespace steady {

// One layer's attention choice as written in config.json: the mechanism's name and its own keys
// (validated by the mechanism's ParseParams, see model/mechanisms/attention.h).
struct AttentionConfig {
  std::string mechanism = "softmax";
  nlohmann::json params = nlohmann::json::object();  // everything but "mechanism" and "layers"
};

// The mechanism a Hugging Face sliding-window layer (Mistral's `sliding_window`, Qwen2/Qwen3's
// `use_sliding_window`) maps to: softmax over the last `window` positions, the current one included
// (model/mechanisms/sliding_window.h).
inline constexpr char kSlidingWindowMechanism[] = "sliding_window";
inline constexpr char kSlidingWindowKey[] = "window";

// RoPE frequency scaling: config.json's "rope_scaling" (or transformers 5's "rope_parameters"), with
// Hugging Face's names and defaults. The frequencies themselves: model/decoder/rope.h.
struct RopeScaling {
  std::string type = "default";  // default, linear, dynamic, llama3, yarn
  double factor = 1.0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  // The pretraining context: llama3's wavelength bands, yarn's correction range, dynamic's threshold
  // (rope_scaling's key, else max_position_embeddings).
  int64_t original_max_position_embeddings = 0;
  double beta_fast = 32.0, beta_slow = 1.0;  // yarn
  bool truncate = true;                      // yarn: the correction range rounded outwards to integers
  double attention_factor = 1.0;             // yarn: cos and sin (so q and k) scaled by it
  // A GGUF file's rope_freqs tensor (llama.cpp's form of llama3 scaling): head_dim / 2 divisors, one
  // per frequency, applied after `type`'s scaling. Empty for every config.json.
  std::vector<double> freq_divisors;
};

// generation_config.json's sampling defaults, for requests that leave a value unset (nullopt:
// the file does not say, the request's or the engine's own default applies). do_sample false means
// greedy whatever the other keys say; true with a value absent means Hugging Face's default
// (temperature 1, top_k 50, top_p 1).
struct GenerationDefaults {
  std::optional<float> temperature;
  std::optional<int> top_k;
  std::optional<float> top_p;
  std::optional<float> repetition_penalty;
  std::optional<int64_t> max_new_tokens;  // tokens to generate (max_length, prompt included, is ignored)
};

struct ModelConfig {
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 0;  // 0: no RoPE (config.json without rope_theta)
  bool tie_word_embeddings = false;
  bool qk_norm = false;  // per-head RMSNorm of q and k (self_attn.q_norm / k_norm weights)
  // The architecture (config.json's "model_type"): llama (also when absent), mistral, qwen2, qwen3.
  std::string model_type = "llama";
  bool qkv_bias = false;  // self_attn.{q,k,v}_proj.bias (qwen2 always; llama, qwen3: attention_bias)
  bool o_bias = false;    // self_attn.o_proj.bias (llama, qwen3: attention_bias)
  bool mlp_bias = false;  // mlp.{gate,up,down}_proj.bias (llama: mlp_bias)
  int64_t max_position_embeddings = 0;  // 0: not given
  RopeScaling rope_scaling;
  // config.json's Hugging Face keys that ToJson writes back as they were (rope_scaling, the window
  // keys, attention_bias, ...), so that a saved config reads back the same.
  nlohmann::json hf_keys = nlohmann::json::object();
  GenerationDefaults generation;  // generation_config.json (ParseGenerationConfig)
  int bos_token_id = -1;
  int eos_token_id = -1;           // the first end-of-sequence id (-1: none)
  std::vector<int> eos_token_ids;  // every id that ends generation (config.json may give a list)
  std::vector<AttentionConfig> layer_attention;  // num_layers entries, overrides applied
  // config.json's "chat_template" (model/text/chat_template.h), or the default; has_chat_template says
  // which (only a template the checkpoint gives is written back, and fingerprinted).
  ChatTemplate chat_template = DefaultChatTemplate();
  bool has_chat_template = false;

  bool IsEos(int token) const {
    for (int id : eos_token_ids) {
      if (token == id) return true;
    }
    return false;
  }

  nlohmann::json ToJson() const;  // config.json contents that ParseModelConfig reads back
};

// Parses config.json text. `display_name` (usually the path) prefixes every error.
absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text,
                                             const std::string& display_name);

// Reads generation_config.json's text into `config`: its eos_token_id (one id or a list) replaces
// config.json's, its bos_token_id too, and its sampling keys become `config->generation`. A bad
// value is refused naming `display_name` and the key; keys that do not concern generation defaults
// (max_length, pad_token_id, ...) are ignored.
absl::Status ParseGenerationConfig(std::string_view json_text, const std::string& display_name, ModelConfig* config);

// Serving-time override (`--mechanism taylor --order 4`): every layer gets `mechanism` with `params`.
void OverrideMechanism(const std::string& mechanism, const nlohmann::json& params,
                       ModelConfig* config);

}  // namespace steady

#endif  // STEADY_MODEL_CHECKPOINT_CONFIG_H_
