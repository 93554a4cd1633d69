// Decode GEMMs y = x w^T that multiply in the weights' own precision where the CPU has the
// instructions for it: bf16 x bf16 on AVX512_BF16 (VDPBF16PS) and int8 x int8 on AVX512_VNNI
// (VPDPBUSD) (matmul_dot512.cc), or on 256-bit vectors with AVX-VNNI or AVX2 (matmul_dot256.cc), and
// on AArch64 with BFDOT/BFMMLA and SDOT/SMMLA (matmul_dot_arm.cc), over weights packed once at load into the
// layout those instructions read (matmul_dot.cc: the dispatch, packing and references); and f16
// weights widened by F16C on AVX2 (matmul_f16_avx2.cc), over the same kind of layout.
// The widening kernels of matmul.h stay the fallback (where the CPU lacks the instructions) and the
// reference. Only kernels/cpu/ and the code above it include this file.
//
// The layout: output columns in groups of 16 (one AVX-512 vector of fp32 sums), and within a group
// the weights of a few consecutive inputs side by side for all 16 columns (2 bf16 or 4 int8 per
// column, the unit one VDPBF16PS / VPDPBUSD lane multiplies). A step broadcasts that unit of one
// activation row and multiplies it into all 16 columns at once: no horizontal sums, and each weight
// vector loaded once serves every row of the batch (kernels/cpu/matmul_dot512.cc has the tiling). The
// 256-bit int8 paths read each 64-byte vector as two halves of 8 columns, the Arm ones (128-bit NEON
// vectors) as four quarters of 4 columns.
//
// Both change the numerics against the widening kernels: the activations are rounded once per call
// (to bf16, or to q8_0 int8 blocks with an fp32 scale, as llama.cpp's q8_0 x q8_0 does) and the
// product is then that of the rounded activations and the stored weights. Like MatMulNTSmallRows,
// every y[r, j] is the same arithmetic whatever the number of rows, their order or the thread count.
#ifndef STEADY_KERNELS_CPU_MATMUL_DOT_H_
#define STEADY_KERNELS_CPU_MATMUL_DOT_H_

#include <cstdint>
#include <string>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/q32.h"
#include "kernels/cpu/q4k.h"
#include "kernels/cpu/q5k.h"
#include "kernels/cpu/q6k.h"

namespace steady::cpu {

// The bf16 kernels come in three paths over one packed layout (PackBf16Dot), widest first:
//  kAvx512Bf16: VDPBF16PS (AVX512_BF16 + AVX512BW/VL/DQ: Cooper Lake, Sapphire Rapids and later
//               Xeons, AMD Zen 4/5; matmul_dot512.cc);
//  kAvx2:       VDPBF16PS's arithmetic as fused multiply-adds of the widened pairs (AVX2 + FMA: every
//               x86 server CPU since Haswell and Zen 1; matmul_bf16_avx2.cc): VDPBF16PS's bits
//               wherever no input, product or sum is subnormal (VDPBF16PS flushes those to zero);
//  kArmBf16:    BFMMLA and BFDOT (AArch64's BF16 extension, Armv8.6: Graviton 3 and 4, Neoverse
//               V1/V2/N2; matmul_dot_arm.cc), whose bits differ (below);
//  kNone:       no bf16 kernel: bf16 weights take the widening kernel.
enum class Bf16Path { kAvx512Bf16, kAvx2, kArmBf16, kNone };
bool Bf16PathAvailable(Bf16Path path);  // cpuid, once; kNone always
Bf16Path WidestBf16Path();              // the first of the list this CPU has
// The path the bf16 kernels take: by default the widest this CPU has. SetBf16Path (a path the CPU
// has, else a CHECK failure) is process-wide like SetInt8Path: the CPU backend sets it from
// --cpu-gemm, tests and benchmarks to compare the paths on one CPU.
void SetBf16Path(Bf16Path path);
Bf16Path CurrentBf16Path();
// E.g. "avx512_bf16 (VDPBF16PS)", "avx2 (FMA on bf16 pairs)", "arm_bf16 (BFMMLA, BFDOT)" or
// "widening fp32 (AVX2)"; and the extension alone ("AVX512_BF16", "AVX2", "BF16"; "" for kNone).
const char* Bf16PathName(Bf16Path path);
const char* Bf16PathExtension(Bf16Path path);
// Whether the current path is a bf16 kernel (the bf16 kernels below may only be called then), its
// name and extension (for logs, benchmark labels and the backend's name).
bool Bf16DotAvailable();
const char* Bf16DotPath();
const char* Bf16DotExtension();
// This CPU as /proc/cpuinfo names it, for reports: "AMD EPYC 9R14 (family 25, model 17)" on x86 (the
// family and model tell a VM's generic "AMD EPYC" apart: Zen 4 is family 25), "implementer 0x41,
// part 0xd40" on Arm; "unknown" where it cannot be read.
std::string CpuModelName();

// The int8 kernels (q8, q4, q4k, q5k, q6k, q4_1, q5_0, q5_1 weights) come in four x86 instruction paths and two Arm paths over
// one packed layout, widest first; each sums the int8 products of a block exactly in int32 and then
// does the same fp32 arithmetic per output, so all of them give the same bits (tested, the Arm path
// against x86's results on the same inputs: tests/cli/arm64_kernels.sh):
//  kAmxInt8:    TDPBSUD on AMX tiles (AMX-INT8: Sapphire Rapids and later Xeons; matmul_dot_amx.cc),
//               16 rows x 64 columns x a block of 32 at a time (q6k: 32 columns x two halves of
//               16) from 4 rows, fewer rows on kAvx512Vnni's kernels;
//  kAvx512Vnni: VPDPBUSD on 512-bit vectors (AVX512_VNNI + AVX512BW/VL/DQ: Ice Lake and later
//               Xeons, AMD Zen 4/5);
//  kAvxVnni:    the VEX-encoded VPDPBUSD on 256-bit vectors (AVX-VNNI: Alder/Raptor Lake, Xeon 6
//               E-cores (Sierra Forest), Zen 5), with AVX2, FMA and F16C;
//  kAvx2:       VPMADDUBSW + VPMADDWD (AVX2, FMA, F16C: every x86 server CPU since Haswell and Zen 1);
//  kArmI8mm:    SMMLA (the int8 matrix-multiply extension, Armv8.6: Graviton 3 and 4, Neoverse
//               V1/V2/N2; 2 x 2 tiles of 8-input dot products, twice SDOT's multiply-adds per
//               instruction), one row as kArmDot;
//  kArmDot:     SDOT on 128-bit NEON vectors (AArch64's dot-product extension, Armv8.2+: Graviton 2-4,
//               Ampere Altra, every Neoverse core);
//  kNone:       no int8 kernel: every int8 format takes its widening kernel.
enum class Int8Path { kAmxInt8, kAvx512Vnni, kAvxVnni, kAvx2, kArmI8mm, kArmDot, kNone };
// kAmxInt8 runs on the tiles from this many rows, fewer rows on kAvx512Vnni's kernels (their 1-3
// row tiles).
constexpr int kAmxInt8MinRows = 4;
bool Int8PathAvailable(Int8Path path);  // cpuid, once; kNone always
Int8Path WidestInt8Path();              // the first of the list this CPU has
// For tests on CPUs without AMX: kAmxInt8's kernels run on AmxTileModel (kernels/cpu/amx_tiles.h, the
// tile instructions in plain C++, far slower), and kAmxInt8 is available wherever
// kAvx512Vnni is, though never the widest. Process-wide, like SetInt8Path.
void SetAmxInt8TileModel(bool on);
bool AmxInt8TileModel();
// The path the int8 kernels take: by default the widest this CPU has. SetInt8Path (a path the CPU
// has, else a CHECK failure) is process-wide like the thread count: the CPU backend sets it from
// --cpu-gemm, tests and benchmarks to compare the paths on one CPU.
void SetInt8Path(Int8Path path);
Int8Path CurrentInt8Path();
// E.g. "amx_int8 (TDPBSUD)", "avx512_vnni (VPDPBUSD)", "avx_vnni (VPDPBUSD ymm)", "avx2 (VPMADDUBSW)",
// "arm_i8mm (SMMLA)", "arm_dotprod (SDOT)" or "widening fp32 (AVX2)"; and the extension alone
// ("AMX_INT8", "AVX512_VNNI", "AVX_VNNI", "AVX2", "I8MM", "DOTPROD"; "" for kNone).
const char* Int8PathName(Int8Path path);
const char* Int8PathExtension(Int8Path path);
// Whether the current path is an int8 kernel (the int8 kernels below may only be called then),
// and its name.
bool Int8DotAvailable();
const char* Int8DotPath();

// bf16 weights packed for VDPBF16PS (and BFDOT, which reads the same pairs): per group of 16
// columns, per pair of inputs (k, k + 1), the 16 columns' two bf16 values side by side (64 bytes).
// Zero padding past `out` and `in`.
int64_t Bf16DotPackedSize(int64_t out, int64_t in);  // in uint16_t values
// w [out, in] in bf16 (FloatToBf16) -> packed (Bf16DotPackedSize values).
void PackBf16Dot(const uint16_t* w, int64_t out, int64_t in, uint16_t* packed);

// y = bf16(x) w^T: x rounded to bf16 (nearest even, FloatToBf16) once, then bf16 pairs multiplied
// and summed in fp32 by VDPBF16PS (exact products, which flushes subnormal inputs and outputs to
// zero), by the AVX2 kernel's two fused multiply-adds a pair (the odd input's product added first,
// as VDPBF16PS's definition does) or by BFDOT (whose sum of a pair rounds to odd before its addition
// unless FEAT_EBF16, so Arm's bits differ from x86's), each y[r, j] one running sum over the pairs in
// order. Only where Bf16DotAvailable().
// Against the exact product of x and w, each element is off by at most 2^-8 sum |x_k w_k| (bf16's
// relative rounding: half an ulp of 8 significant bits) plus the fp32 sum's error.
void MatMulNTBf16Dot(const float* x, int rows, int in, const uint16_t* packed, int out, float* y);
// The double-precision product of bf16(x) and the row-major w: what MatMulNTBf16Dot computes.
void MatMulNTBf16DotReference(const float* x, int rows, int in, const uint16_t* w, int out, float* y);

// f16 weights (a checkpoint's own, a GGUF file's F16 tensors) packed for the f16 kernel: per group of
// 16 columns, per input, the 16 columns' f16 values side by side (32 bytes: one VCVTPH2PS a half).
// Zero padding past `out`; the same bytes as the row-major matrix but for that padding.
int64_t F16DotPackedSize(int64_t out, int64_t in);  // in uint16_t values
// w [out, in] in f16 (FloatToF16) -> packed (F16DotPackedSize values).
void PackF16Dot(const uint16_t* w, int64_t out, int64_t in, uint16_t* packed);
// Whether the f16 kernel runs where the bf16 kernels take `path`: on x86 with AVX2, FMA and F16C
// where they take AVX2's FMAs (kAvx2: no AVX512_BF16, or --cpu-gemm avx2|avxvnni). With AVX512_BF16
// the widening kernel reads f16 on 512-bit vectors, and whether this kernel would beat it there is
// not measured (docs/cpu.md). Its name there ("avx2 (F16C + FMA on packed f16)", else the widening
// kernel's).
bool F16DotRunsOn(Bf16Path path);
const char* F16DotPathName(Bf16Path path);
// The same on the current bf16 path (the f16 kernel may only be called where available), and the
// extension for the backend's name ("F16C", or "" where it does not run).
bool F16DotAvailable();
const char* F16DotPath();
const char* F16DotExtension();
// y = x w^T with packed f16 weights: x as it is (fp32), each y[r, j] one fp32 running sum over the
// inputs in order, sum = fma(x[r, k], w[j, k], sum) with the weight widened exactly, from +0. Only
// where F16DotAvailable(). Against the exact product (matmul.h MatMulNTF16Reference), each element is
// off by at most the fp32 sum's error, in * 2^-24 * sum |x_k w_k| (the order of the widening
// kernel's lanes differs, so their bits may too).
void MatMulNTF16Dot(const float* x, int rows, int in, const uint16_t* packed, int out, float* y);

// q8_0 weights packed for VPDPBUSD: per group of 16 columns, per block of kQ8Block inputs, 8 vectors
// of the 16 columns' 4 consecutive values side by side, each stored + 128 as an unsigned byte (what
// VPDPBUSD's unsigned operand takes), then the 16 columns' fp32 scales: 576 bytes per 512 weights,
// the 1.125 bytes a weight of q8_0. Zero weights (and scales) past `out` and `in`.
int64_t Q8DotPackedSize(int64_t out, int64_t in);  // in bytes
void PackQ8Dot(Q8Weights w, int64_t out, int64_t in, uint8_t* packed);

// y = q8(x) w^T with packed q8_0 weights: each row of x quantized per block of kQ8Block by
// QuantizeQ8 (scale max|x| / 127), then per block the int8 products summed exactly in int32
// (VPDPBUSD, four at a time; the + 128 of the weights is taken off with 128 * the block's sum of x;
// AVX2: VPMADDUBSW of |q_w| by q_x with q_w's sign, pairs that cannot saturate since |q_x| <= 127)
// and scaled by x's scale times w's in fp32. Only where Int8DotAvailable(). Against the product of
// x and the dequantized w, each element is off by at most the sum over blocks of
// scale_x(block) / 2 * sum |w_k| in the block, plus the fp32 sum's error.
void MatMulNTQ8Dot(const float* x, int rows, int in, const uint8_t* packed, int out, float* y);
// The double-precision product of the dequantized q8(x) and the dequantized row-major w.
void MatMulNTQ8DotReference(const float* x, int rows, int in, Q8Weights w, int out, float* y);

// q4_0 weights (after llama.cpp's q4_0, --cpu-weights q4): blocks of kQ8Block weights, each weight
// (q - 8) * scale with q in 0..15 and the scale in IEEE half precision, 4.5 bits a weight. A block's
// scale is m / -8 for m its value of largest magnitude (sign kept), and q = min(15, trunc(w / scale
// + 8.5)): the largest magnitude is exact, the others off by at most half a step (the top step's
// values by up to one, clipped at 15). Packed as for Q8Dot: per group of 16 columns and block, 4
// vectors of the 16 columns' 4 consecutive q side by side (low nibbles: inputs 0-15 of the block, high
// nibbles: 16-31), then the 16 columns' scales (288 bytes per 512 weights). Row-major (matmul.h
// Q4Weights), the same values, for the widening kernel MatMulNTQ4 where the CPU has no int8 path.
int64_t Q4DotPackedSize(int64_t out, int64_t in);  // in bytes
// w [out, in] in fp32 -> packed (Q4DotPackedSize bytes): QuantizeQ4 (matmul.h), then PackQ4Dot.
void QuantizePackQ4Dot(const float* w, int64_t out, int64_t in, uint8_t* packed);
// Row-major q4 (matmul.h Q4Weights) -> packed, the same values.
void PackQ4Dot(Q4Weights w, int64_t out, int64_t in, uint8_t* packed);
// Rows [r0, r1) of a packed q4 matrix as fp32 values into w[(r1 - r0) * in], exactly.
void DequantizeQ4Dot(const uint8_t* packed, int64_t out, int64_t in, int64_t r0, int64_t r1, float* w);
// y = q8(x) w^T with packed q4 weights: x quantized as MatMulNTQ8Dot does, then per block the
// products of q_x and q_w - 8 summed exactly in int32 (VPDPBUSD of the nibbles, less 8 * the block's
// sum of q_x) and scaled by scale_x * scale_w in fp32. Only where Int8DotAvailable(). The same error
// bound as MatMulNTQ8Dot against x times the dequantized weights.
void MatMulNTQ4Dot(const float* x, int rows, int in, const uint8_t* packed, int out, float* y);
// q4k weights (kernels/cpu/q4k.h, --cpu-weights q4k) packed for VPDPBUSD: per group of 16 columns
// and super-block of 256 inputs, the 16 columns' d and dmin (fp16), their 8 sub-blocks' scales and
// minimums (a byte each, 16 columns side by side), then per sub-block 4 vectors of nibbles as q4's
// (low: inputs 0-15 of the sub-block, high: 16-31): 2368 bytes per 4096 weights, 4.625 bits a weight
// (the row-major block's 4.5, its 12 bytes of 6-bit numbers spread to a byte each).
int64_t Q4KDotPackedSize(int64_t out, int64_t in);  // in bytes
void PackQ4KDot(Q4KWeights w, int64_t out, int64_t in, uint8_t* packed);
// y = q8(x) w^T with packed q4k weights: x quantized as MatMulNTQ8Dot does (its q8_0 blocks of 32
// are q4k's sub-blocks), per sub-block the products of q_x and the nibbles summed exactly in int32,
// then scaled by scale_x * d * sc and the minimum's share, scale_x * (sum of q_x) * dmin * m, taken
// off in fp32. Only where Int8DotAvailable(). Against q8(x) times the dequantized weights, each
// element is off by a few fp32 roundings of sum |q8(x)_k| (|d sc q_k| + dmin m) (the two parts may
// each exceed the weight); against x times them, also by q8(x)'s error as for MatMulNTQ8Dot.
void MatMulNTQ4KDot(const float* x, int rows, int in, const uint8_t* packed, int out, float* y);

// q5k weights (kernels/cpu/q5k.h: a GGUF file's Q5_K) packed for the int8 kernels: q4k's record (the
// same d, dmin, scales, minimums and nibbles, the low 4 bits of q) with a fifth vector after each
// sub-block's four nibble vectors: its byte at the place of a nibble byte of vector v holds the
// fifth bit of that byte's low nibble in bit 2v and of its high nibble in bit 2v + 1. 2880 bytes per
// 4096 weights, 5.625 bits a weight (the file's 5.5, its 6-bit numbers spread to a byte each).
int64_t Q5KDotPackedSize(int64_t out, int64_t in);  // in bytes
void PackQ5KDot(Q5KWeights w, int64_t out, int64_t in, uint8_t* packed);
// y = q8(x) w^T with packed q5k weights: MatMulNTQ4KDot's arithmetic with q in 0..31 (the nibble with
// its fifth bit joined in the weight registers), the same error bounds. Only where Int8DotAvailable().
void MatMulNTQ5KDot(const float* x, int rows, int in, const uint8_t* packed, int out, float* y);

// q6k weights (kernels/cpu/q6k.h: a GGUF file's Q6_K) packed for the int8 kernels: per group of 16
// columns and super-block of 256 inputs, the 16 columns' d (fp16), their 16 sub-blocks' scales (an
// int8 each, 16 columns side by side), then per q8_0 block of 32 inputs (two sub-blocks) 4 vectors of
// nibbles (the low 4 bits of q: vector n holds inputs 8n..8n+3 in its low nibbles and 8n+4..8n+7 in
// its high ones, 16 columns x 4 inputs as q8's) and 2 vectors of the high 2 bits (vector h holds the
// 4 groups of 4 inputs of sub-block h in bits 0-1, 2-3, 4-5, 6-7): 3360 bytes per 4096 weights, the
// file's 6.5625 bits a weight.
int64_t Q6KDotPackedSize(int64_t out, int64_t in);  // in bytes
void PackQ6KDot(Q6KWeights w, int64_t out, int64_t in, uint8_t* packed);
// y = q8(x) w^T with packed q6k weights: x quantized as MatMulNTQ8Dot does, then per sub-block of
// 16 the products of q_x and q (0..63) summed exactly in int32 from -32 * the sub-block's sum of q_x
// (so they end at the sum of q_x (q - 32)), and added to y in fp32 as sum * (d * sc * scale_x).
// Only where Int8DotAvailable(). Against q8(x) times the weights, each element is off by a few fp32
// roundings of sum |q8(x)_k w_k| (two a sub-block); against x times them, also by q8(x)'s error as
// for MatMulNTQ8Dot.
void MatMulNTQ6KDot(const float* x, int rows, int in, const uint8_t* packed, int out, float* y);

// q32's types (kernels/cpu/q32.h: a GGUF file's Q4_1, Q5_0 and Q5_1) packed for the int8 kernels: per
// group of 16 columns and block of 32 inputs, q4's 4 vectors of nibbles (the low 4 bits of q), for
// q5_0 and q5_1 a vector of fifth bits as q5k's (the byte at the place of a nibble byte of vector v
// holds the fifth bit of its low nibble in bit 2v and of its high nibble in bit 2v + 1), the 16
// columns' fp16 d and, for q4_1 and q5_1, their fp16 m: 320, 352 and 384 bytes per 512 weights (5,
// 5.5 and 6 bits a weight; the file's 5, 5.5 and 6).
int64_t Q32DotPackedSize(Q32Type type, int64_t out, int64_t in);  // in bytes
void PackQ32Dot(Q32Weights w, int64_t out, int64_t in, uint8_t* packed);
// y = q8(x) w^T with packed q32 weights: x quantized as MatMulNTQ8Dot does, then per block the
// products of q_x and q summed exactly in int32 from -16 * the block's sum of q_x for q5_0 (so that
// they end at the sum of q_x (q - 16)), from 0 for the others, and added to y in fp32 as
// sum * (d * scale_x), then for q4_1 and q5_1 m * (scale_x * the block's sum of q_x). Only where
// Int8DotAvailable(). Against q8(x) times the weights, each element is off by a few fp32 roundings of
// sum |q8(x)_k| (|d q_k| + |m|); against x times them, also by q8(x)'s error as for MatMulNTQ8Dot.
void MatMulNTQ32Dot(Q32Type type, const float* x, int rows, int in, const uint8_t* packed, int out, float* y);

// Several products of the same activations, y_i = x w_i^T, for matrices packed for one kernel with
// the same `in`: each y_i bit for bit what the one-matrix call above gives it, with x rounded or
// quantized once and the column groups of all of them shared out over the compute threads in one
// call (a decode step's q, k and v, or gate and up: one wait at the pool's barrier instead of three
// or two, and one quantization). At most kMaxDotProducts products a call.
inline constexpr int kMaxDotProducts = 8;
struct DotProduct {
  const void* packed;  // uint16_t values for bf16 and f16, bytes for the int8 formats
  int out;             // its columns
  float* y;            // [rows, out]
};
void MatMulNTBf16Dots(const float* x, int rows, int in, const DotProduct* products, int count);
void MatMulNTF16Dots(const float* x, int rows, int in, const DotProduct* products, int count);
void MatMulNTQ8Dots(const float* x, int rows, int in, const DotProduct* products, int count);
void MatMulNTQ4Dots(const float* x, int rows, int in, const DotProduct* products, int count);
void MatMulNTQ4KDots(const float* x, int rows, int in, const DotProduct* products, int count);
void MatMulNTQ5KDots(const float* x, int rows, int in, const DotProduct* products, int count);
void MatMulNTQ4_1Dots(const float* x, int rows, int in, const DotProduct* products, int count);
void MatMulNTQ5_0Dots(const float* x, int rows, int in, const DotProduct* products, int count);
void MatMulNTQ5_1Dots(const float* x, int rows, int in, const DotProduct* products, int count);
void MatMulNTQ32Dots(Q32Type type, const float* x, int rows, int in, const DotProduct* products, int count);  // by type
void MatMulNTQ6KDots(const float* x, int rows, int in, const DotProduct* products, int count);

// The double-precision product of the dequantized q8(x) and w [out, in] in fp32 (for q4: the
// dequantized weights, DequantizeQ4Dot).
void MatMulNTQ8ActivationsReference(const float* x, int rows, int in, const float* w, int out, float* y);

}  // namespace steady::cpu

#endif  // STEADY_KERNELS_CPU_MATMUL_DOT_H_
