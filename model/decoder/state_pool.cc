#include "model/decoder/state_pool.h"

#include <algorithm>

#include "base/check.h"
#include "model/decoder/model.h"

namespace steady {

StatePool::StatePool(const Model& model, int slots)
    : model_(&model), slots_(slots), layers_(model.config().num_layers) {
  STEADY_CHECK(slots > 0);
  slot_floats_ = 0;
  for (int l = 0; l < layers_; ++l) {
    layer_offset_.push_back(slot_floats_);
    slot_floats_ += model.LayerStateFloats(l);
  }
  fixed_.assign(size_t(slots) * slot_floats_, 0.0f);
  growing_.resize(size_t(slots) * layers_);
  positions_.assign(slots, 0);
  for (int s = 0; s < slots; ++s) Reset(s);
}

size_t StatePool::BytesInUse(int slot) const {
  size_t bytes = FixedBytesPerSlot();
  for (int l = 0; l < layers_; ++l) bytes += Growing(slot, l).size() * sizeof(float);
  return bytes;
}

StateView<float> StatePool::View(int slot, int layer) {
  STEADY_CHECK(slot >= 0 && slot < slots_ && layer >= 0 && layer < layers_);
  return {SlotData(slot) + layer_offset_[layer], &Growing(slot, layer)};
}

void StatePool::Reset(int slot) {
  for (int l = 0; l < layers_; ++l) InitState<float>(model_->layers()[l].attention, View(slot, l));
  positions_[slot] = 0;
}

void StatePool::Copy(int from, int to) {
  if (from == to) return;
  std::copy(SlotData(from), SlotData(from) + slot_floats_, SlotData(to));
  for (int l = 0; l < layers_; ++l) Growing(to, l) = Growing(from, l);
  positions_[to] = positions_[from];
}

}  // namespace steady
