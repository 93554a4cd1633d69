// Per-session attention state in fixed-size slots: a slot holds every layer's fixed state
// ([layers][StateFloats(layer)] floats, contiguous) plus, for mechanisms whose state grows with
// context (softmax's KV cache, the exact sliced decoder), per-layer growing buffers.
#ifndef STEADY_MODEL_DECODER_STATE_POOL_H_
#define STEADY_MODEL_DECODER_STATE_POOL_H_

#include <cstdint>
#include <vector>

#include "model/mechanisms/common.h"

namespace steady {

class Model;

class StatePool {
 public:
  StatePool(const Model& model, int slots);

  int slots() const { return slots_; }
  size_t fixed_floats_per_slot() const { return slot_floats_; }
  // Bytes of one slot's fixed state (what a constant-state session costs).
  size_t FixedBytesPerSlot() const { return slot_floats_ * sizeof(float); }
  // Bytes a slot holds now: fixed part plus growing parts.
  size_t BytesInUse(int slot) const;

  StateView<float> View(int slot, int layer);
  float* SlotData(int slot) { return fixed_.data() + size_t(slot) * slot_floats_; }
  const float* SlotData(int slot) const { return fixed_.data() + size_t(slot) * slot_floats_; }
  std::vector<float>& Growing(int slot, int layer) { return growing_[size_t(slot) * layers_ + layer]; }
  const std::vector<float>& Growing(int slot, int layer) const {
    return growing_[size_t(slot) * layers_ + layer];
  }

  // Tokens absorbed into the slot's state.
  int64_t position(int slot) const { return positions_[slot]; }
  void set_position(int slot, int64_t p) { positions_[slot] = p; }

  // Empties a slot: every layer's InitState, position 0.
  void Reset(int slot);
  // Copies slot `from` into `to` (fork): O(state bytes).
  void Copy(int from, int to);

 private:
  const Model* model_;
  int slots_;
  int layers_;
  size_t slot_floats_;
  std::vector<size_t> layer_offset_;  // [layers] offset of each layer's fixed state in a slot
  std::vector<float> fixed_;          // [slots, slot_floats_]
  std::vector<std::vector<float>> growing_;  // [slots * layers]
  std::vector<int64_t> positions_;    // [slots]
};

}  // namespace steady

#endif  // STEADY_MODEL_DECODER_STATE_POOL_H_
