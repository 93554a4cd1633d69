// window_dark: a sliding window of the last W tokens, attended exactly (softmax's exp(s q.k)), plus a
// dark state (DARKFormer positive random features) over the tokens the window has evicted, both in one
// normalizer, each query head weighing the dark part by a learned gate (the hybrid of LoLCATs and Based,
// with dark's features). For query t of head h, kv head g:
//
//   y_t = (sum_{t-W<j<=t} e^{s q.k_j} v_j + gate_h sum_{j<=t-W} phi(q).phi(k_j) v_j)
//         / (sum_{t-W<j<=t} e^{s q.k_j}     + gate_h sum_{j<=t-W} phi(q).phi(k_j))
//
// phi is dark's feature map (dark.h, an unbiased estimate of exp(s q^T M^T M k)), so with M = I and
// gate 1 both parts estimate the same kernel and the whole is a softmax whose far past is sampled.
// The token itself is always in its window, so the denominator is positive: no guard. Written for
// converting softmax models (tools/train/convert.py, docs/conversion.md); notes in
// docs/mechanisms/window_dark.md.
#ifndef STEADY_MODEL_MECHANISMS_WINDOW_DARK_H_
#define STEADY_MODEL_MECHANISMS_WINDOW_DARK_H_

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "model/checkpoint/safetensors.h"
#include "model/mechanisms/common.h"
#include "model/mechanisms/dark.h"

namespace steady {

struct WindowDarkParams {
  double scale = 0;         // logit scale s of both parts ("scale", default 1/sqrt(head_dim))
  int window = 0;           // W >= 1 ("window", required)
  DarkParams dark;          // "features" (default 64), "rank"; tensors dark.M, dark.G (and the derived W)
  std::vector<float> gate;  // [heads] (self_attn.dark.gate), finite and >= 0
};

// Fixed state, whole layer, T elements: the ring of the last W rows and its cursor (window_ring.h),
// then per kv head dark's sums relative to exp(c) (S [m, dv], z [m], their Kahan compensations with
// "accumulation": "kahan") and c, the running max of the evicted keys' feature logits (-inf: empty).
STEADY_DECLARE_MECHANISM(WindowDarkParams)

}  // namespace steady

#endif  // STEADY_MODEL_MECHANISMS_WINDOW_DARK_H_
