// A GGUF file as a Model (docs/gguf.md): llama.cpp's architectures `llama`, `qwen2` and `qwen3`, their
// metadata read into the ModelConfig a config.json would give (through ParseModelConfig, so both
// paths validate alike), their tensors under the Hugging Face names Model::FromWeights asks for.
//
//   token_embd -> model.embed_tokens        blk.N.attn_norm -> model.layers.N.input_layernorm
//   blk.N.attn_{q,k,v,output} -> self_attn.{q,k,v,o}_proj (weight and bias)
//   blk.N.attn_{q,k}_norm -> self_attn.{q,k}_norm           blk.N.ffn_norm -> post_attention_layernorm
//   blk.N.ffn_{gate,up,down} -> mlp.{gate,up,down}_proj     output_norm -> model.norm
//   output -> lm_head (absent: tied to the embedding)       rope_freqs -> RopeScaling::freq_divisors
//
// llama's q and k rows (and biases) come back from the pair-interleaved order llama.cpp's converter
// gives them to Hugging Face's rotate-half order. What each tensor type becomes at load:
// every type in its own bytes, viewed in place in the mapped file (llama's q/k: a permuted copy of
// the same type): F32, F16, BF16 as themselves, Q8_0 as q8_0, Q4_0 as q4, Q4_1, Q5_0 and Q5_1 as
// q4_1, q5_0 and q5_1, Q4_K, Q5_K and Q6_K as q4k, q5k and q6k (kernels/cpu: matmul.h, q32.h, q4k.h,
// q5k.h, q6k.h), so their values are ggml's exactly.
// Norms and biases are fp32 vectors. Every tensor must exist with its shape and finite values, and
// every tensor of the file must be used; errors name the file, the tensor or key, and the reason.
#ifndef STEADY_MODEL_GGUF_GGUF_MODEL_H_
#define STEADY_MODEL_GGUF_GGUF_MODEL_H_

#include <optional>

#include "absl/status/statusor.h"
#include "model/checkpoint/config.h"
#include "model/decoder/model.h"
#include "model/gguf/gguf.h"

namespace steady {

// general.architecture and its keys as a ModelConfig (every layer softmax; rope_freqs read into
// rope_scaling.freq_divisors).
absl::StatusOr<ModelConfig> GgufModelConfig(const GgufFile& file);

// The Model of a GGUF file, with `override` (--mechanism ...) applied to every layer.
absl::StatusOr<Model> LoadGgufModel(const GgufFile& file, const std::optional<MechanismOverride>& override);

}  // namespace steady

#endif  // STEADY_MODEL_GGUF_GGUF_MODEL_H_
