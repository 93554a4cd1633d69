// PLACEHOLDER: replaced by the real implementation.
#include "model/mechanisms/sliced_relu.h"

#include "kernels/check.h"
#include "model/mechanisms/attention.h"

namespace steady {

absl::Status ParseParams(const nlohmann::json&, const AttnShape&, SlicedParams*) {
  return absl::UnimplementedError("sliced_relu: not implemented yet");
}
absl::Status LoadTensors(const SafeTensors&, const std::string&, const AttnShape&, SlicedParams*) {
  return absl::UnimplementedError("sliced_relu: not implemented yet");
}
void RandomInitTensors(uint64_t, const AttnShape&, SlicedParams*) {}
void AppendTensors(const SlicedParams&, const std::string&, const AttnShape&, std::vector<TensorToWrite>*) {}
nlohmann::json Describe(const SlicedParams&) { return nlohmann::json::object(); }
size_t StateFloats(const LayerAttention&, const SlicedParams&) { return 0; }
template <typename T> void InitState(const LayerAttention&, const SlicedParams&, StateView<T>) { STEADY_CHECK(false); }
template <typename T> void Step(const LayerAttention&, const SlicedParams&, const T*, const T*, const T*, StateView<T>, T*) { STEADY_CHECK(false); }
template <typename T> void Chunked(const LayerAttention&, const SlicedParams&, int, const T*, const T*, const T*, StateView<T>, T*) { STEADY_CHECK(false); }
template <typename T> void Parallel(const LayerAttention&, const SlicedParams&, int, const T*, const T*, const T*, T*) { STEADY_CHECK(false); }
STEADY_INSTANTIATE_MECHANISM(SlicedParams)

}  // namespace steady
