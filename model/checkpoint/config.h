// Model configuration: config.json (Hugging Face Llama keys) plus Steady's "attention" object.
// Format documented in docs/checkpoint-format.md.
#ifndef STEADY_MODEL_CHECKPOINT_CONFIG_H_
#define STEADY_MODEL_CHECKPOINT_CONFIG_H_

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

// Serving-time override (`--mechanism taylor --order 4`): every layer gets `mechanism` with `params`.
void OverrideMechanism(const std::string& mechanism, const nlohmann::json& params,
                       ModelConfig* config);

}  // namespace steady

#endif  // STEADY_MODEL_CHECKPOINT_CONFIG_H_
