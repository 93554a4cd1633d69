// Weight matrices as a forward step reads them: a typed view (element type, shape, bytes) whose
// bytes are either a checkpoint's memory-mapped tensor, read in place, or a buffer of its own (a
// conversion, a quantization, random weights). docs/cpu.md ("Weight storage") has the design.
//
// A loader makes WeightMatrix::View over a mapped file in the checkpoint's precision (fp32, bf16,
// f16: no copy, no fp32 duplicate); the CPU backend may convert to another type once
// (--cpu-weights, cpu_weights.h); MatMul dispatches on the type to the kernels of
// kernels/cpu/matmul.h. Adding a storage type (int8 or 4-bit blocks, GGUF's quantized tensors) is
// a WeightType, its Bytes/RowsToFloat, a kernel in MatMul and, for a converting backend, ConvertTo.
#ifndef STEADY_MODEL_DECODER_WEIGHTS_H_
#define STEADY_MODEL_DECODER_WEIGHTS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/q2k.h"
#include "kernels/cpu/q32.h"
#include "kernels/cpu/q3k_iq4.h"
#include "kernels/cpu/q4k.h"
#include "kernels/cpu/q5k.h"
#include "kernels/cpu/q6k.h"

namespace steady {

enum class WeightType {
  kF32,      // fp32 values, row-major
  kBf16,     // bf16 bits (the top half of an fp32), row-major
  kF16,      // IEEE half-precision bits, row-major
  kQ8,       // q8_0 blocks of kernels/cpu/matmul.h: int8 values [rows, cols], fp32 scales after them
  kAmxBf16,  // bf16 packed for AMX tiles (kernels/cpu/amx.h), zero padding included
  kDotBf16,  // bf16 packed in VDPBF16PS's pairs for the bf16 kernels (kernels/cpu/matmul_dot.h PackBf16Dot), zero padding included
  kDotQ8,    // q8_0 packed for VPDPBUSD (kernels/cpu/matmul_dot.h PackQ8Dot), zero padding included
  kQ4,       // q4_0 row-major as ggml's block_q4_0 (kernels/cpu/matmul.h Q4Weights), a GGUF Q4_0 tensor read in place
  kDotQ4,    // q4_0 packed for the int8 kernels (kernels/cpu/matmul_dot.h PackQ4Dot), zero padding included
  kQ4K,      // q4k (a GGUF file's Q4_K blocks, kernels/cpu/q4k.h), row-major: 144 bytes per 256 weights
  kDotQ4K,   // q4k packed for VPDPBUSD (kernels/cpu/matmul_dot.h PackQ4KDot), zero padding included
  kQ6K,      // q6k (a GGUF file's Q6_K blocks, kernels/cpu/q6k.h), row-major: 210 bytes per 256 weights
  kDotQ6K,   // q6k packed for the int8 kernels (kernels/cpu/matmul_dot.h PackQ6KDot), zero padding included
  kQ8_0,     // a GGUF file's Q8_0 blocks (kernels/cpu/matmul.h Q8_0Weights: fp16 d, 32 int8), row-major
  kQ5K,      // q5k (a GGUF file's Q5_K blocks, kernels/cpu/q5k.h), row-major: 176 bytes per 256 weights
  kDotQ5K,   // q5k packed for the int8 kernels (kernels/cpu/matmul_dot.h PackQ5KDot), zero padding included
  kQ4_1,     // a GGUF file's Q4_1 blocks (kernels/cpu/q32.h), row-major: 20 bytes per 32 weights
  kQ5_0,     // a GGUF file's Q5_0 blocks (q32.h), row-major: 22 bytes per 32 weights
  kQ5_1,     // a GGUF file's Q5_1 blocks (q32.h), row-major: 24 bytes per 32 weights
  kDotQ4_1,  // q4_1, q5_0, q5_1 packed for the int8 kernels (kernels/cpu/matmul_dot.h PackQ32Dot)
  kDotQ5_0,
  kDotQ5_1,
  kDotF16,   // f16 packed for the f16 kernel (kernels/cpu/matmul_dot.h PackF16Dot), zero padding included
  kQ3K,      // a GGUF file's Q3_K blocks (kernels/cpu/q3k_iq4.h), row-major: 110 bytes per 256 weights
  kIq4Nl,    // a GGUF file's IQ4_NL blocks (q3k_iq4.h), row-major: 18 bytes per 32 weights
  kIq4Xs,    // a GGUF file's IQ4_XS blocks (q3k_iq4.h), row-major: 136 bytes per 256 weights
  kQ2K,      // a GGUF file's Q2_K blocks (kernels/cpu/q2k.h), row-major: 84 bytes per 256 weights
};
// "f32", "bf16", "f16", "q8", "amx-bf16", "dot-bf16", "dot-q8", "q4", "dot-q4", "q4k", "dot-q4k",
// "q6k", "dot-q6k", "q8_0", "q5k", "dot-q5k", "q4_1", "q5_0", "q5_1", "dot-q4_1", "dot-q5_0", "dot-q5_1",
// "dot-f16", "q3k", "iq4_nl", "iq4_xs", "q2k".
const char* WeightTypeName(WeightType t);
// The q32 type (kernels/cpu/q32.h) of kQ4_1, kQ5_0, kQ5_1 and of their packed forms; nullopt for the others.
std::optional<cpu::Q32Type> Q32TypeOf(WeightType t);
// Whether t is one of the packed forms kDotQ4_1, kDotQ5_0, kDotQ5_1.
bool IsPackedQ32(WeightType t);
// The int8 kernels' packed form of a row-major int8 format (kQ8 and kQ8_0: kDotQ8, kQ4: kDotQ4, ...,
// kQ5_1: kDotQ5_1; kQ3K: kDotQ6K and kIq4Nl, kIq4Xs: kDotQ8, the formats of the same values); nullopt
// for the others. IsInt8Packed: t is one of those packed forms.
std::optional<WeightType> Int8PackedType(WeightType t);
bool IsInt8Packed(WeightType t);

// A matrix [rows, cols]: a projection in PyTorch's Linear layout [out, in], or the embedding table
// [vocab, hidden]. Immutable; copies share the bytes (and whatever keeps them alive).
class WeightMatrix {
 public:
  WeightMatrix() = default;
  // A view of `data` in place, kept alive by `owner` (e.g. SafeTensors::Owner()). `mapped`: data lies
  // in a read-only file mapping, whose pages ReleasePages may drop (they come back from the file);
  // bytes of the reader's own (a file parsed from memory) are never released, which would zero them.
  // Data of a 2- or 4-byte type must be aligned to its size (MatchesAlignment).
  static WeightMatrix View(WeightType type, int64_t rows, int64_t cols, const void* data,
                           std::shared_ptr<const void> owner, bool mapped);
  // A matrix of its own whose bytes, laid out as `type` wants, are `data`, kept alive by `owner` (a
  // loader's converted buffer: unlike a View, its pages are never released).
  static WeightMatrix Owned(WeightType type, int64_t rows, int64_t cols, const void* data,
                            std::shared_ptr<const void> owner);
  // A matrix of its own holding `values` (rows * cols of them) in fp32.
  static WeightMatrix FromFloats(std::vector<float> values, int64_t rows, int64_t cols);
  // Whether `data` may be viewed as `type` in place (else the loader copies it).
  static bool MatchesAlignment(WeightType type, const void* data);

  // This matrix in `type` (kF32, kBf16, kQ8, kAmxBf16, kDotBf16, kDotQ8, kQ4, kDotQ4, kQ4K, kDotQ4K,
  // kDotQ6K from kQ6K or kQ3K, or kDotF16 from kF16): itself when already so, else a converted copy of its own (bf16: rounded
  // to nearest even; q8: QuantizeQ8 of the fp32 values, or from q8_0 its own blocks, exactly; AMX and dot-bf16: packed from bf16;
  // dot-f16: packed from f16, the same values; dot-q8:
  // packed from q8, or from q5_0, iq4_nl and iq4_xs their own values exactly (q8 likewise); q4 and q4k: quantized from the fp32 values;
  // dot-q4, dot-q4k, dot-q5k, dot-q6k and dot-q4_1, -q5_0, -q5_1: packed from q4 / q4k / q5k / q6k /
  // q4_1, q5_0, q5_1). Converted in parallel over the compute threads (the packing too, a column
  // group per task).
  WeightMatrix ConvertTo(WeightType type) const;

  WeightType type() const { return type_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  bool empty() const { return rows_ == 0; }
  int64_t Weights() const { return rows_ * cols_; }
  // Bytes the matrix occupies (a forward step reads all of them, except an embedding's).
  int64_t Bytes() const;
  const void* data() const { return data_; }
  template <typename T>
  const T* as() const {
    return static_cast<const T*>(data_);
  }
  const float* q8_scales() const;  // kQ8 only
  cpu::Q4KWeights q4k() const;     // kQ4K only
  cpu::Q4Weights q4() const;       // kQ4 only
  cpu::Q6KWeights q6k() const;     // kQ6K only
  cpu::Q8_0Weights q8_0() const;   // kQ8_0 only
  cpu::Q5KWeights q5k() const;     // kQ5K only
  cpu::Q32Weights q32() const;     // kQ4_1, kQ5_0, kQ5_1 only
  cpu::Q3KWeights q3k() const;     // kQ3K only
  cpu::Iq4NlWeights iq4_nl() const;  // kIq4Nl only
  cpu::Iq4XsWeights iq4_xs() const;  // kIq4Xs only
  cpu::Q2KWeights q2k() const;     // kQ2K only

  // Rows [r0, r1) as fp32 values into out[(r1 - r0) * cols] (not for the packed types but q4's).
  void RowsToFloat(int64_t r0, int64_t r1, float* out) const;
  std::vector<float> ToFloat() const { return RowsSlice(0, rows_); }
  std::vector<float> RowsSlice(int64_t r0, int64_t r1) const;

  // Tells the kernel the bytes will not be read soon (after a backend made its own converted copy):
  // a mapped file's pages leave the process's resident memory (they are read back from the file if
  // ever touched again); any other matrix is left alone.
  void ReleasePages() const;

 private:
  WeightType type_ = WeightType::kF32;
  int64_t rows_ = 0, cols_ = 0;
  const void* data_ = nullptr;
  std::shared_ptr<const void> owner_;
  bool mapped_ = false;  // View over a file mapping: ReleasePages may drop its pages
};

// y[rows, out] = x[rows, in] w^T for w [out, in] of any type: fp32 through cpu::MatMulNT (the
// small-row kernel, OpenBLAS above 32 rows), the other types through their kernels of
// kernels/cpu/matmul.h, kernels/cpu/amx.h and kernels/cpu/matmul_dot.h, each weight widened to fp32
// (AMX and dot-bf16: x rounded to bf16; dot-q8: x quantized to q8_0 blocks; dot-f16: x as it is).
void MatMul(const float* x, int rows, const WeightMatrix& w, float* y);

// y_i = x w_i^T for several matrices of the same input size, each y_i bit for bit what MatMul gives
// it. Where all of them are packed for one dot-product kernel (kDotBf16, kDotF16, kDotQ8, kDotQ4, ...), x
// is rounded or quantized once and their columns go to the compute threads in one call (a decode
// step's q, k and v: one wait at the threads' barrier instead of three); otherwise MatMul on each.
struct MatrixProduct {
  const WeightMatrix* w;
  float* y;
};
void MatMuls(const float* x, int rows, std::span<const MatrixProduct> products);

// out[r, :] = table[ids[r], :] in fp32 (an embedding lookup in the table's type).
void GatherRows(const WeightMatrix& table, const int32_t* ids, int rows, float* out);

}  // namespace steady

#endif  // STEADY_MODEL_DECODER_WEIGHTS_H_
