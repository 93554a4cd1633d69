// RoPE's inverse frequencies for a configuration: Hugging Face's rope types (default, linear,
// dynamic, llama3, yarn; model/checkpoint/config.h RopeScaling), computed in double as
// transformers' modeling_rope_utils.py defines them, then rounded to fp32 once.
#ifndef STEADY_MODEL_DECODER_ROPE_H_
#define STEADY_MODEL_DECODER_ROPE_H_

#include <cstdint>
#include <vector>

#include "model/checkpoint/config.h"

namespace steady {

class RopeFrequencies {
 public:
  RopeFrequencies() = default;
  // Empty (no RoPE) when the config has no rope_theta.
  explicit RopeFrequencies(const ModelConfig& c);

  bool empty() const { return inv_freq_.empty(); }
  // [head_dim / 2], the frequencies of every position (dynamic: of positions inside the original
  // context).
  const std::vector<float>& inv_freq() const { return inv_freq_; }
  // Whether the frequencies depend on the position (dynamic NTK scaling past the original context).
  bool position_dependent() const { return dynamic_; }
  // The frequencies a token at `position` is rotated with: inv_freq() except for dynamic NTK
  // scaling past the original context, where the base grows as Hugging Face grows it for a
  // sequence ending at that token (each token keeps the rotation it got when it entered the state,
  // as in Hugging Face's cached generation). Returns inv_freq().data() or `scratch`'s.
  const float* At(int64_t position, std::vector<float>* scratch) const;
  // yarn's scale of cos and sin (so of q and k after the rotation); 1 for the other types.
  float attention_factor() const { return attention_factor_; }

 private:
  std::vector<float> inv_freq_;
  float attention_factor_ = 1.0f;
  bool dynamic_ = false;
  double theta_ = 0, factor_ = 1;
  int64_t original_ = 0;
  int dim_ = 0;
};

}  // namespace steady

#endif  // STEADY_MODEL_DECODER_ROPE_H_
