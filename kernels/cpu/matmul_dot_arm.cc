// The dot-product kernels on AArch64 (matmul_dot.h): int8 x int8 on SDOT (the dot-product extension,
// Armv8.2+: Graviton 2-4, Ampere Altra, every Neoverse core) and bf16 x bf16 on BFDOT (the BF16
// extension, Armv8.6: Graviton 3 and 4, Neoverse V1/V2/N2), NEON intrinsics in functions compiled
// for their own target (the rest of the binary stays baseline Armv8-A), called by matmul_dot.cc only
// after its run-time check (getauxval). The packed layout is x86's: a 64-byte vector of 16 columns x
// 4 inputs is four 128-bit quarters of 4 columns, quarter q of group c being q % 4 of vector c.
//
// int8: SDOT multiplies signed bytes by signed bytes, 4 to a lane, into int32. The q8 weights are
// stored + 128 (VPDPBUSD's unsigned operand): flipping their top bit gives q_w back as a signed
// byte, so the sums start at 0, not at -128 * the block's sum of q_x. The 4-bit weights (0..15) are
// non-negative signed bytes as they are. The int32 sums are then the exact sums of q_x q_w, and the
// fp32 steps after them are the AVX-512 kernels' operations per lane (a conversion, a product, a
// fused multiply-add; q4k's and q5k's fused multiply-subtract), so SDOT gives x86's bits: tests/cli/
// arm64_kernels.sh compares them on the same inputs.
//
// bf16: BFDOT adds a pair of bf16 products to each fp32 lane as VDPBF16PS does, but rounds the
// pair's sum to odd before the addition (without FEAT_EBF16), so its bits differ from x86's; the
// tests hold it to the same bound against the double reference.
//
// From two rows on, SMMLA (I8MM) and BFMMLA (BF16) take over (namespaces i8mm and bfdot, below):
// 2 x 2 tiles of dot products, twice the multiply-adds per instruction, the same bits.
//
// Register tiles: 2 rows x 2 groups, 16 accumulators of the 32 NEON registers, 8 weight quarters and
// x (SMMLA and BFMMLA: 4 rows x 1 group, also 16). Not measured on Arm hardware (docs/cpu.md): this
// is the 256-bit kernels' tile, which was the fastest there at 1 and 16 rows.
#if defined(__aarch64__)

#include <arm_neon.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/matmul_dot_tiles.h"
#include "kernels/cpu/parallel.h"

namespace steady::cpu::dot {
namespace {

constexpr int kArmTileRows = 2, kArmTileGroups = 2;
// The tiles ignore the driver's `ahead` (the next chunk's weights prefetched): it was measured on x86
// only (docs/cpu.md), and without an Arm machine its effect on Neoverse's prefetchers is unknown.

// The 4 values of quarter q (columns 4 (q % 4)..) of the 16-column record at p.
inline const uint8_t* Quarter(const uint8_t* p, int q) { return p + (q % 4) * 16; }

namespace sdot {
#define STEADY_ARM_TARGET __attribute__((target("arch=armv8.2-a+dotprod")))

// s[rr][q] = -offset * the sum of q_x of row r + rr's block b.
template <int R, int Q>
STEADY_ARM_TARGET inline void Start(const Q8Rows& x, int r, int64_t b, int32_t offset, int32x4_t (&s)[R][Q]) {
  for (int rr = 0; rr < R; ++rr) {
    const int32x4_t start = vdupq_n_s32(-offset * x.xsum[(r + rr) * x.blocks + b]);
    for (int q = 0; q < Q; ++q) s[rr][q] = start;
  }
}
// s[rr][q] += the quarters' 4 weights wv[q] times row r + rr's inputs 4u..4u+3 of block b.
template <int R, int Q>
STEADY_ARM_TARGET inline void Add(const Q8Rows& x, int r, int64_t b, int u, const int8x16_t (&wv)[Q], int32x4_t (&s)[R][Q]) {
  for (int rr = 0; rr < R; ++rr) {
    const int8x16_t xv = vreinterpretq_s8_s32(vdupq_n_s32(x.Four(r + rr, b, u)));
    for (int q = 0; q < Q; ++q) s[rr][q] = vdotq_s32(s[rr][q], wv[q], xv);
  }
}
// acc[rr][quarter q] += s[rr][q] * (ws[q] * scale_x(row r + rr, block b)), in fp32.
template <int R, int Q>
STEADY_ARM_TARGET inline void Scale(const Q8Rows& x, int r, int64_t b, const int32x4_t (&s)[R][Q], const float32x4_t (&ws)[Q],
                                    float* acc) {
  for (int q = 0; q < Q; ++q) {
    for (int rr = 0; rr < R; ++rr) {
      float* a = acc + (rr * Q + q) * 4;
      const float32x4_t scale = vmulq_n_f32(ws[q], x.xscale[(r + rr) * x.blocks + b]);
      vst1q_f32(a, vfmaq_f32(vld1q_f32(a), vcvtq_f32_s32(s[rr][q]), scale));
    }
  }
}
// Four fp16 values at p, widened exactly.
STEADY_ARM_TARGET inline float32x4_t LoadF16(const uint8_t* p) {
  return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(reinterpret_cast<const uint16_t*>(p))));
}
// Four bytes at p, widened to fp32 exactly.
STEADY_ARM_TARGET inline float32x4_t LoadU8(const uint8_t* p) {
  uint32_t four;
  std::memcpy(&four, p, 4);
  return vcvtq_f32_u32(vmovl_u16(vget_low_u16(vmovl_u8(vcreate_u8(four)))));
}

// Q8Op of matmul_dot512.cc on quarters.
struct Q8Op {
  Q8Rows x;
  const uint8_t* w;  // packed, at the tile's first group
  int64_t steps;     // blocks
  static constexpr int64_t kChunk = 8;
  static constexpr int kTileRows = kArmTileRows, kTileGroups = kArmTileGroups;

  Q8Op Shift(int64_t groups) const { return {x, w + groups * steps * kQ8Record, steps}; }

  template <int R, int C>
  STEADY_ARM_TARGET void Tile(int r, int64_t b0, int64_t b1, float* acc, bool /*ahead*/) const {
    constexpr int Q = 4 * C;
    const uint8x16_t top = vdupq_n_u8(0x80);
    for (int64_t b = b0; b < b1; ++b) {
      int32x4_t s[R][Q];
      Start(x, r, b, 0, s);
      const uint8_t* wb = w + b * kQ8Record;
      for (int u = 0; u < 8; ++u) {
        int8x16_t wv[Q];
        for (int q = 0; q < Q; ++q) {
          wv[q] = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(Quarter(wb + (q / 4) * steps * kQ8Record + u * 64, q)), top));
        }
        Add(x, r, b, u, wv, s);
      }
      float32x4_t ws[Q];
      for (int q = 0; q < Q; ++q) {
        ws[q] = vld1q_f32(reinterpret_cast<const float*>(Quarter(wb + (q / 4) * steps * kQ8Record + 512, q)));
      }
      Scale(x, r, b, s, ws, acc);
    }
  }
};

// Bit m of every byte of q5k's fifth vector moved to bit 4 (matmul_dot512.cc's FifthBits): one
// shift by a signed count (left for m < 4, right above), byte by byte.
STEADY_ARM_TARGET inline uint8x16_t FifthBits(uint8x16_t fv, int m) {
  return vandq_u8(vshlq_u8(fv, vdupq_n_s8(int8_t(4 - m))), vdupq_n_u8(0x10));
}

// s += the nibbles of vector v (low: inputs 4v..4v+3 of block xb, high: 16 + 4v..) of the quarters
// at rec[q] (a record's nibble vectors, each group's) times rows r..r+R-1 of x; with kFifth (q5k,
// q5_0, q5_1) each joined to its fifth bit from the fifth vector after the four.
template <bool kFifth, int R, int Q>
STEADY_ARM_TARGET inline void AddNibbles(const Q8Rows& x, int r, int64_t xb, int v, const uint8_t* const (&rec)[Q],
                                         int32x4_t (&s)[R][Q]) {
  const uint8x16_t low = vdupq_n_u8(0x0f);
  uint8x16_t raw[Q], fifth[Q];
  int8x16_t wv[Q];
  for (int q = 0; q < Q; ++q) {
    raw[q] = vld1q_u8(Quarter(rec[q] + v * 64, q));
    if constexpr (kFifth) fifth[q] = vld1q_u8(Quarter(rec[q] + 4 * 64, q));
  }
  for (int q = 0; q < Q; ++q) {
    uint8x16_t n = vandq_u8(raw[q], low);
    if constexpr (kFifth) n = vorrq_u8(n, FifthBits(fifth[q], 2 * v));
    wv[q] = vreinterpretq_s8_u8(n);
  }
  Add(x, r, xb, v, wv, s);
  for (int q = 0; q < Q; ++q) {
    uint8x16_t n = vshrq_n_u8(raw[q], 4);
    if constexpr (kFifth) n = vorrq_u8(n, FifthBits(fifth[q], 2 * v + 1));
    wv[q] = vreinterpretq_s8_u8(n);
  }
  Add(x, r, xb, v + 4, wv, s);
}

// m * (scale_x * the block's sum of q_x) added to acc[rr][quarter q] for q4_1 and q5_1 (Block32Op of
// matmul_dot512.cc), the fp16 m of each quarter at rec[q] + at.
template <int R, int Q>
STEADY_ARM_TARGET inline void AddMinimums(const Q8Rows& x, int r, int64_t b, const uint8_t* const (&rec)[Q], int64_t at,
                                          float* acc) {
  for (int q = 0; q < Q; ++q) {
    const float32x4_t m = LoadF16(rec[q] + at + (q % 4) * 8);
    for (int rr = 0; rr < R; ++rr) {
      float* a = acc + (rr * Q + q) * 4;
      const int64_t i = (r + rr) * x.blocks + b;
      vst1q_f32(a, vfmaq_f32(vld1q_f32(a), m, vdupq_n_f32(x.xscale[i] * float(x.xsum[i]))));
    }
  }
}

// Block32Op (q4, q4_1, q5_0, q5_1) of matmul_dot512.cc: the sums start at -kOffset * the block's sum
// of q_x; with kMin the blocks' m times scale_x times their sum of q_x after the scaled sums.
template <bool kFifth, bool kMin, int kOffset>
struct Block32Op {
  Q8Rows x;
  const uint8_t* w;  // packed, at the tile's first group
  int64_t steps;     // blocks
  static constexpr int64_t kRecord = Block32Record(kFifth, kMin), kScales = Block32Scales(kFifth);
  static constexpr int64_t kChunk = 16;
  static constexpr int kTileRows = kArmTileRows, kTileGroups = kArmTileGroups;

  Block32Op Shift(int64_t groups) const { return {x, w + groups * steps * kRecord, steps}; }

  template <int R, int C>
  STEADY_ARM_TARGET void Tile(int r, int64_t b0, int64_t b1, float* acc, bool /*ahead*/) const {
    constexpr int Q = 4 * C;
    for (int64_t b = b0; b < b1; ++b) {
      int32x4_t s[R][Q];
      Start(x, r, b, kOffset, s);
      const uint8_t* wb = w + b * kRecord;
      const uint8_t* rec[Q];
      for (int q = 0; q < Q; ++q) rec[q] = wb + (q / 4) * steps * kRecord;
      for (int v = 0; v < 4; ++v) AddNibbles<kFifth>(x, r, b, v, rec, s);
      float32x4_t ws[Q];
      for (int q = 0; q < Q; ++q) ws[q] = LoadF16(rec[q] + kScales + (q % 4) * 8);
      Scale(x, r, b, s, ws, acc);
      if constexpr (kMin) AddMinimums<R>(x, r, b, rec, kScales + 32, acc);
    }
  }
};
using Q4Op = Block32Op<false, false, 8>;

// q4k's and q5k's fp32 step for sub-block `sub` (x's block xb) of super-block record wb (the tile's
// first group; groups `steps` records of `record` bytes apart), from the sums of q times q_x:
//     acc += sum * (scale_x * d * sc)  -  (scale_x * sum of q_x) * (dmin * m).
template <int R, int Q>
STEADY_ARM_TARGET inline void ScaleKQuant(const Q8Rows& x, int r, int64_t xb, int64_t sub, const uint8_t* wb, int64_t steps,
                                          int64_t record, const int32x4_t (&sums)[R][Q], float* acc) {
  for (int q = 0; q < Q; ++q) {
    const uint8_t* g = wb + (q / 4) * steps * record;
    const int lane = (q % 4) * 4;  // the quarter's first column
    const float32x4_t d = LoadF16(g + 2 * lane), dmin = LoadF16(g + 32 + 2 * lane);
    const float32x4_t scale = vmulq_f32(d, LoadU8(g + 64 + 16 * sub + lane));
    const float32x4_t min = vmulq_f32(dmin, LoadU8(g + 192 + 16 * sub + lane));
    for (int rr = 0; rr < R; ++rr) {
      float* a = acc + (rr * Q + q) * 4;
      const int64_t i = (r + rr) * x.blocks + xb;
      const float dx = x.xscale[i];
      float32x4_t sum = vfmaq_f32(vld1q_f32(a), vcvtq_f32_s32(sums[rr][q]), vmulq_n_f32(scale, dx));
      sum = vfmsq_f32(sum, min, vdupq_n_f32(dx * float(x.xsum[i])));
      vst1q_f32(a, sum);
    }
  }
}

// KQuantOp (q4k, q5k) of matmul_dot512.cc: per sub-block the exact sums, then ScaleKQuant.
template <bool kFifth>
struct KQuantOp {
  Q8Rows x;
  const uint8_t* w;  // packed, at the tile's first group
  int64_t steps;     // super-blocks
  static constexpr int64_t kRecord = KQuantRecord(kFifth), kSubRecord = KQuantSubRecord(kFifth);
  static constexpr int64_t kChunk = 2;
  static constexpr int kTileRows = kArmTileRows, kTileGroups = kArmTileGroups;

  KQuantOp Shift(int64_t groups) const { return {x, w + groups * steps * kRecord, steps}; }

  template <int R, int C>
  STEADY_ARM_TARGET void Tile(int r, int64_t b0, int64_t b1, float* acc, bool /*ahead*/) const {
    constexpr int Q = 4 * C;
    for (int64_t b = b0; b < b1; ++b) {
      const uint8_t* wb = w + b * kRecord;
      // x's padding ends at its last q8_0 block; the weights' sub-blocks past it are zero.
      const int64_t subs = std::min<int64_t>(8, x.blocks - 8 * b);
      for (int64_t sub = 0; sub < subs; ++sub) {
        const int64_t xb = 8 * b + sub;
        int32x4_t sums[R][Q];
        Start(x, r, xb, 0, sums);
        const uint8_t* rec[Q];
        for (int q = 0; q < Q; ++q) rec[q] = wb + (q / 4) * steps * kRecord + kQ4KHead + sub * kSubRecord;
        for (int v = 0; v < 4; ++v) AddNibbles<kFifth>(x, r, xb, v, rec, sums);
        ScaleKQuant(x, r, xb, sub, wb, steps, kRecord, sums, acc);
      }
    }
  }
};

// Four int8 values at p, widened to fp32 exactly.
STEADY_ARM_TARGET inline float32x4_t LoadS8(const uint8_t* p) {
  uint32_t four;
  std::memcpy(&four, p, 4);
  return vcvtq_f32_s32(vmovl_s16(vget_low_s16(vmovl_s8(vcreate_s8(four)))));
}

// Bits 2v and 2v + 1 of every byte of q6k's high-bit vector moved to bits 4 and 5 (matmul_dot512.cc's
// HighBits): a left shift by 4 - 2v (right by 2 for v = 3), byte by byte.
STEADY_ARM_TARGET inline uint8x16_t HighBits(uint8x16_t hv, int v) {
  return vandq_u8(vshlq_u8(hv, vdupq_n_s8(int8_t(4 - 2 * v))), vdupq_n_u8(0x30));
}

// q6k's fp32 step for sub-block `sub` (16 inputs, half of x's block xb) of super-block record wb
// (the tile's first group; groups `steps` records apart), from the sums of q times q_x:
//     acc += sum * (d * sc * scale_x).
template <int R, int Q>
STEADY_ARM_TARGET inline void ScaleQ6K(const Q8Rows& x, int r, int64_t xb, int64_t sub, const uint8_t* wb, int64_t steps,
                                       const int32x4_t (&sums)[R][Q], float* acc) {
  for (int q = 0; q < Q; ++q) {
    const uint8_t* g = wb + (q / 4) * steps * kQ6KRecord;
    const int lane = (q % 4) * 4;  // the quarter's first column
    const float32x4_t scale = vmulq_f32(LoadF16(g + 2 * lane), LoadS8(g + 32 + 16 * sub + lane));
    for (int rr = 0; rr < R; ++rr) {
      float* a = acc + (rr * Q + q) * 4;
      const float dx = x.xscale[(r + rr) * x.blocks + xb];
      vst1q_f32(a, vfmaq_f32(vld1q_f32(a), vcvtq_f32_s32(sums[rr][q]), vmulq_n_f32(scale, dx)));
    }
  }
}

// Q6KOp of matmul_dot512.cc on quarters: the 6-bit q (0..63) are non-negative signed bytes, the
// sums start at -32 * the sub-block's sum of q_x; the byte shifts need no masking across bytes.
struct Q6KOp {
  Q8Rows x;          // WithHalfSums
  const uint8_t* w;  // packed, at the tile's first group
  int64_t steps;     // super-blocks
  static constexpr int64_t kChunk = 1;
  static constexpr int kTileRows = kArmTileRows, kTileGroups = kArmTileGroups;

  Q6KOp Shift(int64_t groups) const { return {x, w + groups * steps * kQ6KRecord, steps}; }

  template <int R, int C>
  STEADY_ARM_TARGET void Tile(int r, int64_t b0, int64_t b1, float* acc, bool /*ahead*/) const {
    constexpr int Q = 4 * C;
    const uint8x16_t low = vdupq_n_u8(0x0f);
    for (int64_t b = b0; b < b1; ++b) {
      const uint8_t* wb = w + b * kQ6KRecord;
      const int64_t xblocks = std::min<int64_t>(8, x.blocks - 8 * b);
      for (int64_t blk = 0; blk < xblocks; ++blk) {
        const int64_t xb = 8 * b + blk;
        for (int h = 0; h < 2; ++h) {  // sub-block 2 blk + h
          int32x4_t sums[R][Q];
          for (int rr = 0; rr < R; ++rr) {
            const int32x4_t start = vdupq_n_s32(-32 * x.HalfSum(r + rr, xb, h));
            for (int q = 0; q < Q; ++q) sums[rr][q] = start;
          }
          for (int v = 0; v < 4; ++v) {
            const int u = 4 * h + v;
            int8x16_t wv[Q];
            for (int q = 0; q < Q; ++q) {
              const uint8_t* p = wb + (q / 4) * steps * kQ6KRecord + kQ6KHead + blk * kQ6KBlockRecord;
              const uint8x16_t nib = vld1q_u8(Quarter(p + (u / 2) * 64, q));
              const uint8x16_t lo = u % 2 == 0 ? vandq_u8(nib, low) : vshrq_n_u8(nib, 4);
              wv[q] = vreinterpretq_s8_u8(vorrq_u8(lo, HighBits(vld1q_u8(Quarter(p + 256 + h * 64, q)), v)));
            }
            Add(x, r, xb, u, wv, sums);
          }
          ScaleQ6K(x, r, xb, 2 * blk + h, wb, steps, sums, acc);
        }
      }
    }
  }
};

#define STEADY_DRIVER_TARGET STEADY_ARM_TARGET
#include "kernels/cpu/matmul_dot_driver-inl.h"
#undef STEADY_DRIVER_TARGET
#undef STEADY_ARM_TARGET

template <class Op>
void Multiply(const float* x, int rows, int in, const DotProduct* products, int count, int64_t steps) {
  Q8Rows xq = QuantizeRows(x, rows, in, QuantizeRowScalar);
  if constexpr (std::is_same_v<Op, Q6KOp>) xq = WithHalfSums(xq, rows);  // q6k's sub-blocks are half a block
  auto make = [&](const void* packed) { return Op{xq, static_cast<const uint8_t*>(packed), steps}; };
  Run(make, rows, in, products, count);
}

void Q8Dot(const float* x, int rows, int in, const DotProduct* products, int count) {
  Multiply<Q8Op>(x, rows, in, products, count, Q8BlocksPerRow(in));
}
void Q4Dot(const float* x, int rows, int in, const DotProduct* products, int count) {
  Multiply<Q4Op>(x, rows, in, products, count, Q8BlocksPerRow(in));
}
void Q4KDot(const float* x, int rows, int in, const DotProduct* products, int count) {
  Multiply<KQuantOp<false>>(x, rows, in, products, count, Q4KBlocksPerRow(in));
}
void Q5KDot(const float* x, int rows, int in, const DotProduct* products, int count) {
  Multiply<KQuantOp<true>>(x, rows, in, products, count, Q5KBlocksPerRow(in));
}
void Q6KDot(const float* x, int rows, int in, const DotProduct* products, int count) {
  Multiply<Q6KOp>(x, rows, in, products, count, Q6KBlocksPerRow(in));
}
void Q4_1Dot(const float* x, int rows, int in, const DotProduct* products, int count) {
  Multiply<Block32Op<false, true, 0>>(x, rows, in, products, count, Q8BlocksPerRow(in));
}
void Q5_0Dot(const float* x, int rows, int in, const DotProduct* products, int count) {
  Multiply<Block32Op<true, false, 16>>(x, rows, in, products, count, Q8BlocksPerRow(in));
}
void Q5_1Dot(const float* x, int rows, int in, const DotProduct* products, int count) {
  Multiply<Block32Op<true, true, 0>>(x, rows, in, products, count, Q8BlocksPerRow(in));
}

}  // namespace sdot

namespace i8mm {
#define STEADY_ARM_TARGET __attribute__((target("arch=armv8.2-a+dotprod+i8mm")))

// The int8 kernels on SMMLA (the int8 matrix-multiply extension, Armv8.6: Graviton 3 and 4,
// Neoverse V1/V2/N2): each instruction multiplies 2 rows x 8 inputs of x by 2 columns x 8 inputs of
// the weights into a 2 x 2 tile of int32 sums, 32 multiply-adds to SDOT's 16. The weights stay in
// the packed layout the other paths read: the 4 columns of a quarter with inputs 8k..8k+3 (a 32-bit
// lane each) zipped by lanes with the same columns' inputs 8k+4..8k+7 give columns 0 and 1 with
// their 8 inputs each, and the upper halves columns 2 and 3. A tile is 4 rows (two row pairs, each
// column operand used twice) x 1 group (4 quarters, 8 column pairs): 16 accumulators. The int32
// sums are exact, so once the 2 x 2 tiles are un-zipped into rows, SDOT's fp32 steps give every
// other path's bits.
constexpr int kTileRows = 4, kTileGroups = 1;

// rows[rr][q]: the exact sums over inputs 8 k0 .. 8 k1 - 1 of x's block xb of row r + rr times the
// quarter's 4 columns. halves(q, k, lo, hi) gives quarter q's weights for inputs 8k..8k+3 (lo) and
// 8k+4..8k+7 (hi) as signed bytes, a column to a 32-bit lane.
template <int R, int Q, class Halves>
STEADY_ARM_TARGET inline void Sums(const Q8Rows& x, int r, int64_t xb, int k0, int k1, Halves halves,
                                   int32x4_t (&rows)[R][Q]) {
  constexpr int P = (R + 1) / 2;  // row pairs (an odd last row paired with itself)
  int32x4_t s[P][Q][2];           // [pair][quarter][columns 0-1 | 2-3]: rows (2p, 2p + 1) x 2 columns
  for (int p = 0; p < P; ++p) {
    for (int q = 0; q < Q; ++q) s[p][q][0] = s[p][q][1] = vdupq_n_s32(0);
  }
  for (int k = k0; k < k1; ++k) {
    int8x16_t xv[P];
    for (int p = 0; p < P; ++p) {
      const int r0 = r + 2 * p, r1 = std::min(r0 + 1, r + R - 1);
      xv[p] = vcombine_s8(vld1_s8(x.x + (r0 * x.blocks + xb) * 32 + 8 * k), vld1_s8(x.x + (r1 * x.blocks + xb) * 32 + 8 * k));
    }
    for (int q = 0; q < Q; ++q) {
      int32x4_t lo, hi;
      halves(q, k, lo, hi);
      const int8x16_t w01 = vreinterpretq_s8_s32(vzip1q_s32(lo, hi)), w23 = vreinterpretq_s8_s32(vzip2q_s32(lo, hi));
      for (int p = 0; p < P; ++p) {
        s[p][q][0] = vmmlaq_s32(s[p][q][0], xv[p], w01);
        s[p][q][1] = vmmlaq_s32(s[p][q][1], xv[p], w23);
      }
    }
  }
  // Row 2p's 4 columns from the tiles' low halves, 2p + 1's from their high halves.
  for (int p = 0; p < P; ++p) {
    for (int q = 0; q < Q; ++q) {
      const int64x2_t a = vreinterpretq_s64_s32(s[p][q][0]), c = vreinterpretq_s64_s32(s[p][q][1]);
      for (int h = 0; h < 2 && 2 * p + h < R; ++h) {
        rows[2 * p + h][q] = vreinterpretq_s32_s64(h == 0 ? vzip1q_s64(a, c) : vzip2q_s64(a, c));
      }
    }
  }
}
// rows[rr][q] += first(rr) in every lane (where a row's sums start: exact in int32).
template <int R, int Q, class First>
STEADY_ARM_TARGET inline void AddFirst(First first, int32x4_t (&rows)[R][Q]) {
  for (int rr = 0; rr < R; ++rr) {
    const int32x4_t f = vdupq_n_s32(first(rr));
    for (int q = 0; q < Q; ++q) rows[rr][q] = vaddq_s32(rows[rr][q], f);
  }
}
// Sums over the whole block (32 inputs), starting at `start` times the block's sum of q_x.
template <int R, int Q, class Halves>
STEADY_ARM_TARGET inline void BlockSums(const Q8Rows& x, int r, int64_t xb, int32_t start, Halves halves,
                                        int32x4_t (&rows)[R][Q]) {
  Sums(x, r, xb, 0, 4, halves, rows);
  if (start != 0) AddFirst([&](int rr) { return start * x.xsum[(r + rr) * x.blocks + xb]; }, rows);
}

// The nibble halves of a 4-bit record (q4's block, q4k's sub-block: vector v holds inputs 4v..4v+3
// in its low nibbles and 16 + 4v.. in its high ones): inputs 8k.. are vectors 2k and 2k + 1 for k
// < 2, the same vectors' high nibbles 16 + 8(k - 2).. after. With kFifth (q5k's sub-block) each
// nibble is joined to its fifth bit from the fifth vector after the four (sdot::FifthBits).
template <bool kFifth>
struct NibbleHalves {
  const uint8_t* rec[4 * kTileGroups];
  STEADY_ARM_TARGET void operator()(int q, int k, int32x4_t& lo, int32x4_t& hi) const {
    const uint8x16_t low = vdupq_n_u8(0x0f);
    const int v = 2 * (k % 2), high = k >= 2 ? 1 : 0;
    uint8x16_t a = vld1q_u8(Quarter(rec[q] + v * 64, q)), b = vld1q_u8(Quarter(rec[q] + (v + 1) * 64, q));
    if (high) {
      a = vshrq_n_u8(a, 4);
      b = vshrq_n_u8(b, 4);
    }
    a = vandq_u8(a, low);
    b = vandq_u8(b, low);
    if constexpr (kFifth) {
      const uint8x16_t fifth = vld1q_u8(Quarter(rec[q] + 4 * 64, q));
      a = vorrq_u8(a, sdot::FifthBits(fifth, 2 * v + high));
      b = vorrq_u8(b, sdot::FifthBits(fifth, 2 * (v + 1) + high));
    }
    lo = vreinterpretq_s32_u8(a);
    hi = vreinterpretq_s32_u8(b);
  }
};

// A step of each format: Step<R, Q>(x, r, b, wb, steps, acc) adds rows r..r+R-1 of x times the Q
// quarters of record b (at wb; groups `steps` records apart) to acc, as sdot's Op of the format does.
struct Q8Format {
  static constexpr int64_t kRecord = kQ8Record, kChunk = 8;
  template <int R, int Q>
  STEADY_ARM_TARGET static void Step(const Q8Rows& x, int r, int64_t b, const uint8_t* wb, int64_t steps, float* acc) {
    const auto halves = [&](int q, int k, int32x4_t& lo, int32x4_t& hi) {  // + 128 stored: the top bit flipped
      const uint8_t* g = wb + (q / 4) * steps * kQ8Record;
      const uint8x16_t top = vdupq_n_u8(0x80);
      lo = vreinterpretq_s32_u8(veorq_u8(vld1q_u8(Quarter(g + 2 * k * 64, q)), top));
      hi = vreinterpretq_s32_u8(veorq_u8(vld1q_u8(Quarter(g + (2 * k + 1) * 64, q)), top));
    };
    int32x4_t rows[R][Q];
    BlockSums(x, r, b, 0, halves, rows);
    float32x4_t ws[Q];
    for (int q = 0; q < Q; ++q) {
      ws[q] = vld1q_f32(reinterpret_cast<const float*>(Quarter(wb + (q / 4) * steps * kQ8Record + 512, q)));
    }
    sdot::Scale(x, r, b, rows, ws, acc);
  }
};

// q4, q4_1, q5_0 and q5_1 (sdot's Block32Op): the sums start at -kOffset * the block's sum of q_x.
template <bool kFifth, bool kMin, int kOffset>
struct Block32Format {
  static constexpr int64_t kRecord = Block32Record(kFifth, kMin), kScales = Block32Scales(kFifth), kChunk = 16;
  template <int R, int Q>
  STEADY_ARM_TARGET static void Step(const Q8Rows& x, int r, int64_t b, const uint8_t* wb, int64_t steps, float* acc) {
    NibbleHalves<kFifth> halves;
    for (int q = 0; q < Q; ++q) halves.rec[q] = wb + (q / 4) * steps * kRecord;
    int32x4_t rows[R][Q];
    BlockSums(x, r, b, -kOffset, halves, rows);
    float32x4_t ws[Q];
    for (int q = 0; q < Q; ++q) ws[q] = sdot::LoadF16(halves.rec[q] + kScales + (q % 4) * 8);
    sdot::Scale(x, r, b, rows, ws, acc);
    if constexpr (kMin) sdot::AddMinimums<R>(x, r, b, halves.rec, kScales + 32, acc);
  }
};
using Q4Format = Block32Format<false, false, 8>;

// q4k (kFifth false) and q5k (true): each sub-block's sums, then its fp32 step.
template <bool kFifth>
struct KQuantFormat {
  static constexpr int64_t kRecord = KQuantRecord(kFifth), kChunk = 2;
  template <int R, int Q>
  STEADY_ARM_TARGET static void Step(const Q8Rows& x, int r, int64_t b, const uint8_t* wb, int64_t steps, float* acc) {
    const int64_t subs = std::min<int64_t>(8, x.blocks - 8 * b);  // x's padding ends at its last block
    for (int64_t sub = 0; sub < subs; ++sub) {
      NibbleHalves<kFifth> halves;
      for (int q = 0; q < Q; ++q) halves.rec[q] = wb + (q / 4) * steps * kRecord + kQ4KHead + sub * KQuantSubRecord(kFifth);
      int32x4_t rows[R][Q];
      BlockSums(x, r, 8 * b + sub, 0, halves, rows);
      sdot::ScaleKQuant(x, r, 8 * b + sub, sub, wb, steps, kRecord, rows, acc);
    }
  }
};

// q6k (sdot's Q6KOp): each sub-block (16 inputs, half of x's block) its two steps of 8, the sums
// starting at -32 * the half's sum of q_x. Inputs 8k..8k+7 are the low (8k..8k+3) and high (8k+4..)
// nibbles of nibble vector k, joined to bits 2v and 2v + 1 (v = 2 (k % 2), then v + 1) of high-bit
// vector k / 2.
struct Q6KFormat {
  static constexpr int64_t kRecord = kQ6KRecord, kChunk = 1;
  template <int R, int Q>
  STEADY_ARM_TARGET static void Step(const Q8Rows& x, int r, int64_t b, const uint8_t* wb, int64_t steps, float* acc) {
    const int64_t xblocks = std::min<int64_t>(8, x.blocks - 8 * b);  // x's padding ends at its last block
    for (int64_t blk = 0; blk < xblocks; ++blk) {
      const int64_t xb = 8 * b + blk;
      const auto halves = [&](int q, int k, int32x4_t& lo, int32x4_t& hi) {
        const uint8_t* p = wb + (q / 4) * steps * kQ6KRecord + kQ6KHead + blk * kQ6KBlockRecord;
        const uint8x16_t low = vdupq_n_u8(0x0f);
        const uint8x16_t nib = vld1q_u8(Quarter(p + k * 64, q)), high = vld1q_u8(Quarter(p + 256 + (k / 2) * 64, q));
        const int v = 2 * (k % 2);
        lo = vreinterpretq_s32_u8(vorrq_u8(vandq_u8(nib, low), sdot::HighBits(high, v)));
        hi = vreinterpretq_s32_u8(vorrq_u8(vshrq_n_u8(nib, 4), sdot::HighBits(high, v + 1)));
      };
      for (int h = 0; h < 2; ++h) {  // sub-block 2 blk + h: inputs 16h..16h+15, k = 2h, 2h + 1
        int32x4_t rows[R][Q];
        Sums(x, r, xb, 2 * h, 2 * h + 2, halves, rows);
        AddFirst([&](int rr) { return -32 * x.HalfSum(r + rr, xb, h); }, rows);
        sdot::ScaleQ6K(x, r, xb, 2 * blk + h, wb, steps, rows, acc);
      }
    }
  }
};

// The driver's Op over a format's records.
template <class Format>
struct Op {
  Q8Rows x;
  const uint8_t* w;  // packed, at the tile's first group
  int64_t steps;     // records (blocks; q4k: super-blocks)
  static constexpr int64_t kChunk = Format::kChunk;
  static constexpr int kTileRows = i8mm::kTileRows, kTileGroups = i8mm::kTileGroups;

  Op Shift(int64_t groups) const { return {x, w + groups * steps * Format::kRecord, steps}; }

  template <int R, int C>
  STEADY_ARM_TARGET void Tile(int r, int64_t b0, int64_t b1, float* acc, bool /*ahead*/) const {
    for (int64_t b = b0; b < b1; ++b) Format::template Step<R, 4 * C>(x, r, b, w + b * Format::kRecord, steps, acc);
  }
};

#define STEADY_DRIVER_TARGET STEADY_ARM_TARGET
#include "kernels/cpu/matmul_dot_driver-inl.h"
#undef STEADY_DRIVER_TARGET
#undef STEADY_ARM_TARGET

// One row gives SMMLA half its work: the SDOT kernels take it (the same bits).
template <class Op>
void Multiply(const float* x, int rows, int in, const DotProduct* products, int count, int64_t steps,
              Int8Kernel one_row) {
  if (rows < 2) return one_row(x, rows, in, products, count);
  Q8Rows xq = QuantizeRows(x, rows, in, QuantizeRowScalar);
  if constexpr (std::is_same_v<Op, i8mm::Op<Q6KFormat>>) xq = WithHalfSums(xq, rows);  // q6k's sub-blocks are half a block
  auto make = [&](const void* packed) { return Op{xq, static_cast<const uint8_t*>(packed), steps}; };
  Run(make, rows, in, products, count);
}
void Q8Dot(const float* x, int rows, int in, const DotProduct* products, int count) {
  Multiply<Op<Q8Format>>(x, rows, in, products, count, Q8BlocksPerRow(in), sdot::Q8Dot);
}
void Q4Dot(const float* x, int rows, int in, const DotProduct* products, int count) {
  Multiply<Op<Q4Format>>(x, rows, in, products, count, Q8BlocksPerRow(in), sdot::Q4Dot);
}
void Q4KDot(const float* x, int rows, int in, const DotProduct* products, int count) {
  Multiply<Op<KQuantFormat<false>>>(x, rows, in, products, count, Q4KBlocksPerRow(in), sdot::Q4KDot);
}
void Q5KDot(const float* x, int rows, int in, const DotProduct* products, int count) {
  Multiply<Op<KQuantFormat<true>>>(x, rows, in, products, count, Q5KBlocksPerRow(in), sdot::Q5KDot);
}
void Q6KDot(const float* x, int rows, int in, const DotProduct* products, int count) {
  Multiply<Op<Q6KFormat>>(x, rows, in, products, count, Q6KBlocksPerRow(in), sdot::Q6KDot);
}
void Q4_1Dot(const float* x, int rows, int in, const DotProduct* products, int count) {
  Multiply<Op<Block32Format<false, true, 0>>>(x, rows, in, products, count, Q8BlocksPerRow(in), sdot::Q4_1Dot);
}
void Q5_0Dot(const float* x, int rows, int in, const DotProduct* products, int count) {
  Multiply<Op<Block32Format<true, false, 16>>>(x, rows, in, products, count, Q8BlocksPerRow(in), sdot::Q5_0Dot);
}
void Q5_1Dot(const float* x, int rows, int in, const DotProduct* products, int count) {
  Multiply<Op<Block32Format<true, true, 0>>>(x, rows, in, products, count, Q8BlocksPerRow(in), sdot::Q5_1Dot);
}

}  // namespace i8mm

namespace bfdot {
#define STEADY_ARM_TARGET __attribute__((target("arch=armv8.2-a+bf16")))

// Bf16Op of matmul_dot512.cc on quarters: acc[rr][quarter q] += x[r + rr, pair p] . w[quarter q, p].
struct Bf16Op {
  const uint32_t* x;  // [rows, steps]: bf16(x) two by two, the odd tail padded with zero
  const uint16_t* w;  // packed, at the tile's first group
  int64_t steps;      // pairs of inputs
  static constexpr int64_t kChunk = 64;
  static constexpr int kTileRows = kArmTileRows, kTileGroups = kArmTileGroups;

  Bf16Op Shift(int64_t groups) const { return {x, w + groups * steps * 32, steps}; }

  template <int R, int C>
  STEADY_ARM_TARGET void Tile(int r, int64_t p0, int64_t p1, float* acc, bool /*ahead*/) const {
    constexpr int Q = 4 * C;
    float32x4_t a[R][Q];
    for (int rr = 0; rr < R; ++rr) {
      for (int q = 0; q < Q; ++q) a[rr][q] = vld1q_f32(acc + (rr * Q + q) * 4);
    }
    for (int64_t p = p0; p < p1; ++p) {
      bfloat16x8_t wv[Q];
      for (int q = 0; q < Q; ++q) {
        wv[q] = vld1q_bf16(reinterpret_cast<const bfloat16_t*>(w + ((q / 4) * steps + p) * 32 + (q % 4) * 8));
      }
      for (int rr = 0; rr < R; ++rr) {
        const bfloat16x8_t xv = vreinterpretq_bf16_u32(vdupq_n_u32(x[(r + rr) * steps + p]));
        for (int q = 0; q < Q; ++q) a[rr][q] = vbfdotq_f32(a[rr][q], wv[q], xv);
      }
    }
    for (int rr = 0; rr < R; ++rr) {
      for (int q = 0; q < Q; ++q) vst1q_f32(acc + (rr * Q + q) * 4, a[rr][q]);
    }
  }
};

// BFMMLA (the same BF16 extension): a 2 x 4 bf16 matrix of two rows' inputs 2p..2p+3 times the
// transpose of two columns' into a 2 x 2 tile of fp32 sums, twice BFDOT's multiply-adds. Arm
// defines each of its outputs as two BFDOT steps in order (pair p, then p + 1), so it gives BFDOT's
// bits (CpuDotTest.Bf16IsBatchAndThreadInvariant compares one row, which takes BFDOT, with a batch).
// The operands come from the packed layout as i8mm's do: a quarter of pair p zipped by 32-bit lanes
// with the same quarter of pair p + 1. The tile is 4 rows x 1 group, as i8mm's; the running sums
// are zipped into 2 x 2 tiles for a chunk and back, and an odd last pair goes through BFDOT.
struct Bf16MmlaOp {
  const uint32_t* x;  // [rows, steps]: bf16(x) two by two, the odd tail padded with zero
  const uint16_t* w;  // packed, at the tile's first group
  int64_t steps;      // pairs of inputs
  static constexpr int64_t kChunk = 64;
  static constexpr int kTileRows = 4, kTileGroups = 1;

  Bf16MmlaOp Shift(int64_t groups) const { return {x, w + groups * steps * 32, steps}; }

  template <int R, int C>
  STEADY_ARM_TARGET void Tile(int r, int64_t p0, int64_t p1, float* acc, bool /*ahead*/) const {
    constexpr int Q = 4 * C, P = (R + 1) / 2;  // quarters, row pairs (an odd last row paired with itself)
    auto quarter = [&](int q, int64_t p) {
      return vld1q_u32(reinterpret_cast<const uint32_t*>(w + ((q / 4) * steps + p) * 32 + (q % 4) * 8));
    };
    float32x4_t a[R][Q];
    for (int rr = 0; rr < R; ++rr) {
      for (int q = 0; q < Q; ++q) a[rr][q] = vld1q_f32(acc + (rr * Q + q) * 4);
    }
    float32x4_t s[P][Q][2];  // [pair][quarter][columns 0-1 | 2-3]: rows (2p, 2p + 1) x 2 columns
    for (int pp = 0; pp < P; ++pp) {
      for (int q = 0; q < Q; ++q) {
        const float64x2_t lo = vreinterpretq_f64_f32(a[2 * pp][q]), hi = vreinterpretq_f64_f32(a[std::min(2 * pp + 1, R - 1)][q]);
        s[pp][q][0] = vreinterpretq_f32_f64(vzip1q_f64(lo, hi));
        s[pp][q][1] = vreinterpretq_f32_f64(vzip2q_f64(lo, hi));
      }
    }
    int64_t p = p0;
    for (; p + 1 < p1; p += 2) {
      bfloat16x8_t xv[P];
      for (int pp = 0; pp < P; ++pp) {
        const int r0 = r + 2 * pp, r1 = std::min(r0 + 1, r + R - 1);
        xv[pp] = vreinterpretq_bf16_u32(vcombine_u32(vld1_u32(x + r0 * steps + p), vld1_u32(x + r1 * steps + p)));
      }
      for (int q = 0; q < Q; ++q) {
        const uint32x4_t lo = quarter(q, p), hi = quarter(q, p + 1);
        const bfloat16x8_t w01 = vreinterpretq_bf16_u32(vzip1q_u32(lo, hi)), w23 = vreinterpretq_bf16_u32(vzip2q_u32(lo, hi));
        for (int pp = 0; pp < P; ++pp) {
          s[pp][q][0] = vbfmmlaq_f32(s[pp][q][0], xv[pp], w01);
          s[pp][q][1] = vbfmmlaq_f32(s[pp][q][1], xv[pp], w23);
        }
      }
    }
    for (int pp = 0; pp < P; ++pp) {  // back to rows: row 2p from the tiles' low halves, 2p + 1 from the high
      for (int q = 0; q < Q; ++q) {
        const float64x2_t lo = vreinterpretq_f64_f32(s[pp][q][0]), hi = vreinterpretq_f64_f32(s[pp][q][1]);
        a[2 * pp][q] = vreinterpretq_f32_f64(vzip1q_f64(lo, hi));
        if (2 * pp + 1 < R) a[2 * pp + 1][q] = vreinterpretq_f32_f64(vzip2q_f64(lo, hi));
      }
    }
    if (p < p1) {  // the chunk's odd last pair, as Bf16Op adds it
      for (int rr = 0; rr < R; ++rr) {
        const bfloat16x8_t xv = vreinterpretq_bf16_u32(vdupq_n_u32(x[(r + rr) * steps + p]));
        for (int q = 0; q < Q; ++q) a[rr][q] = vbfdotq_f32(a[rr][q], vreinterpretq_bf16_u32(quarter(q, p)), xv);
      }
    }
    for (int rr = 0; rr < R; ++rr) {
      for (int q = 0; q < Q; ++q) vst1q_f32(acc + (rr * Q + q) * 4, a[rr][q]);
    }
  }
};

#define STEADY_DRIVER_TARGET STEADY_ARM_TARGET
#include "kernels/cpu/matmul_dot_driver-inl.h"
#undef STEADY_DRIVER_TARGET
#undef STEADY_ARM_TARGET

}  // namespace bfdot

}  // namespace

const Int8Kernels kArmDotKernels = {sdot::Q8Dot,  sdot::Q4Dot,   sdot::Q4KDot,  sdot::Q5KDot,
                                    sdot::Q6KDot, sdot::Q4_1Dot, sdot::Q5_0Dot, sdot::Q5_1Dot};
const Int8Kernels kArmI8mmKernels = {i8mm::Q8Dot,  i8mm::Q4Dot,   i8mm::Q4KDot,  i8mm::Q5KDot,
                                     i8mm::Q6KDot, i8mm::Q4_1Dot, i8mm::Q5_0Dot, i8mm::Q5_1Dot};

// BFMMLA from two rows on (one row would leave half of each instruction idle), BFDOT for one.
void MatMulNTBf16DotsArm(const float* x, int rows, int in, const DotProduct* products, int count) {
  const Bf16Rows xb = RoundRows(x, rows, in, RoundRowScalar);
  auto w = [](const void* packed) { return static_cast<const uint16_t*>(packed); };
  if (rows < 2) {
    return bfdot::Run([&](const void* p) { return bfdot::Bf16Op{xb.x, w(p), xb.pairs}; }, rows, in, products, count);
  }
  bfdot::Run([&](const void* p) { return bfdot::Bf16MmlaOp{xb.x, w(p), xb.pairs}; }, rows, in, products, count);
}

}  // namespace steady::cpu::dot

#endif  // __aarch64__
