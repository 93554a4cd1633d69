// The CUDA backend (model/backend.h): being written; until then --device cuda reports that it is
// missing rather than running anything.
#include "model/backend.h"

namespace steady {

absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(const Model&, const BackendOptions&) {
  return absl::UnimplementedError("--device cuda: the CUDA backend's forward pass is not written yet");
}

}  // namespace steady
