// PLACEHOLDER: replaced by the real implementation.
#include "model/mechanisms/dark.h"

#include "kernels/check.h"
#include "model/mechanisms/attention.h"

namespace steady {

absl::Status ParseParams(const nlohmann::json&, const AttnShape&, DarkParams*) {
  return absl::UnimplementedError("dark: not implemented yet");
}
absl::Status LoadTensors(const SafeTensors&, const std::string&, const AttnShape&, DarkParams*) {
  return absl::UnimplementedError("dark: not implemented yet");
}
void RandomInitTensors(uint64_t, const AttnShape&, DarkParams*) {}
void AppendTensors(const DarkParams&, const std::string&, const AttnShape&, std::vector<TensorToWrite>*) {}
nlohmann::json Describe(const DarkParams&) { return nlohmann::json::object(); }
size_t StateFloats(const LayerAttention&, const DarkParams&) { return 0; }
template <typename T> void InitState(const LayerAttention&, const DarkParams&, StateView<T>) { STEADY_CHECK(false); }
template <typename T> void Step(const LayerAttention&, const DarkParams&, const T*, const T*, const T*, StateView<T>, T*) { STEADY_CHECK(false); }
template <typename T> void Chunked(const LayerAttention&, const DarkParams&, int, const T*, const T*, const T*, StateView<T>, T*) { STEADY_CHECK(false); }
template <typename T> void Parallel(const LayerAttention&, const DarkParams&, int, const T*, const T*, const T*, T*) { STEADY_CHECK(false); }
STEADY_INSTANTIATE_MECHANISM(DarkParams)

}  // namespace steady
