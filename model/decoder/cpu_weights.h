// The precision the CPU backend reads the projection matrices in (--cpu-weights, docs/cpu.md). By
// default (auto) it reads the Model's matrices as the checkpoint stores them (fp32, bf16 or f16, a
// memory-mapped view, or a copy packed for a dot-product kernel; a GGUF file's quantized blocks as q8,
// q4, q4k or q6k), each type on the fastest kernel that reads its stored values unchanged; stored keeps
// every matrix on the widening kernels (the checkpoint's own numbers in fp32 arithmetic, exactly);
// f32, bf16, q8, q4 or q4k convert the seven matrices of every layer and the LM head once, at start,
// into copies of the backend's own (and the mapped pages they came from leave resident memory), and
// a mechanism's token matrices (sliced_relu's score layers) with them.
#ifndef STEADY_MODEL_DECODER_CPU_WEIGHTS_H_
#define STEADY_MODEL_DECODER_CPU_WEIGHTS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cpu/matmul_dot.h"
#include "model/decoder/weights.h"

namespace steady {

class Model;

// auto: as stored, each matrix on the fastest kernel that reads its stored values unchanged: the
// quantized ones (q8, q8_0, q4, q4_1, q5_0, q5_1, q4k, q5k, q6k: a GGUF file's blocks) packed for the int8 kernels where
// the CPU has one (the activations quantized per 32 as llama.cpp's own dot products do), the bf16 ones
// (a checkpoint's own, or a GGUF file's BF16 tensors) on AMX tiles, VDPBF16PS or AVX2's FMAs
// (the first the CPU has; the activations rounded to bf16), the f16 ones on the f16 kernel where the
// bf16 ones take AVX2's FMAs (cpu::F16DotAvailable: packed, fp32 activations), fp32 (and f16
// elsewhere) on the widening kernels (CpuGemm);
// stored: as stored, every matrix on the widening kernels with fp32 activations (what comparisons
// with another implementation's fp32 arithmetic need); f32; bf16 (half the bytes of fp32); q8 (8-bit
// blocks, about a quarter); q4 (q4_0's 4-bit blocks, about a seventh; the int8 kernels where the CPU
// has one, the widening kernel elsewhere); q4k (Q4_K-style 4-bit super-blocks with 6-bit sub-block
// scales and minimums, ggml's block_q4_K, kernels/cpu/q4k.h: 4.5 bits a weight; the int8 kernels where the CPU has
// one, the widening kernel elsewhere).
enum class CpuWeights { kAuto, kStored, kF32, kBf16, kQ8, kQ4, kQ4K };

// "auto", "stored", "f32", "bf16", "q8", "q4" or "q4k"; anything else is an error naming the flag's values.
absl::StatusOr<CpuWeights> ParseCpuWeights(std::string_view name);
std::string CpuWeightsName(CpuWeights w);
// The row-major type `precision` converts every matrix to (before any packing for a kernel), or
// none for kAuto and kStored (each matrix stays as stored).
std::optional<WeightType> ConvertedType(CpuWeights precision);
// The row-major type `precision` converts a mechanism's token matrices to (attention.h,
// AttentionTokenMatrices: sliced_relu's score layers), or none (auto, stored, f32: the mechanism's own fp32
// path). bf16 for bf16; q8 for q8 and also for the 4-bit formats, since a score's error goes
// straight into the kernel's argument (docs/cpu.md has the perplexities).
std::optional<WeightType> TokenMatrixType(CpuWeights precision);

// Which kernels the decode GEMMs take (--cpu-gemm; docs/cpu.md):
//  kAuto: bf16 weights on AMX tiles where the CPU has them (activations rounded to bf16,
//         kernels/cpu/amx.h; not with --cpu-weights stored); else, for --cpu-weights auto, bf16, q8,
//         q4 or q4k, the widest bf16 kernel it has (VDPBF16PS with AVX512_BF16, else AVX2's FMAs
//         on bf16 pairs; Arm's BFMMLA) and the widest int8 kernel it has
//         (AMX-INT8, AVX512_VNNI, AVX-VNNI or AVX2; activations rounded to bf16 / quantized to q8_0,
//         kernels/cpu/matmul_dot.h); otherwise, and for fp32 weights, the SIMD small-row kernel up
//         to 32 rows and OpenBLAS above;
//  kAvx512Vnni: as kAuto, with the int8 kernels on AVX512_VNNI's VPDPBUSD where the CPU has AMX-INT8
//         too (to compare the paths on one CPU; the same results);
//  kAvxVnni, kAvx2: as kAuto, with the int8 kernels on the 256-bit AVX-VNNI or AVX2 path even
//         where the CPU has a wider one (to compare the paths on one CPU; the same results);
//  kArmDot: as kAuto, the int8 formats on SDOT where the CPU has SMMLA too (the same results);
//  these four (the named dot-product paths) also keep bf16 off AMX tiles: avx512vnni and armdot on
//         the widest bf16 kernel the CPU has (VDPBF16PS, else AVX2's FMAs; Arm's BFMMLA), avxvnni
//         and avx2 on AVX2's FMAs even where the CPU has VDPBF16PS (AMX, VDPBF16PS and AVX2 on one
//         CPU; AVX2's bits are VDPBF16PS's but for subnormals, AMX's within bf16 rounding of them:
//         the tiles sum in another order);
//  kSimd: never AMX or the dot-product kernels: the widening SIMD kernel with fp32 activations
//         whatever the CPU (the baseline the others are measured and tested against);
//  kOpenBlas: OpenBLAS for every fp32 GEMM, as before the small-row kernel (a baseline to measure
//         against; bf16 and q8 weights still take the SIMD kernel).
enum class CpuGemm { kAuto, kSimd, kOpenBlas, kAvx512Vnni, kAvxVnni, kAvx2, kArmDot };
// "auto", "simd", "openblas", "avx512vnni", "avxvnni", "avx2" or "armdot"; anything else is an error naming the flag's values.
absl::StatusOr<CpuGemm> ParseCpuGemm(std::string_view name);
std::string CpuGemmName(CpuGemm g);
// Whether `gemm` packs bf16, q8 and q4k matrices for AMX and the dot-product kernels (all but simd
// and openblas); the int8 kernels' path it sets (cpu::SetInt8Path: process-wide, as the thread
// count), and whether this CPU has it (else an error naming the flag).
bool UsesDotKernels(CpuGemm gemm);
// Whether `gemm` puts bf16 matrices on AMX tiles where the CPU has them (auto only).
bool UsesAmxTiles(CpuGemm gemm);
cpu::Int8Path Int8PathFor(CpuGemm gemm);
// The bf16 kernels' path `gemm` sets (cpu::SetBf16Path, process-wide; simd and openblas, which do not
// use the kernels, leave the widest).
cpu::Bf16Path Bf16PathFor(CpuGemm gemm);
absl::Status CpuGemmAvailable(CpuGemm gemm);

// The instruction path each weight format's decode GEMMs take on this CPU with `gemm` and `weights`,
// as {format, path} pairs for f32, bf16, q8, q4, q4k (the --cpu-weights formats), a checkpoint's f16
// and a GGUF file's q8_0, q5k, q6k, q4_1, q5_0 and q5_1, e.g. {"q8", "avx512_vnni (VPDPBUSD)"} (bench
// reports, the server's log). Under stored every format but f32 takes the widening kernel, whatever
// the CPU has.
std::vector<std::pair<std::string, std::string>> CpuGemmPaths(CpuGemm gemm, CpuWeights weights);
// One line for a log: the CPU, the compute threads, the SIMD target, the flags and CpuGemmPaths,
// e.g. "AMD EPYC (family 25, model 17), 2 threads, AVX3_ZEN4, --cpu-gemm auto, --cpu-weights auto;
// f32: ...; bf16: ...; q8: ..." (the server's startup log).
std::string CpuKernelsSummary(CpuGemm gemm, CpuWeights weights);
// Every projection matrix of a model as the CPU backend reads it, in the fp32 layout [out, in].
// A matrix already in the wanted type is the Model's own (shared, not copied).
struct CpuMatrices {
  struct Layer {
    WeightMatrix wq, wk, wv, wo, w_gate, w_up, w_down;
    // The layer's AttentionTokenMatrices in TokenMatrixType(precision), in their order; empty when
    // the mechanism has none or the precision keeps them fp32.
    std::vector<WeightMatrix> token;
  };
  CpuWeights precision = CpuWeights::kAuto;
  bool amx = false;  // the bf16 matrices are packed for AMX tiles
  std::vector<Layer> layers;
  WeightMatrix lm_head;  // [vocab, hidden]: the embedding table when they are tied

  // `amx` (bf16 matrices only, where cpu::AmxAvailable()) packs them for AMX. `dot` packs the bf16
  // matrices for the bf16 kernels where cpu::Bf16DotAvailable() (and not for AMX) and the quantized
  // ones (q8, q8_0, q4, q4_1, q5_0, q5_1, q4k, q5k, q6k) for the int8 kernels where cpu::Int8DotAvailable(), the f16
  // ones for the f16 kernel where cpu::F16DotAvailable(); the other matrices stay as they are.
  static CpuMatrices From(const Model& model, CpuWeights precision, bool amx = false, bool dot = false);
  // The CPU extensions the packed matrices run on, for the backend's name: "AMX", the bf16 dot
  // kernels' (cpu::Bf16DotExtension: "AVX512_BF16", "AVX2", Arm's "BF16"), the f16 kernel's ("F16C"),
  // the int8 path's (cpu::Int8PathExtension: "AVX512_VNNI", "AVX_VNNI", "AVX2", "I8MM", "DOTPROD") or
  // "" (the widening kernels).
  std::string Kernels() const;
  int64_t Bytes() const;
  // How many weights the matrices hold (each stored in Bytes() / Weights() bytes on average).
  int64_t Weights() const;
  // The matrices' types, e.g. "bf16" or "f32 and bf16" (a checkpoint may mix them).
  std::string TypeNames() const;
  // Whether any matrix is of `type`.
  bool Has(WeightType type) const;
  // Whether any matrix is of a row-major int8 format (one with an Int8PackedType).
  bool HasInt8Format() const;

 private:
  template <typename Fn>
  void ForEach(const Fn& fn) const;
};

}  // namespace steady

#endif  // STEADY_MODEL_DECODER_CPU_WEIGHTS_H_
