// The Hugging Face architecture keys of config.json (docs/checkpoint-format.md): which model_types
// Steady computes and what each implies (biases, QK-norm, sliding windows), RoPE scaling, and the
// keys that would change the computation in a way Steady does not implement (refused, named).
// Internal to model/checkpoint/: ParseModelConfig (config.h) calls these.
#ifndef STEADY_MODEL_CHECKPOINT_HF_CONFIG_H_
#define STEADY_MODEL_CHECKPOINT_HF_CONFIG_H_

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "model/checkpoint/config.h"

namespace steady::hf_config {

// model_type (llama when absent; mistral, qwen2, qwen3) and what it implies: qkv_bias, o_bias,
// mlp_bias, qk_norm. Refuses another model_type, a hidden_act other than silu, a
// partial_rotary_factor other than 1 and a quantization_config.
absl::Status ReadArchitecture(const nlohmann::json& j, const std::string& file, ModelConfig* c);

// rope_theta, max_position_embeddings and rope_scaling (or rope_parameters). Without rope_theta a
// Hugging Face config gets its default 10000; a config with Steady's "attention" object gets no
// RoPE (Steady's own models may have none; docs/checkpoint-format.md).
absl::Status ReadRope(const nlohmann::json& j, const std::string& file, ModelConfig* c);

// The sliding window of each layer that the architecture's keys select (0: full attention): Mistral's
// sliding_window on every layer; Qwen2/Qwen3's sliding_window with use_sliding_window on the layers
// layer_types calls "sliding_attention", else on those from max_window_layers on. A window of 0 is
// refused.
absl::StatusOr<std::vector<int>> WindowLayers(const nlohmann::json& j, const std::string& file, ModelConfig* c);

}  // namespace steady::hf_config

#endif  // STEADY_MODEL_CHECKPOINT_HF_CONFIG_H_
