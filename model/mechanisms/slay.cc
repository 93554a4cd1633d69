// PLACEHOLDER: replaced by the real implementation.
#include "model/mechanisms/slay.h"

#include "kernels/check.h"
#include "model/mechanisms/attention.h"

namespace steady {

absl::Status ParseParams(const nlohmann::json&, const AttnShape&, SlayParams*) {
  return absl::UnimplementedError("slay: not implemented yet");
}
absl::Status LoadTensors(const SafeTensors&, const std::string&, const AttnShape&, SlayParams*) {
  return absl::UnimplementedError("slay: not implemented yet");
}
void RandomInitTensors(uint64_t, const AttnShape&, SlayParams*) {}
void AppendTensors(const SlayParams&, const std::string&, const AttnShape&, std::vector<TensorToWrite>*) {}
nlohmann::json Describe(const SlayParams&) { return nlohmann::json::object(); }
size_t StateFloats(const LayerAttention&, const SlayParams&) { return 0; }
template <typename T> void InitState(const LayerAttention&, const SlayParams&, StateView<T>) { STEADY_CHECK(false); }
template <typename T> void Step(const LayerAttention&, const SlayParams&, const T*, const T*, const T*, StateView<T>, T*) { STEADY_CHECK(false); }
template <typename T> void Chunked(const LayerAttention&, const SlayParams&, int, const T*, const T*, const T*, StateView<T>, T*) { STEADY_CHECK(false); }
template <typename T> void Parallel(const LayerAttention&, const SlayParams&, int, const T*, const T*, const T*, T*) { STEADY_CHECK(false); }
STEADY_INSTANTIATE_MECHANISM(SlayParams)

}  // namespace steady
