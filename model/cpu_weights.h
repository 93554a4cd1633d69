// The precision the CPU backend reads the projection matrices in (docs/cpu.md). The Model keeps its
// fp32 weights (checkpoint saving, the snapshot fingerprint and the CUDA upload read them); with
// bf16 the CPU backend converts the seven matrices of every layer and the LM head once, at start,
// and each decode step reads half the bytes.
#ifndef STEADY_MODEL_CPU_WEIGHTS_H_
#define STEADY_MODEL_CPU_WEIGHTS_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace steady {

class Model;

enum class CpuWeights { kF32, kBf16 };

// "f32" or "bf16"; anything else is an error naming the flag's values.
absl::StatusOr<CpuWeights> ParseCpuWeights(std::string_view name);

// Every projection matrix of a model in bf16 (rounded to nearest even), in the fp32 layout.
struct Bf16Matrices {
  struct Layer {
    std::vector<uint16_t> wq, wk, wv, wo, w_gate, w_up, w_down;
  };
  std::vector<Layer> layers;
  std::vector<uint16_t> lm_head;  // [vocab, hidden]: the embedding table's copy when they are tied

  static Bf16Matrices From(const Model& model);
  int64_t Bytes() const;
};

}  // namespace steady

#endif  // STEADY_MODEL_CPU_WEIGHTS_H_
