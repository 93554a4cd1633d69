// taylor (SATA): symmetry-aware Taylor expansion of exp(s q.k) with P terms; constant-size state.
#ifndef STEADY_MODEL_MECHANISMS_TAYLOR_H_
#define STEADY_MODEL_MECHANISMS_TAYLOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "model/mechanisms/common.h"
#include "model/safetensors.h"

namespace steady {

struct TaylorParams {
  double scale = 0;  // logit scale s
  int order = 4;     // P: number of Taylor terms (top degree P-1)
  // Derived at ParseParams: monomial index tables per degree (see MECHANISMS.md).
};

STEADY_DECLARE_MECHANISM(TaylorParams)

}  // namespace steady

#endif  // STEADY_MODEL_MECHANISMS_TAYLOR_H_
