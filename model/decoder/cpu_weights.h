// The precision the CPU backend reads the projection matrices in (docs/cpu.md). The Model keeps its
// fp32 weights (checkpoint saving, the snapshot fingerprint and the CUDA upload read them); with
// bf16 or q8 the CPU backend converts the seven matrices of every layer and the LM head once, at
// start, and each decode step reads half (bf16) or about a quarter (q8) of the bytes.
#ifndef STEADY_MODEL_DECODER_CPU_WEIGHTS_H_
#define STEADY_MODEL_DECODER_CPU_WEIGHTS_H_

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

// Which kernels the decode GEMMs take (--cpu-gemm; docs/cpu.md):
//  kAuto: bf16 weights on AMX tiles where the CPU has them (activations rounded to bf16,
//         kernels/cpu/amx.h), else the SIMD small-row kernel up to 32 rows and OpenBLAS above;
//  kSimd: never AMX: the SIMD kernel with fp32 activations whatever the CPU;
//  kOpenBlas: OpenBLAS for every fp32 GEMM, as before the small-row kernel (a baseline to measure
//         against; bf16 and q8 weights still take the SIMD kernel).
enum class CpuGemm { kAuto, kSimd, kOpenBlas };
absl::StatusOr<CpuGemm> ParseCpuGemm(std::string_view name);
std::string CpuGemmName(CpuGemm g);

// One matrix [out, in] in a reduced precision: bf16 values (row-major, or packed for AMX tiles),
// or q8_0 blocks (kernels/cpu/matmul.h). Exactly one of bf16, amx_bf16 and q8 is set.
struct ReducedMatrix {
  std::vector<uint16_t> bf16;
  std::vector<uint16_t> amx_bf16;  // kernels/cpu/amx.h PackAmxBf16 (zero padding included)
  std::vector<int8_t> q8;
  std::vector<float> q8_scales;
  int64_t weights = 0;  // out * in
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
  bool amx = false;  // the bf16 matrices are packed for AMX tiles
  std::vector<Layer> layers;
  ReducedMatrix lm_head;  // [vocab, hidden]: the embedding table's copy when they are tied

  // `precision` is kBf16 or kQ8; `amx` (bf16 only, where cpu::AmxAvailable()) packs for AMX.
  static CpuMatrices From(const Model& model, CpuWeights precision, bool amx = false);
  int64_t Bytes() const;
  // How many weights the matrices hold (each stored in Bytes() / Weights() bytes on average).
  int64_t Weights() const;

 private:
  // `of` summed over every matrix.
  int64_t Sum(int64_t (*of)(const ReducedMatrix&)) const;
};

}  // namespace steady

#endif  // STEADY_MODEL_DECODER_CPU_WEIGHTS_H_
