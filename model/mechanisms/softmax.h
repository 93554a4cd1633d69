// softmax: exact attention with a KV cache (the baseline; state grows with t).
#ifndef STEADY_MODEL_MECHANISMS_SOFTMAX_H_
#define STEADY_MODEL_MECHANISMS_SOFTMAX_H_

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "model/checkpoint/safetensors.h"
#include "model/mechanisms/common.h"

namespace steady {

struct SoftmaxParams {
  double scale = 0;  // logit scale s; 1/sqrt(head_dim) unless config "scale"
};

// No fixed state: keys and values go to the growing KV cache, [t, kv_heads, head_dim + value_dim].
STEADY_DECLARE_MECHANISM(SoftmaxParams)

}  // namespace steady

#endif  // STEADY_MODEL_MECHANISMS_SOFTMAX_H_
