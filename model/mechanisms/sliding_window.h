// sliding_window: softmax over the last W positions (Hugging Face's Mistral sliding window: position
// i attends to j with i - W < j <= i, W keys including itself), kept as a constant-size state: a
// ring buffer of the last W keys and values per kv head. Notes: docs/mechanisms/sliding_window.md.
#ifndef STEADY_MODEL_MECHANISMS_SLIDING_WINDOW_H_
#define STEADY_MODEL_MECHANISMS_SLIDING_WINDOW_H_

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "model/checkpoint/safetensors.h"
#include "model/mechanisms/common.h"
#include "model/mechanisms/window_ring.h"

namespace steady {

struct SlidingWindowParams {
  double scale = 0;  // logit scale s; 1/sqrt(head_dim) unless config "scale"
  int window = 0;    // W >= 1, config "window" (required)
};

// Fixed state, whole layer: the ring of the last W rows and its cursor (window_ring.h, W at most
// kSlidingWindowMax). Nothing accumulates (no running sums), so "accumulation" changes nothing here.
STEADY_DECLARE_MECHANISM(SlidingWindowParams)

}  // namespace steady

#endif  // STEADY_MODEL_MECHANISMS_SLIDING_WINDOW_H_
