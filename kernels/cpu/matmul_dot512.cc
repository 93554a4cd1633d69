// The AVX-512 dot-product kernels (matmul_dot.h): bf16 x bf16 on AVX512_BF16 (VDPBF16PS) and
// int8 x int8 on AVX512_VNNI (VPDPBUSD), intrinsics in functions compiled for their own target (the
// rest of the binary stays baseline x86-64), called by matmul_dot.cc only after its run-time CPU
// check. Why intrinsics and not Highway: Debian's Highway (1.0.3) emulates
// ReorderWidenMulAccumulate on bf16 with shifts and fp32 FMAs (its source says "TODO:
// _mm_dpbf16_ps") and has no SumOfMulQuadAccumulate, so through it neither VDPBF16PS nor VPDPBUSD
// would be emitted.
//
// Why the packed layout (docs/cpu.md): the first version of these kernels read the row-major
// weights, one 32-pair vector of a weight row against one of an activation row, and summed each
// output's 16 lanes at the end. That lost to the widening kernels (0.13x to 0.93x): q8 spent five
// instructions per VPDPBUSD on signs and scales, and both shared each weight vector across only the
// rows of a 4-row tile. Packed by column groups, one broadcast activation unit times one weight
// vector is 16 outputs' worth of work, the int32 sums of a q8 block need one conversion and one
// scale per 16 outputs, and the + 128 offset makes the weights VPDPBUSD's unsigned operand directly.
#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/matmul_dot_tiles.h"
#include "kernels/cpu/parallel.h"

#define STEADY_DOT_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vnni,f16c")))

namespace steady::cpu::dot {
namespace {

#include "kernels/cpu/matmul_dot512-inl.h"

// The AVX-512 register tiles: bf16 4 rows x 4 groups, 16 accumulators + 4 weights + x of 32
// registers; the int8 kernels (q8, the blocks of 32, the K-quants) 4 rows x 3 groups, 12 int32 sums + 12 fp32 sums + 3
// weights + x (4 groups below 4 rows: Int8Dot).
constexpr int kRegisterTileRows = 4;
constexpr int kRegisterTileGroups = 4;
constexpr int kQ8TileRows = 4;
constexpr int kQ8TileGroups = 3;  // 4 below kQ8TileRows rows (Q8Dot512)

// bf16 x bf16: acc[rr][c] (16 columns each) += x[r + rr, pair p] . w[group c, pair p] over [p0, p1).
struct Bf16Op {
  const uint32_t* x;  // [rows, steps]: bf16(x) two by two, the odd tail padded with zero
  const uint16_t* w;  // packed, at the tile's first group
  int64_t steps;      // pairs of inputs
  // 64 pairs x 4 groups x 64 bytes: the tile's 16 KB of weights stay in L1 while every row uses them.
  static constexpr int64_t kChunk = 64;
  static constexpr int kTileRows = kRegisterTileRows, kTileGroups = kRegisterTileGroups;

  Bf16Op Shift(int64_t groups) const { return {x, w + groups * steps * 32, steps}; }

  template <int R, int C>
  STEADY_DOT_TARGET void Tile(int r, int64_t p0, int64_t p1, float* acc, bool ahead) const {
    __m512 a[R][C];
    for (int rr = 0; rr < R; ++rr) {
      for (int c = 0; c < C; ++c) a[rr][c] = _mm512_load_ps(acc + (rr * C + c) * 16);
    }
    for (int64_t p = p0; p < p1; ++p) {
      if (ahead && p + kChunk < steps) PrefetchGroups<C>(reinterpret_cast<const uint8_t*>(w + (p + kChunk) * 32), steps * 64, 0, 64);
      __m512bh wv[C];
      for (int c = 0; c < C; ++c) wv[c] = (__m512bh)_mm512_loadu_si512(w + (c * steps + p) * 32);
      for (int rr = 0; rr < R; ++rr) {
        const __m512bh xv = (__m512bh)_mm512_set1_epi32(int(x[(r + rr) * steps + p]));
        for (int c = 0; c < C; ++c) a[rr][c] = _mm512_dpbf16_ps(a[rr][c], xv, wv[c]);
      }
    }
    for (int rr = 0; rr < R; ++rr) {
      for (int c = 0; c < C; ++c) _mm512_store_ps(acc + (rr * C + c) * 16, a[rr][c]);
    }
  }
};

// s[rr][c] = -offset * the sum of q_x of row r + rr's block b: VPDPBUSD's sums of q_x (q_w +
// offset) start there, and end at the exact sum of q_x q_w.
template <int R, int C>
STEADY_DOT_TARGET void Start(const Q8Rows& x, int r, int64_t b, int32_t offset, __m512i (&s)[R][C]) {
  for (int rr = 0; rr < R; ++rr) {
    const __m512i start = _mm512_set1_epi32(-offset * x.xsum[(r + rr) * x.blocks + b]);
    for (int c = 0; c < C; ++c) s[rr][c] = start;
  }
}
// s[rr][c] += the 16 columns' 4 weights wv[c] times row r + rr's inputs 4u..4u+3 of block b.
template <int R, int C>
STEADY_DOT_TARGET void Add(const Q8Rows& x, int r, int64_t b, int u, const __m512i (&wv)[C], __m512i (&s)[R][C]) {
  for (int rr = 0; rr < R; ++rr) {
    const __m512i xv = _mm512_set1_epi32(x.Four(r + rr, b, u));
    for (int c = 0; c < C; ++c) s[rr][c] = _mm512_dpbusd_epi32(s[rr][c], wv[c], xv);
  }
}
// The tile's fp32 sums between acc (rows x C groups x 16, in L1) and registers, where they stay
// over a chunk's blocks.
template <int R, int C>
STEADY_DOT_TARGET void LoadSums(const float* acc, __m512 (&a)[R][C]) {
  for (int rr = 0; rr < R; ++rr) {
    for (int c = 0; c < C; ++c) a[rr][c] = _mm512_load_ps(acc + (rr * C + c) * 16);
  }
}
template <int R, int C>
STEADY_DOT_TARGET void StoreSums(const __m512 (&a)[R][C], float* acc) {
  for (int rr = 0; rr < R; ++rr) {
    for (int c = 0; c < C; ++c) _mm512_store_ps(acc + (rr * C + c) * 16, a[rr][c]);
  }
}
// a[rr][c] += s[rr][c] * (ws[c] * scale_x(row r + rr, block b)), in fp32.
template <int R, int C>
STEADY_DOT_TARGET void Scale(const Q8Rows& x, int r, int64_t b, const __m512i (&s)[R][C], const __m512 (&ws)[C],
                             __m512 (&a)[R][C]) {
  for (int c = 0; c < C; ++c) {
    for (int rr = 0; rr < R; ++rr) a[rr][c] = ScaleOne(s[rr][c], ws[c], x.xscale[(r + rr) * x.blocks + b], a[rr][c]);
  }
}
// int8 x int8, a q8_0 block (32 inputs) per step: 8 VPDPBUSD of the weights (+ 128, unsigned) by x's
// 4 bytes broadcast (signed) into int32 sums that start at -128 * the block's sum of q_x, so that
// they end at the exact sum of q_x q_w; then one conversion and one fp32 multiply-add by
// scale_x scale_w. The tiles are 4 rows x 3 groups, so that the 12 int32 and 12 fp32 sums stay in
// registers over a chunk (with 4 x 4 and the fp32 sums in L1, loaded and stored every block, the
// kernel ran 1.2-1.36x slower), and the u loop is unrolled (g++ otherwise copies every sum register
// on each of its iterations: 1.05-1.2x).
template <int kGroups>
struct Q8Op {
  Q8Rows x;
  const uint8_t* w;  // packed, at the tile's first group
  int64_t steps;     // blocks
  static constexpr int64_t kChunk = 8;  // 8 blocks x 3 (or 4) groups x 576 bytes: 14 (18) KB in L1
  static constexpr int kTileRows = kQ8TileRows, kTileGroups = kGroups;

  Q8Op Shift(int64_t groups) const { return {x, w + groups * steps * kQ8Record, steps}; }

  template <int R, int C>
  STEADY_DOT_TARGET void Tile(int r, int64_t b0, int64_t b1, float* acc, bool ahead) const {
    __m512 a[R][C];
    LoadSums(acc, a);
    for (int64_t b = b0; b < b1; ++b) {
      __m512i s[R][C];
      Start(x, r, b, 128, s);
      const uint8_t* wb = w + b * kQ8Record;
      if (ahead && b + kChunk < steps) PrefetchGroups<C>(wb + kChunk * kQ8Record, steps * kQ8Record, 0, kQ8Record);
#pragma GCC unroll 8
      for (int u = 0; u < 8; ++u) {
        __m512i wv[C];
        for (int c = 0; c < C; ++c) wv[c] = _mm512_loadu_si512(wb + c * steps * kQ8Record + u * 64);
        Add(x, r, b, u, wv, s);
      }
      __m512 ws[C];
      for (int c = 0; c < C; ++c) ws[c] = _mm512_loadu_ps(reinterpret_cast<const float*>(wb + c * steps * kQ8Record + 512));
      Scale(x, r, b, s, ws, a);
    }
    StoreSums(a, acc);
  }
};

// int8 x blocks of 32 (q4; q32's q4_1, q5_0 and q5_1): as Q8Op (its tile, the fp32 sums in registers
// over a chunk), the weights' nibbles (with kFifth joined to their fifth bits: q in 0..31, unsigned)
// unpacked in the weight registers, the sums starting at -kOffset * the block's sum of q_x (q4: 8,
// q5_0: 16) and scaled by the fp16 d widened, then with kMin the block's m times scale_x times its
// sum of q_x added: acc += sum * (d * scale_x), acc += m * (scale_x * sum of q_x).
template <int kGroups, bool kFifth, bool kMin, int kOffset>
struct Block32Op {
  Q8Rows x;
  const uint8_t* w;  // packed, at the tile's first group
  int64_t steps;     // blocks
  static constexpr int64_t kRecord = Block32Record(kFifth, kMin), kScales = Block32Scales(kFifth);
  static constexpr int64_t kChunk = 16;  // 16 blocks x 3 (or 4) groups x 288 (to 384) bytes: 14 (to 24) KB in L1
  static constexpr int kTileRows = kQ8TileRows, kTileGroups = kGroups;

  Block32Op Shift(int64_t groups) const { return {x, w + groups * steps * kRecord, steps}; }

  template <int R, int C>
  STEADY_DOT_TARGET void Tile(int r, int64_t b0, int64_t b1, float* acc, bool ahead) const {
    const __m512i low = _mm512_set1_epi8(0x0f);
    __m512 a[R][C];
    LoadSums(acc, a);
    for (int64_t b = b0; b < b1; ++b) {
      __m512i s[R][C];
      Start(x, r, b, kOffset, s);
      const uint8_t* wb = w + b * kRecord;
      if (ahead && b + kChunk < steps) PrefetchGroups<C>(wb + kChunk * kRecord, steps * kRecord, 0, kRecord);
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) {
        __m512i raw[C], wv[C];
        for (int c = 0; c < C; ++c) raw[c] = _mm512_loadu_si512(wb + c * steps * kRecord + v * 64);
        for (int c = 0; c < C; ++c) wv[c] = Nibbles<kFifth>(raw[c], low, wb + c * steps * kRecord + 256, 2 * v);  // inputs 4v..4v+3
        Add(x, r, b, v, wv, s);
        for (int c = 0; c < C; ++c) {  // 16 + 4v..
          wv[c] = Nibbles<kFifth>(_mm512_srli_epi16(raw[c], 4), low, wb + c * steps * kRecord + 256, 2 * v + 1);
        }
        Add(x, r, b, v + 4, wv, s);
      }
      __m512 ws[C];
      for (int c = 0; c < C; ++c) {
        ws[c] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + c * steps * kRecord + kScales)));
      }
      Scale(x, r, b, s, ws, a);
      if constexpr (kMin) {
        for (int c = 0; c < C; ++c) {
          const __m512 m = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + c * steps * kRecord + kScales + 32)));
          for (int rr = 0; rr < R; ++rr) {
            const int64_t i = (r + rr) * x.blocks + b;
            a[rr][c] = _mm512_fmadd_ps(m, _mm512_set1_ps(x.xscale[i] * float(x.xsum[i])), a[rr][c]);
          }
        }
      }
    }
    StoreSums(a, acc);
  }
};
template <int kGroups>
using Q4Op = Block32Op<kGroups, false, false, 8>;
template <int kGroups>
using Q4_1Op = Block32Op<kGroups, false, true, 0>;
template <int kGroups>
using Q5_0Op = Block32Op<kGroups, true, false, 16>;
template <int kGroups>
using Q5_1Op = Block32Op<kGroups, true, true, 0>;

// int8 x q4k (kFifth false) and q5k (true): per sub-block (32 inputs, one q8_0 block of x) q times
// q_x summed exactly in int32 as Q4Op does (no offset: q is unsigned; q5k's nibbles joined to their
// fifth bits in the weight registers, q up to 31), then in fp32
//     acc += sum * (scale_x * d * sc)  -  (scale_x * sum of q_x) * (dmin * m),
// the minimum's share taken off with the block's sum of q_x. The scales are widened per group and
// sub-block, once for every row of the tile. The tile is q8's, 4 rows x 3 groups with the fp32 sums
// in registers over a chunk: with 4 x 4 and the sums loaded from and stored to L1 every sub-block
// (q4: every block), q4k ran 1.03-1.25x slower at 16 and 64 rows on a Zen 4 EPYC (matmul_bench's
// minimums, docs/cpu.md "The 4-bit tiles in registers"), and 4 x 2 in registers no faster than 4 x 4.
template <int kGroups, bool kFifth>
struct KQuantOp {
  Q8Rows x;
  const uint8_t* w;  // packed, at the tile's first group
  int64_t steps;     // super-blocks
  static constexpr int64_t kRecord = KQuantRecord(kFifth), kSubRecord = KQuantSubRecord(kFifth);
  // 2 super-blocks x 3 (or 4) groups x 2368 (q5k: 2880) bytes: 14 (19; q5k 17, 23) KB in L1
  static constexpr int64_t kChunk = 2;
  static constexpr int kTileRows = kQ8TileRows, kTileGroups = kGroups;

  KQuantOp Shift(int64_t groups) const { return {x, w + groups * steps * kRecord, steps}; }

  template <int R, int C>
  STEADY_DOT_TARGET void Tile(int r, int64_t b0, int64_t b1, float* acc, bool ahead) const {
    const __m512i low = _mm512_set1_epi8(0x0f);
    __m512 a[R][C];
    LoadSums(acc, a);
    for (int64_t b = b0; b < b1; ++b) {
      const uint8_t* wb = w + b * kRecord;
      // x's padding ends at its last q8_0 block; the weights' sub-blocks past it are zero.
      const int64_t subs = std::min<int64_t>(8, x.blocks - 8 * b);
      for (int64_t s = 0; s < subs; ++s) {
        const int64_t xb = 8 * b + s;
        if (ahead && b + kChunk < steps) {  // an eighth of the record a sub-block
          PrefetchGroups<C>(wb + kChunk * kRecord, steps * kRecord, s * kRecord / 8, (s + 1) * kRecord / 8);
        }
        __m512i sums[R][C];
        Start(x, r, xb, 0, sums);
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) {
          __m512i raw[C], wv[C];
          for (int c = 0; c < C; ++c) raw[c] = _mm512_loadu_si512(wb + c * steps * kRecord + kQ4KHead + s * kSubRecord + v * 64);
          const auto fifth = [&](int c) { return wb + c * steps * kRecord + kQ4KHead + s * kSubRecord + 4 * 64; };
          for (int c = 0; c < C; ++c) wv[c] = Nibbles<kFifth>(raw[c], low, fifth(c), 2 * v);
          Add(x, r, xb, v, wv, sums);
          for (int c = 0; c < C; ++c) wv[c] = Nibbles<kFifth>(_mm512_srli_epi16(raw[c], 4), low, fifth(c), 2 * v + 1);
          Add(x, r, xb, v + 4, wv, sums);
        }
        for (int c = 0; c < C; ++c) {
          __m512 scale, min;
          KQuantScales(wb + c * steps * kRecord, s, scale, min);
          for (int rr = 0; rr < R; ++rr) {
            const int64_t i = (r + rr) * x.blocks + xb;
            a[rr][c] = KQuantOne(sums[rr][c], scale, min, x.xscale[i], x.xsum[i], a[rr][c]);
          }
        }
      }
    }
    StoreSums(a, acc);
  }
};
template <int kGroups>
using Q4KOp = KQuantOp<kGroups, false>;
template <int kGroups>
using Q5KOp = KQuantOp<kGroups, true>;

// int8 x q6k: per sub-block of 16 (half of one q8_0 block of x) the 6-bit q (0..63, unsigned: a
// nibble joined to its two high bits in the weight registers) times q_x summed exactly in int32,
// the sums starting at -32 * the sub-block's sum of q_x, then in fp32
//     acc += sum * (d * sc * scale_x),
// d * sc exact. The tile is q8's, 4 rows x 3 groups with the fp32 sums in registers over a chunk.
template <int kGroups>
struct Q6KOp {
  Q8Rows x;          // WithHalfSums
  const uint8_t* w;  // packed, at the tile's first group
  int64_t steps;     // super-blocks
  static constexpr int64_t kChunk = 1;  // 1 super-block x 3 (or 4) groups x 3360 bytes: 10 (13) KB in L1
  static constexpr int kTileRows = kQ8TileRows, kTileGroups = kGroups;

  Q6KOp Shift(int64_t groups) const { return {x, w + groups * steps * kQ6KRecord, steps}; }

  template <int R, int C>
  STEADY_DOT_TARGET void Tile(int r, int64_t b0, int64_t b1, float* acc, bool ahead) const {
    const __m512i low = _mm512_set1_epi8(0x0f);
    __m512 a[R][C];
    LoadSums(acc, a);
    for (int64_t b = b0; b < b1; ++b) {
      const uint8_t* wb = w + b * kQ6KRecord;
      // x's padding ends at its last q8_0 block; the weights past it are never read.
      const int64_t xblocks = std::min<int64_t>(8, x.blocks - 8 * b);
      for (int64_t blk = 0; blk < xblocks; ++blk) {
        const int64_t xb = 8 * b + blk;
        if (ahead && b + kChunk < steps) {  // an eighth of the record a block
          PrefetchGroups<C>(wb + kChunk * kQ6KRecord, steps * kQ6KRecord, blk * kQ6KRecord / 8, (blk + 1) * kQ6KRecord / 8);
        }
        const uint8_t* rb = wb + kQ6KHead + blk * kQ6KBlockRecord;
        for (int h = 0; h < 2; ++h) {  // sub-block 2 blk + h: x's inputs 16h..16h+15, groups of 4 4h..4h+3
          __m512i sums[R][C];
          for (int rr = 0; rr < R; ++rr) {
            const __m512i start = _mm512_set1_epi32(-32 * x.HalfSum(r + rr, xb, h));
            for (int c = 0; c < C; ++c) sums[rr][c] = start;
          }
#pragma GCC unroll 4
          for (int v = 0; v < 4; ++v) {
            const int u = 4 * h + v;
            __m512i wv[C];
            for (int c = 0; c < C; ++c) wv[c] = Q6KFour(rb + c * steps * kQ6KRecord, u, low);
            Add(x, r, xb, u, wv, sums);
          }
          for (int c = 0; c < C; ++c) {
            const __m512 scale = Q6KScale(wb + c * steps * kQ6KRecord, 2 * blk + h);
            for (int rr = 0; rr < R; ++rr) a[rr][c] = ScaleOne(sums[rr][c], scale, x.xscale[(r + rr) * x.blocks + xb], a[rr][c]);
          }
        }
      }
    }
    StoreSums(a, acc);
  }
};

#define STEADY_DRIVER_TARGET STEADY_DOT_TARGET
#include "kernels/cpu/matmul_dot_driver-inl.h"
#undef STEADY_DRIVER_TARGET

// FloatToBf16 sixteen at a time: round to nearest even, a NaN stays a quiet NaN.
STEADY_DOT_TARGET void RoundToBf16(const float* x, int64_t n, uint16_t* out) {
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    const __m512i u = _mm512_loadu_si512(x + k);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x400000));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k), _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
  }
  for (; k < n; ++k) out[k] = FloatToBf16(x[k]);
}

// Each lane's low byte, sign-extended.
STEADY_DOT_TARGET inline __m512i LowByte(__m512i v) { return _mm512_srai_epi32(_mm512_slli_epi32(v, 24), 24); }

}  // namespace

// QuantizeQ8 of one row, a block at a time (the same arithmetic: scale = max |x| / 127, q = x * (1 /
// scale) rounded to nearest even, as lrint does, kept to its low byte as int8_t(lrint) does), with
// each block's sum of the stored q. (Only a block whose 1 / scale overflows, max |x| < 4e-37, makes a
// q outside -127..127: x * inf converts to INT_MIN, whose low byte is 0.)
STEADY_DOT_TARGET void QuantizeRow512(const float* x, int64_t in, int8_t* q, float* scales, int32_t* sums) {
  for (int64_t b = 0; b * kQ8Block < in; ++b) {
    const int64_t k0 = b * kQ8Block, left = in - k0;
    const __mmask16 m0 = left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
    const __mmask16 m1 = left >= 32 ? __mmask16(0xffff) : left <= 16 ? __mmask16(0) : __mmask16((1u << (left - 16)) - 1);
    const __m512 v0 = _mm512_maskz_loadu_ps(m0, x + k0), v1 = _mm512_maskz_loadu_ps(m1, x + k0 + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const float scale = amax / 127.0f;
    const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    const __m512i q0 = LowByte(_mm512_cvtps_epi32(_mm512_mul_ps(v0, _mm512_set1_ps(inv))));
    const __m512i q1 = LowByte(_mm512_cvtps_epi32(_mm512_mul_ps(v1, _mm512_set1_ps(inv))));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + k0), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + k0 + 16), _mm512_cvtepi32_epi8(q1));
    scales[b] = scale;
    sums[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
  }
}

void MatMulNTBf16Dots512(const float* x, int rows, int in, const DotProduct* products, int count) {
  const Bf16Rows xb = RoundRows(x, rows, in, RoundToBf16);
  auto make = [&](const void* packed) { return Bf16Op{xb.x, static_cast<const uint16_t*>(packed), xb.pairs}; };
  Run(make, rows, in, products, count);
}

namespace {

// x quantized once (with its half-block sums where `half_sums`), then every product's groups through
// the Op that make(packed) gives.
template <class MakeOp>
void Quantized(const float* x, int rows, int in, const DotProduct* products, int count, bool half_sums,
               const MakeOp& make) {
  Q8Rows xq = QuantizeRows(x, rows, in, QuantizeRow512);
  if (half_sums) xq = WithHalfSums(xq, rows);
  Run([&](const void* packed) { return make(xq, static_cast<const uint8_t*>(packed)); }, rows, in, products, count);
}

// x quantized once, then every product through Op<groups>{xq, packed, steps}: q8's, q4's and the K-quants'
// tiles are 4 rows x kQ8TileGroups, but a few rows read the weights at memory speed, where 4
// groups' streams at once beat 3 (1.06-1.15x at one row for q8); their sums fit in registers either
// way. Every lane's arithmetic is the same.
template <template <int> class Op>
void Int8Dot(const float* x, int rows, int in, const DotProduct* products, int count, int64_t steps) {
  constexpr bool half_sums = std::is_same_v<Op<4>, Q6KOp<4>>;  // q6k's sub-blocks are half a q8_0 block
  if (rows < kQ8TileRows) {
    return Quantized(x, rows, in, products, count, half_sums,
                     [steps](const Q8Rows& xq, const uint8_t* w) { return Op<4>{xq, w, steps}; });
  }
  Quantized(x, rows, in, products, count, half_sums,
            [steps](const Q8Rows& xq, const uint8_t* w) { return Op<kQ8TileGroups>{xq, w, steps}; });
}

void Q8Dot512(const float* x, int rows, int in, const DotProduct* products, int count) {
  Int8Dot<Q8Op>(x, rows, in, products, count, Q8BlocksPerRow(in));
}
void Q4Dot512(const float* x, int rows, int in, const DotProduct* products, int count) {
  Int8Dot<Q4Op>(x, rows, in, products, count, Q8BlocksPerRow(in));
}
void Q4KDot512(const float* x, int rows, int in, const DotProduct* products, int count) {
  Int8Dot<Q4KOp>(x, rows, in, products, count, Q4KBlocksPerRow(in));
}
void Q5KDot512(const float* x, int rows, int in, const DotProduct* products, int count) {
  Int8Dot<Q5KOp>(x, rows, in, products, count, Q5KBlocksPerRow(in));
}
void Q6KDot512(const float* x, int rows, int in, const DotProduct* products, int count) {
  Int8Dot<Q6KOp>(x, rows, in, products, count, Q6KBlocksPerRow(in));
}
void Q4_1Dot512(const float* x, int rows, int in, const DotProduct* products, int count) {
  Int8Dot<Q4_1Op>(x, rows, in, products, count, Q8BlocksPerRow(in));
}
void Q5_0Dot512(const float* x, int rows, int in, const DotProduct* products, int count) {
  Int8Dot<Q5_0Op>(x, rows, in, products, count, Q8BlocksPerRow(in));
}
void Q5_1Dot512(const float* x, int rows, int in, const DotProduct* products, int count) {
  Int8Dot<Q5_1Op>(x, rows, in, products, count, Q8BlocksPerRow(in));
}

}  // namespace

const Int8Kernels kAvx512VnniKernels = {Q8Dot512, Q4Dot512, Q4KDot512, Q5KDot512, Q6KDot512, Q4_1Dot512, Q5_0Dot512, Q5_1Dot512};

}  // namespace steady::cpu::dot

#endif  // __x86_64__
