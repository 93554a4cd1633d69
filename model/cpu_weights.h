// The precision the CPU backend reads the projection matrices in (docs/cpu.md). The Model keeps its
// fp32 weights (checkpoint saving, the snapshot fingerprint and the CUDA upload read them); with
// bf16 or q8 the CPU backend converts the seven matrices of every layer and the LM head once, at
// start, and each decode step reads half (bf16) or about a quarter (q8) of the bytes.
#ifndef STEADY_MODEL_CPU_WEIGHTS_H_
#define STEADY_MODEL_CPU_WEIGHTS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace steady {

class Model;

enum class CpuWeights { kF32, kBf16, kQ8 };

// "f32", "bf16" or "q8"; anything else is an error naming the flag's values.
absl::StatusOr<CpuWeights> ParseCpuWeights(std::string_view name);
std::string CpuWeightsName(CpuWeights w);

// One matrix [out, in] in a reduced precision: bf16 values, or q8_0 blocks (kernels/cpu/matmul.h).
struct ReducedMatrix {
  std::vector<uint16_t> bf16;
  std::vector<int8_t> q8;
  std::vector<float> q8_scales;
  int64_t Bytes() const;
};

// y[rows, out] = x[rows, in] m^T.
void MatMulReduced(const float* x, int rows, int in, const ReducedMatrix& m, int out, float* y);

// Every projection matrix of a model in one reduced precision, in the fp32 layout.
struct CpuMatrices {
  struct Layer {
    ReducedMatrix wq, wk, wv, wo, w_gate, w_up, w_down;
  };
  CpuWeights precision = CpuWeights::kBf16;
  std::vector<Layer> layers;
  ReducedMatrix lm_head;  // [vocab, hidden]: the embedding table's copy when they are tied

  // `precision` is kBf16 or kQ8.
  static CpuMatrices From(const Model& model, CpuWeights precision);
  int64_t Bytes() const;
  // How many weights the matrices hold (each stored in Bytes() / Weights() bytes on average).
  int64_t Weights() const;

 private:
  // `of` summed over every matrix.
  int64_t Sum(int64_t (*of)(const ReducedMatrix&)) const;
};

}  // namespace steady

#endif  // STEADY_MODEL_CPU_WEIGHTS_H_
