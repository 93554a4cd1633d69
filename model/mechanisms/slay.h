// slay: spherical Yat kernel via Laplace quadrature, anchor features and positive random features.
#ifndef STEADY_MODEL_MECHANISMS_SLAY_H_
#define STEADY_MODEL_MECHANISMS_SLAY_H_

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "model/mechanisms/common.h"
#include "model/safetensors.h"

namespace steady {

struct SlayParams {
  int nodes = 2;      // R: Gauss-Laguerre nodes
  int anchors = 8;    // P: anchor directions
  int features = 16;  // M: positive random features per node
  double eps = 1e-3;
  double delta = 1e-6;
  std::vector<float> anchor_dirs;  // [P, head_dim], L2-normalized  (self_attn.slay.anchors)
  std::vector<float> omega;        // [R, kv_heads, head_dim, M]     (self_attn.slay.omega)
};

STEADY_DECLARE_MECHANISM(SlayParams)

}  // namespace steady

#endif  // STEADY_MODEL_MECHANISMS_SLAY_H_
