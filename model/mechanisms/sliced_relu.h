// sliced_relu and sliced_relu_bump: sorting-based ReLU kernel over one projected score per head.
#ifndef STEADY_MODEL_MECHANISMS_SLICED_RELU_H_
#define STEADY_MODEL_MECHANISMS_SLICED_RELU_H_

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "model/mechanisms/common.h"
#include "model/safetensors.h"

namespace steady {

struct SlicedParams {
  bool bump = false;  // sliced_relu_bump
  // Projection weights, bins and decoder choice: see sliced_relu.cc.
};

STEADY_DECLARE_MECHANISM(SlicedParams)

}  // namespace steady

#endif  // STEADY_MODEL_MECHANISMS_SLICED_RELU_H_
