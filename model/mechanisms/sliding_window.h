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

namespace steady {

struct SlidingWindowParams {
  double scale = 0;  // logit scale s; 1/sqrt(head_dim) unless config "scale"
  int window = 0;    // W >= 1, config "window" (required)
};

// The largest W ParseParams accepts: the ring's cursor is stored in the state's own floats, which
// hold integers exactly up to 2^24.
inline constexpr int kSlidingWindowMax = 1 << 24;

// Fixed state, whole layer, T elements:
//   ring   [window, kv_heads, head_dim + value_dim]   row r: the keys then values of every kv head of
//          the last token whose position p has p mod W == r (the softmax KV cache's row layout)
//   cursor [2]   next: the ring row the next token goes to, in [0, W); filled: rows holding tokens,
//                in [0, W] (next == filled until the ring is full, then next runs round)
// Nothing accumulates (no running sums), so "accumulation" changes nothing here.
STEADY_DECLARE_MECHANISM(SlidingWindowParams)

}  // namespace steady

#endif  // STEADY_MODEL_MECHANISMS_SLIDING_WINDOW_H_
