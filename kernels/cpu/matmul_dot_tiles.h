// What the dot-product kernels of every instruction set share (kernels/cpu only): the packed records'
// sizes, the rounded and quantized activations, and each instruction set's entry points
// (matmul_dot512.cc: AVX-512; matmul_dot256.cc: AVX-VNNI and AVX2; matmul_bf16_avx2.cc: bf16 on
// AVX2; matmul_f16_avx2.cc: f16 on AVX2; matmul_dot_arm.cc: Arm SDOT and BFDOT), which matmul_dot.cc
// dispatches to. The loop over tiles is matmul_dot_driver-inl.h.
#ifndef STEADY_KERNELS_CPU_MATMUL_DOT_TILES_H_
#define STEADY_KERNELS_CPU_MATMUL_DOT_TILES_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "base/check.h"
#include "kernels/cpu/parallel.h"

#include "kernels/cpu/matmul_dot.h"

namespace steady::cpu::dot {

inline constexpr int kGroup = 16;     // output columns per packed group: one AVX-512 vector of fp32 sums
inline constexpr int kPassRows = 32;  // rows of x whose sums are kept (in L1) during a pass over the weights
inline constexpr int kAheadTiles = 4;  // tiles of a pass that prefetch the next chunk (matmul_dot_driver-inl.h)
inline constexpr int64_t kQ8Record = 8 * 64 + 64;  // bytes per group and block: 8 weight vectors, 16 scales
// Per group and block of 32 of q4 and of q32's types (q4_1, q5_0, q5_1): 4 vectors of two nibbles,
// then for the 5-bit types a vector of fifth bits as q5k's (below), the 16 columns' fp16 d and, for
// q4_1 and q5_1, their fp16 m: 288, 320, 352 and 384 bytes per 512 weights.
inline constexpr int64_t Block32Scales(bool fifth) { return 4 * 64 + (fifth ? 64 : 0); }  // where d starts (m 32 bytes on)
inline constexpr int64_t Block32Record(bool fifth, bool min) { return Block32Scales(fifth) + 32 + (min ? 32 : 0); }
inline constexpr int64_t kQ4Record = Block32Record(false, false);
// Per group and q4k super-block: 16 fp16 d, 16 fp16 dmin, the 8 sub-blocks' 16 scales and 16
// minimums (a byte each), then per sub-block 4 vectors of two nibbles: 2368 bytes per 4096 weights.
inline constexpr int64_t kQ4KHead = 32 + 32 + 128 + 128;
inline constexpr int64_t kQ4KSubRecord = 4 * 64;
inline constexpr int64_t kQ4KRecord = kQ4KHead + 8 * kQ4KSubRecord;
// Per group and q5k super-block: q4k's record with a fifth vector after each sub-block's four, whose
// byte at a nibble's place in vector v holds the fifth bit of that low nibble's q in bit 2v and of
// the high nibble's in bit 2v + 1 (matmul_dot.h PackQ5KDot): 2880 bytes per 4096 weights.
inline constexpr int64_t kQ5KSubRecord = 5 * 64;
inline constexpr int64_t kQ5KRecord = kQ4KHead + 8 * kQ5KSubRecord;
// The two K-quant records' sizes by whether they have the fifth vectors (q5k) or not (q4k).
inline constexpr int64_t KQuantSubRecord(bool fifth) { return fifth ? kQ5KSubRecord : kQ4KSubRecord; }
inline constexpr int64_t KQuantRecord(bool fifth) { return fifth ? kQ5KRecord : kQ4KRecord; }
// Per group and q6k super-block: 16 fp16 d, the 16 sub-blocks' 16 scales (an int8 each), then per q8_0
// block 4 vectors of nibbles and 2 of high bits: 3360 bytes per 4096 weights (matmul_dot.h PackQ6KDot).
inline constexpr int64_t kQ6KHead = 32 + 256;
inline constexpr int64_t kQ6KBlockRecord = 6 * 64;
inline constexpr int64_t kQ6KRecord = kQ6KHead + 8 * kQ6KBlockRecord;

inline int64_t Groups(int64_t out) { return (out + kGroup - 1) / kGroup; }

// Asks for bytes [lo, hi) past p in each of C column groups' weight streams (`stride` bytes apart) to
// be brought into L2: the weights a tile will read one chunk later (matmul_dot_driver-inl.h says when).
template <int C>
inline void PrefetchGroups(const uint8_t* p, int64_t stride, int64_t lo, int64_t hi) {
  for (int c = 0; c < C; ++c) {
    for (int64_t o = lo; o < hi; o += 64) __builtin_prefetch(p + c * stride + o, 0, 2);
  }
}

// The activations of the int8 kernels: each row quantized per q8_0 block (QuantizeQ8's arithmetic).
// Every q is in -127..127 and xsum is the sum of the stored bytes, so any exact int32 dot product
// of them (VPDPBUSD, or VPMADDUBSW's pairs) gives the same sums.
struct Q8Rows {
  const int8_t* x;      // [rows, blocks * 32], zero padded
  const float* xscale;  // [rows, blocks]
  const int32_t* xsum;  // [rows, blocks]: the block's sum of q_x
  int64_t blocks;
  // [rows, blocks * 2]: the sums of q_x over inputs 0-15 and 16-31 of each block (q6k's sub-blocks);
  // only after WithHalfSums.
  const int32_t* xhalf = nullptr;

  int32_t HalfSum(int r, int64_t b, int h) const { return xhalf[(r * blocks + b) * 2 + h]; }  // after WithHalfSums
  int32_t Four(int r, int64_t b, int u) const {  // inputs 4u..4u+3 of row r's block b
    int32_t four;
    std::memcpy(&four, x + (r * blocks + b) * 32 + u * 4, 4);
    return four;
  }
};

// One row's q8_0 quantization, a block at a time: q (blocks * 32, zero padded), scales and sums.
using QuantizeRowFn = void (*)(const float* x, int64_t in, int8_t* q, float* scales, int32_t* sums);
// Every row of x through `quantize` into per-thread scratch (valid until the thread's next call).
Q8Rows QuantizeRows(const float* x, int rows, int in, QuantizeRowFn quantize);
// x with its half-block sums (xhalf), into per-thread scratch beside QuantizeRows's.
Q8Rows WithHalfSums(Q8Rows x, int rows);
// QuantizeQ8's own loop (kernels/cpu/matmul.h) as a QuantizeRowFn, for the instruction sets with no
// quantizer of their own: the same q, scales and sums as the vector quantizers.
void QuantizeRowScalar(const float* x, int64_t in, int8_t* q, float* scales, int32_t* sums);
// The AVX-512 quantizer (matmul_dot512.cc; only where AVX512BW/DQ run), the same q, scales and sums.
void QuantizeRow512(const float* x, int64_t in, int8_t* q, float* scales, int32_t* sums);

// The activations of the bf16 kernels: each row rounded to bf16 (FloatToBf16's arithmetic), two
// values to a 32-bit unit, an odd tail padded with zero.
struct Bf16Rows {
  const uint32_t* x;  // [rows, pairs]
  int64_t pairs;
};
// One row's rounding: n values of x to bf16 at out.
using RoundRowFn = void (*)(const float* x, int64_t n, uint16_t* out);
Bf16Rows RoundRows(const float* x, int rows, int in, RoundRowFn round);  // per-thread scratch, as above
void RoundRowScalar(const float* x, int64_t n, uint16_t* out);         // FloatToBf16 of each
// The same rounding with each value widened back to fp32 (the AVX2 kernel broadcasts them): [rows,
// 2 * pairs] into per-thread scratch, an odd tail padded with zero.
using RoundFloatsFn = void (*)(const float* x, int64_t n, float* out);
const float* RoundRowsToFloats(const float* x, int rows, int in, RoundFloatsFn round);

// Per-thread scratch that grows and is never shrunk (a decode step calls these kernels hundreds of
// times: no allocation once it has grown).
template <typename T>
T* Scratch(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// Several products of the same rows of x (DotProducts, matmul_dot.h): range(i, g0, g1) computes
// product i's column groups [g0, g1), and the groups of all of them are split over the compute threads
// in one call, in runs of whole tiles of `tile` groups, so a decode step's q, k and v wait at the
// pool's barrier once. No output's arithmetic may depend on the split or on the other products.
template <class Range>
void SplitGroups(int64_t tile, int rows, int in, const DotProduct* products, int count, const Range& range) {
  STEADY_CHECK(count >= 1 && count <= kMaxDotProducts);
  int64_t groups = 0, outs = 0;
  for (int i = 0; i < count; ++i) {
    groups += Groups(products[i].out);
    outs += products[i].out;
  }
  if (int64_t(rows) * in * outs < kMinParallelWork) {
    for (int i = 0; i < count; ++i) range(i, 0, Groups(products[i].out));
    return;
  }
  // Tasks shrink as the work left does (a share 1 / (2 threads) of it each, whole tiles): the
  // threads claim them in order, so the last ones are short and no thread waits long for another
  // (with equal tasks of about a quarter of a thread's share, the pool's wait at the end of a
  // 16-session q8 step's GEMMs was 5.8% of the profile; shrinking, 4.6%).
  const int threads = ComputeThreads();
  struct Task {
    int product;
    int64_t g0, g1;
  };
  // This thread's list, read by the pool's threads until ParallelFor returns; the tasks never call
  // SplitGroups, so it is not rewritten meanwhile (checked).
  thread_local std::vector<Task> tasks;
  thread_local bool listed = false;
  STEADY_CHECK(!listed);
  listed = true;
  tasks.clear();
  int64_t left = groups;
  for (int i = 0; i < count; ++i) {
    const int64_t n = Groups(products[i].out);
    for (int64_t g = 0; g < n;) {
      const int64_t size = std::max<int64_t>(tile, (left / (2 * threads) + tile - 1) / tile * tile);
      const int64_t end = std::min(n, g + size);
      tasks.push_back({i, g, end});
      left -= end - g;
      g = end;
    }
  }
  const Task* list = tasks.data();
  ParallelFor(int(tasks.size()), [&](int t) { range(list[t].product, list[t].g0, list[t].g1); });
  listed = false;
}

// One instruction path's int8 kernels: MatMulNTQ8Dots, MatMulNTQ4Dots, MatMulNTQ4KDots,
// MatMulNTQ5KDots, MatMulNTQ6KDots and MatMulNTQ32Dots' three of matmul_dot.h, each quantizing x
// itself, once for all its products.
using Int8Kernel = void (*)(const float* x, int rows, int in, const DotProduct* products, int count);
struct Int8Kernels {
  Int8Kernel q8, q4, q4k, q5k, q6k, q4_1, q5_0, q5_1;
};
// Each defined only where its instruction set is compiled (x86-64 or AArch64).
extern const Int8Kernels kAmxInt8Kernels;       // matmul_dot_amx.cc (TDPBSUD; 1-3 rows on VPDPBUSD)
extern const Int8Kernels kAmxInt8ModelKernels;  // the same on AmxTileModel (amx_tiles.h), for CPUs without AMX
extern const Int8Kernels kAvx512VnniKernels;    // matmul_dot512.cc
extern const Int8Kernels kAvxVnniKernels;     // matmul_dot256.cc
extern const Int8Kernels kAvx2Kernels;        // matmul_dot256.cc
extern const Int8Kernels kArmDotKernels;      // matmul_dot_arm.cc
extern const Int8Kernels kArmI8mmKernels;     // matmul_dot_arm.cc (SMMLA; one row on SDOT)
// MatMulNTBf16Dots on each bf16 path.
void MatMulNTBf16Dots512(const float* x, int rows, int in, const DotProduct* products, int count);   // matmul_dot512.cc
void MatMulNTBf16DotsAvx2(const float* x, int rows, int in, const DotProduct* products, int count);  // matmul_bf16_avx2.cc
void MatMulNTBf16DotsArm(const float* x, int rows, int in, const DotProduct* products, int count);   // matmul_dot_arm.cc
// MatMulNTF16Dots (AVX2, FMA and F16C).
void MatMulNTF16DotsAvx2(const float* x, int rows, int in, const DotProduct* products, int count);  // matmul_f16_avx2.cc

}  // namespace steady::cpu::dot

#endif  // STEADY_KERNELS_CPU_MATMUL_DOT_TILES_H_
