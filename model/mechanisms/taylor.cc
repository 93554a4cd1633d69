// PLACEHOLDER: replaced by the real implementation.
#include "model/mechanisms/taylor.h"

#include "kernels/check.h"
#include "model/mechanisms/attention.h"

namespace steady {

absl::Status ParseParams(const nlohmann::json&, const AttnShape&, TaylorParams*) {
  return absl::UnimplementedError("taylor: not implemented yet");
}
absl::Status LoadTensors(const SafeTensors&, const std::string&, const AttnShape&, TaylorParams*) {
  return absl::UnimplementedError("taylor: not implemented yet");
}
void RandomInitTensors(uint64_t, const AttnShape&, TaylorParams*) {}
void AppendTensors(const TaylorParams&, const std::string&, const AttnShape&, std::vector<TensorToWrite>*) {}
nlohmann::json Describe(const TaylorParams&) { return nlohmann::json::object(); }
size_t StateFloats(const LayerAttention&, const TaylorParams&) { return 0; }
template <typename T> void InitState(const LayerAttention&, const TaylorParams&, StateView<T>) { STEADY_CHECK(false); }
template <typename T> void Step(const LayerAttention&, const TaylorParams&, const T*, const T*, const T*, StateView<T>, T*) { STEADY_CHECK(false); }
template <typename T> void Chunked(const LayerAttention&, const TaylorParams&, int, const T*, const T*, const T*, StateView<T>, T*) { STEADY_CHECK(false); }
template <typename T> void Parallel(const LayerAttention&, const TaylorParams&, int, const T*, const T*, const T*, T*) { STEADY_CHECK(false); }
STEADY_INSTANTIATE_MECHANISM(TaylorParams)

}  // namespace steady
