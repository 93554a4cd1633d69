// The 256-bit int8 kernels' body, included twice by matmul_dot256.cc: once for AVX-VNNI, once for
// AVX2 (as Highway's foreach_target does: a function's instruction set is its target attribute, which
// a template parameter cannot choose). No include guard, on purpose.
//
// Before including, the flavour's namespace defines:
//   STEADY_DOT256_TARGET  the target attribute of every function here;
//   kTileRows, kTileGroups  the register tile (16 ymm registers: accumulators, weights, temporaries);
//   kQ8TileRows, kQ8TileGroups  q8's own;
//   Q8Weights8 LoadQ8(const uint8_t* p)  8 columns' 4 q8 weights (stored + 128) at p, made ready for
//   __m256i AddQ8(__m256i s, Q8Weights8 w, __m256i x)  s + per column the exact sum of the 4 products
//   kQ8Offset  what the q8 sums start at, times the block's sum of q_x (VPDPBUSD: -128, AVX2: 0);
//   kNibblesAheadAlone  whether the 4- to 6-bit formats' tiles prefetch the next chunk in a pass of
//     one tile too (matmul_dot_driver-inl.h; q8's never do: at one row it reads at the copy bandwidth);
//   NibbleSums, NibbleStart(s), AddNibbles(p, w, x), NibbleEnd(s, p)  the same for a block of
//     unsigned weights in 0..15: sums p that start from the int32 sums s, take a vector of nibbles
//     at a time, and end added to s.
//
// A 64-byte vector of the packed layout (16 columns x 4 inputs) is two ymm halves of 8 columns, h = 0
// and 1 of group c being half 2c + h. Per output lane the arithmetic after the int32 sums is the
// AVX-512 kernels' (matmul_dot512.cc): the same conversions, products and fused multiply-adds in the
// same order, so the results are the same bits.

// x's 4 bytes (inputs 4u..4u+3 of row r's block b) in every 32-bit lane.
STEADY_DOT256_TARGET inline __m256i Broadcast4(const Q8Rows& x, int r, int64_t b, int u) {
  return _mm256_set1_epi32(x.Four(r, b, u));
}

// s[rr][h] = -offset * the sum of q_x of row r + rr's block b.
template <int R, int H>
STEADY_DOT256_TARGET inline void Start(const Q8Rows& x, int r, int64_t b, int32_t offset, __m256i (&s)[R][H]) {
  for (int rr = 0; rr < R; ++rr) {
    const __m256i start = _mm256_set1_epi32(-offset * x.xsum[(r + rr) * x.blocks + b]);
    for (int h = 0; h < H; ++h) s[rr][h] = start;
  }
}

// acc[rr][half h] += s[rr][h] * (ws[h] * scale_x(row r + rr, block b)), in fp32.
template <int R, int H>
STEADY_DOT256_TARGET inline void Scale(const Q8Rows& x, int r, int64_t b, const __m256i (&s)[R][H], const __m256 (&ws)[H],
                                       float* acc) {
  for (int h = 0; h < H; ++h) {
    for (int rr = 0; rr < R; ++rr) {
      float* a = acc + rr * H * 8 + h * 8;
      const __m256 scale = _mm256_mul_ps(ws[h], _mm256_set1_ps(x.xscale[(r + rr) * x.blocks + b]));
      _mm256_store_ps(a, _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[rr][h]), scale, _mm256_load_ps(a)));
    }
  }
}

// Q8Op of matmul_dot512.cc on 8-column halves.
struct Q8Op256 {
  Q8Rows x;
  const uint8_t* w;  // packed, at the tile's first group
  int64_t steps;     // blocks
  static constexpr int64_t kChunk = 8;
  static constexpr int kTileRows = flavour::kQ8TileRows, kTileGroups = flavour::kQ8TileGroups;

  Q8Op256 Shift(int64_t groups) const { return {x, w + groups * steps * kQ8Record, steps}; }
  static int64_t StepsPerRow(int in) { return Q8BlocksPerRow(in); }

  template <int R, int C>
  STEADY_DOT256_TARGET void Tile(int r, int64_t b0, int64_t b1, float* acc, bool ahead) const {
    constexpr int H = 2 * C;
    for (int64_t b = b0; b < b1; ++b) {
      __m256i s[R][H];
      Start(x, r, b, flavour::kQ8Offset, s);
      const uint8_t* wb = w + b * kQ8Record;
      if (ahead && b + kChunk < steps) PrefetchGroups<C>(wb + kChunk * kQ8Record, steps * kQ8Record, 0, kQ8Record);
      // Each weight vector's products with every row before the next vector is loaded: AVX2's
      // two-register weights are live one at a time (fewer accumulators spilled).
      for (int u = 0; u < 8; ++u) {
        __m256i xv[R];
        for (int rr = 0; rr < R; ++rr) xv[rr] = Broadcast4(x, r + rr, b, u);
        for (int h = 0; h < H; ++h) {
          const flavour::Q8Weights8 wv = flavour::LoadQ8(wb + (h / 2) * steps * kQ8Record + u * 64 + (h % 2) * 32);
          for (int rr = 0; rr < R; ++rr) s[rr][h] = flavour::AddQ8(s[rr][h], wv, xv[rr]);
        }
      }
      __m256 ws[H];
      for (int h = 0; h < H; ++h) ws[h] = _mm256_loadu_ps(reinterpret_cast<const float*>(wb + (h / 2) * steps * kQ8Record + 512) + (h % 2) * 8);
      Scale(x, r, b, s, ws, acc);
    }
  }
};

// matmul_dot512.cc's FifthBits on a half: bit m of every byte moved to bit 4.
STEADY_DOT256_TARGET inline __m256i FifthBits(__m256i fv, int m) {
  const __m256i moved = m <= 4 ? _mm256_slli_epi16(fv, 4 - m) : _mm256_srli_epi16(fv, m - 4);
  return _mm256_and_si256(moved, _mm256_set1_epi8(0x10));
}

// The nibbles of 4-bit weights: p[rr][h] += vector v's low nibbles (inputs 4v..4v+3) and its high
// ones (16 + 4v..) times row r + rr's bytes of block xb. raw[h] is half h of vector v; with kFifth
// (q5k, q5_0, q5_1) each nibble is joined to its fifth bit from half h of the fifth vector, fifth[h].
template <int R, int H, bool kFifth>
STEADY_DOT256_TARGET inline void AddNibblePairs(const Q8Rows& x, int r, int64_t xb, int v, const __m256i (&raw)[H],
                                                const __m256i (&fifth)[H], flavour::NibbleSums (&p)[R][H]) {
  const __m256i low = _mm256_set1_epi8(0x0f);
  __m256i lo[H], hi[H];
  for (int h = 0; h < H; ++h) {
    lo[h] = _mm256_and_si256(raw[h], low);
    hi[h] = _mm256_and_si256(_mm256_srli_epi16(raw[h], 4), low);
    if constexpr (kFifth) {
      lo[h] = _mm256_or_si256(lo[h], FifthBits(fifth[h], 2 * v));
      hi[h] = _mm256_or_si256(hi[h], FifthBits(fifth[h], 2 * v + 1));
    }
  }
  for (int rr = 0; rr < R; ++rr) {
    const __m256i xlo = Broadcast4(x, r + rr, xb, v), xhi = Broadcast4(x, r + rr, xb, v + 4);
    for (int h = 0; h < H; ++h) p[rr][h] = flavour::AddNibbles(flavour::AddNibbles(p[rr][h], lo[h], xlo), hi[h], xhi);
  }
}

// s[rr][h] += the products of a block's 4 vectors of nibbles (at raw_at(v, h); with kFifth, the
// fifth vector after them at raw_at(4, h)) and x's bytes of block xb. The nibble sums are widened
// into s after every kRun vectors: AVX2 keeps them in int16 pairs, which hold 4 vectors' products
// of 4-bit q (8 pairs of at most 15 * 127: 30480) but only 2 vectors' of 5-bit q (4 pairs of at
// most 31 * 127: 31496).
template <int R, int H, bool kFifth, class Raw>
STEADY_DOT256_TARGET inline void AddNibbleBlock(const Q8Rows& x, int r, int64_t xb, const Raw& raw_at, __m256i (&s)[R][H]) {
  constexpr int kRun = kFifth ? 2 : 4;
  __m256i fifth[H] = {};
  if constexpr (kFifth) {
    for (int h = 0; h < H; ++h) fifth[h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(raw_at(4, h)));
  }
  for (int v0 = 0; v0 < 4; v0 += kRun) {
    flavour::NibbleSums p[R][H];
    for (int rr = 0; rr < R; ++rr) {
      for (int h = 0; h < H; ++h) p[rr][h] = flavour::NibbleStart(s[rr][h]);
    }
    for (int v = v0; v < v0 + kRun; ++v) {
      __m256i raw[H];
      for (int h = 0; h < H; ++h) raw[h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(raw_at(v, h)));
      AddNibblePairs<R, H, kFifth>(x, r, xb, v, raw, fifth, p);
    }
    for (int rr = 0; rr < R; ++rr) {
      for (int h = 0; h < H; ++h) s[rr][h] = flavour::NibbleEnd(s[rr][h], p[rr][h]);
    }
  }
}

// Block32Op (q4, q4_1, q5_0, q5_1) of matmul_dot512.cc on 8-column halves.
template <bool kFifth, bool kMin, int kOffset>
struct Block32Op256 {
  Q8Rows x;
  const uint8_t* w;  // packed, at the tile's first group
  int64_t steps;     // blocks
  static constexpr int64_t kRecord = Block32Record(kFifth, kMin), kScales = Block32Scales(kFifth);
  static constexpr int64_t kChunk = 16;
  static constexpr int kTileRows = flavour::kTileRows, kTileGroups = flavour::kTileGroups;
  static constexpr bool kAheadAlone = flavour::kNibblesAheadAlone;

  Block32Op256 Shift(int64_t groups) const { return {x, w + groups * steps * kRecord, steps}; }
  static int64_t StepsPerRow(int in) { return Q8BlocksPerRow(in); }

  template <int R, int C>
  STEADY_DOT256_TARGET void Tile(int r, int64_t b0, int64_t b1, float* acc, bool ahead) const {
    constexpr int H = 2 * C;
    for (int64_t b = b0; b < b1; ++b) {
      __m256i s[R][H];
      Start(x, r, b, kOffset, s);
      const uint8_t* wb = w + b * kRecord;
      if (ahead && b + kChunk < steps) PrefetchGroups<C>(wb + kChunk * kRecord, steps * kRecord, 0, kRecord);
      AddNibbleBlock<R, H, kFifth>(x, r, b, [&](int v, int h) { return wb + (h / 2) * steps * kRecord + v * 64 + (h % 2) * 32; }, s);
      __m256 ws[H];
      for (int h = 0; h < H; ++h) {
        ws[h] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + (h / 2) * steps * kRecord + kScales + (h % 2) * 16)));
      }
      Scale(x, r, b, s, ws, acc);
      if constexpr (kMin) {
        for (int h = 0; h < H; ++h) {
          const __m256 m = _mm256_cvtph_ps(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + (h / 2) * steps * kRecord + kScales + 32 + (h % 2) * 16)));
          for (int rr = 0; rr < R; ++rr) {
            float* a = acc + rr * H * 8 + h * 8;
            const int64_t i = (r + rr) * x.blocks + b;
            _mm256_store_ps(a, _mm256_fmadd_ps(m, _mm256_set1_ps(x.xscale[i] * float(x.xsum[i])), _mm256_load_ps(a)));
          }
        }
      }
    }
  }
};
using Q4Op256 = Block32Op256<false, false, 8>;

// KQuantOp (q4k, q5k) of matmul_dot512.cc on 8-column halves.
template <bool kFifth>
struct KQuantOp256 {
  Q8Rows x;
  const uint8_t* w;  // packed, at the tile's first group
  int64_t steps;     // super-blocks
  static constexpr int64_t kRecord = KQuantRecord(kFifth), kSubRecord = KQuantSubRecord(kFifth);
  static constexpr int64_t kChunk = 2;
  static constexpr int kTileRows = flavour::kTileRows, kTileGroups = flavour::kTileGroups;
  static constexpr bool kAheadAlone = flavour::kNibblesAheadAlone;

  KQuantOp256 Shift(int64_t groups) const { return {x, w + groups * steps * kRecord, steps}; }
  static int64_t StepsPerRow(int in) { return Q4KBlocksPerRow(in); }

  template <int R, int C>
  STEADY_DOT256_TARGET void Tile(int r, int64_t b0, int64_t b1, float* acc, bool ahead) const {
    constexpr int H = 2 * C;
    for (int64_t b = b0; b < b1; ++b) {
      const uint8_t* wb = w + b * kRecord;
      // x's padding ends at its last q8_0 block; the weights' sub-blocks past it are zero.
      const int64_t subs = std::min<int64_t>(8, x.blocks - 8 * b);
      for (int64_t sub = 0; sub < subs; ++sub) {
        const int64_t xb = 8 * b + sub;
        if (ahead && b + kChunk < steps) {
          PrefetchGroups<C>(wb + kChunk * kRecord, steps * kRecord, sub * kRecord / 8, (sub + 1) * kRecord / 8);
        }
        __m256i sums[R][H];
        Start(x, r, xb, 0, sums);
        AddNibbleBlock<R, H, kFifth>(x, r, xb, [&](int v, int h) {
          return wb + (h / 2) * steps * kRecord + kQ4KHead + sub * kSubRecord + v * 64 + (h % 2) * 32;
        }, sums);
        for (int h = 0; h < H; ++h) {
          const uint8_t* g = wb + (h / 2) * steps * kRecord;
          const int half = h % 2;
          const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 16 * half)));
          const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 32 + 16 * half)));
          const __m256 scale = _mm256_mul_ps(
              d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(g + 64 + 16 * sub + 8 * half)))));
          const __m256 min = _mm256_mul_ps(
              dmin, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(g + 192 + 16 * sub + 8 * half)))));
          for (int rr = 0; rr < R; ++rr) {
            float* a = acc + rr * H * 8 + h * 8;
            const int64_t i = (r + rr) * x.blocks + xb;
            const float dx = x.xscale[i];
            __m256 sum = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums[rr][h]), _mm256_mul_ps(scale, _mm256_set1_ps(dx)), _mm256_load_ps(a));
            sum = _mm256_fnmadd_ps(min, _mm256_set1_ps(dx * float(x.xsum[i])), sum);
            _mm256_store_ps(a, sum);
          }
        }
      }
    }
  }
};

// matmul_dot512.cc's HighBits on a half.
STEADY_DOT256_TARGET inline __m256i HighBits(__m256i hv, int v) {
  const __m256i moved = v <= 2 ? _mm256_slli_epi16(hv, 4 - 2 * v) : _mm256_srli_epi16(hv, 2 * v - 4);
  return _mm256_and_si256(moved, _mm256_set1_epi8(0x30));
}

// Q6KOp of matmul_dot512.cc on 8-column halves. The 6-bit weights are unsigned like the nibbles and
// take AddNibbles, two groups of 4 inputs at a time between NibbleStart and NibbleEnd (AVX2's int16
// pairs: 2 x 2 products of at most 63 * 127 stay below 32767; 4 x 2 would not).
struct Q6KOp256 {
  Q8Rows x;          // WithHalfSums
  const uint8_t* w;  // packed, at the tile's first group
  int64_t steps;     // super-blocks
  static constexpr int64_t kChunk = 1;
  static constexpr int kTileRows = flavour::kTileRows, kTileGroups = flavour::kTileGroups;
  static constexpr bool kAheadAlone = flavour::kNibblesAheadAlone;

  Q6KOp256 Shift(int64_t groups) const { return {x, w + groups * steps * kQ6KRecord, steps}; }
  static int64_t StepsPerRow(int in) { return Q6KBlocksPerRow(in); }

  template <int R, int C>
  STEADY_DOT256_TARGET void Tile(int r, int64_t b0, int64_t b1, float* acc, bool ahead) const {
    constexpr int H = 2 * C;
    const __m256i low = _mm256_set1_epi8(0x0f);
    for (int64_t b = b0; b < b1; ++b) {
      const uint8_t* wb = w + b * kQ6KRecord;
      const int64_t xblocks = std::min<int64_t>(8, x.blocks - 8 * b);
      for (int64_t blk = 0; blk < xblocks; ++blk) {
        const int64_t xb = 8 * b + blk;
        if (ahead && b + kChunk < steps) {
          PrefetchGroups<C>(wb + kChunk * kQ6KRecord, steps * kQ6KRecord, blk * kQ6KRecord / 8, (blk + 1) * kQ6KRecord / 8);
        }
        const uint8_t* rb = wb + kQ6KHead + blk * kQ6KBlockRecord;
        #pragma GCC unroll 2
        for (int hb = 0; hb < 2; ++hb) {  // sub-block 2 blk + hb
          __m256i sums[R][H];
          for (int rr = 0; rr < R; ++rr) {
            const __m256i start = _mm256_set1_epi32(-32 * x.HalfSum(r + rr, xb, hb));
            for (int h = 0; h < H; ++h) sums[rr][h] = start;
          }
          #pragma GCC unroll 2
          for (int pair = 0; pair < 2; ++pair) {
            flavour::NibbleSums p[R][H];
            for (int rr = 0; rr < R; ++rr) {
              for (int h = 0; h < H; ++h) p[rr][h] = flavour::NibbleStart(sums[rr][h]);
            }
            #pragma GCC unroll 2
            for (int v = 2 * pair; v < 2 * pair + 2; ++v) {
              const int u = 4 * hb + v;
              __m256i wv[H];
              for (int h = 0; h < H; ++h) {
                const uint8_t* q = rb + (h / 2) * steps * kQ6KRecord + (h % 2) * 32;
                const __m256i nib = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + (u / 2) * 64));
                const __m256i lo = u % 2 == 0 ? _mm256_and_si256(nib, low) : _mm256_and_si256(_mm256_srli_epi16(nib, 4), low);
                wv[h] = _mm256_or_si256(lo, HighBits(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 256 + hb * 64)), v));
              }
              for (int rr = 0; rr < R; ++rr) {
                const __m256i xv = Broadcast4(x, r + rr, xb, u);
                for (int h = 0; h < H; ++h) p[rr][h] = flavour::AddNibbles(p[rr][h], wv[h], xv);
              }
            }
            for (int rr = 0; rr < R; ++rr) {
              for (int h = 0; h < H; ++h) sums[rr][h] = flavour::NibbleEnd(sums[rr][h], p[rr][h]);
            }
          }
          for (int h = 0; h < H; ++h) {
            const uint8_t* g = wb + (h / 2) * steps * kQ6KRecord;
            const int half = h % 2;
            const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 16 * half)));
            const __m256 scale = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                                                      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(g + 32 + 16 * (2 * blk + hb) + 8 * half)))));
            for (int rr = 0; rr < R; ++rr) {
              float* a = acc + rr * H * 8 + h * 8;
              const float dx = x.xscale[(r + rr) * x.blocks + xb];
              _mm256_store_ps(a, _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums[rr][h]), _mm256_mul_ps(scale, _mm256_set1_ps(dx)), _mm256_load_ps(a)));
            }
          }
        }
      }
    }
  }
};

#define STEADY_DRIVER_TARGET STEADY_DOT256_TARGET
#include "kernels/cpu/matmul_dot_driver-inl.h"
#undef STEADY_DRIVER_TARGET

// matmul_dot512.cc's QuantizeRow on 8 lanes: the same scale, the same products rounded by the same
// conversion, each q kept to its low byte, and the sum of the stored bytes.
STEADY_DOT256_TARGET void QuantizeRow(const float* x, int64_t in, int8_t* q, float* scales, int32_t* sums) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int64_t b = 0; b * kQ8Block < in; ++b) {
    const int64_t k0 = b * kQ8Block, left = std::min<int64_t>(kQ8Block, in - k0);
    alignas(32) float block[kQ8Block] = {};
    std::memcpy(block, x + k0, sizeof(float) * size_t(left));
    __m256 v[4], amax = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_load_ps(block + 8 * i);
      amax = _mm256_max_ps(amax, _mm256_and_ps(v[i], abs_mask));
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, amax);
    const float m = *std::max_element(lanes, lanes + 8);
    const float scale = m / 127.0f;
    const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    __m256i total = _mm256_setzero_si256();
    alignas(32) int32_t ints[kQ8Block];
    for (int i = 0; i < 4; ++i) {
      __m256i qi = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], _mm256_set1_ps(inv)));
      qi = _mm256_srai_epi32(_mm256_slli_epi32(qi, 24), 24);
      total = _mm256_add_epi32(total, qi);
      _mm256_store_si256(reinterpret_cast<__m256i*>(ints + 8 * i), qi);
    }
    for (int i = 0; i < kQ8Block; ++i) q[k0 + i] = int8_t(ints[i]);
    alignas(32) int32_t t[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(t), total);
    scales[b] = scale;
    sums[b] = t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
  }
}

// y = q8(x) w^T for an Op of this file: x quantized by this path's own code (no AVX-512 on an AVX2
// CPU), with its half-block sums for q6k, then every group of columns.
template <class Op>
void Multiply(const float* x, int rows, int in, const DotProduct* products, int count) {
  Q8Rows xq = QuantizeRows(x, rows, in, QuantizeRow);
  if constexpr (std::is_same_v<Op, Q6KOp256>) xq = WithHalfSums(xq, rows);  // q6k's sub-blocks are half a block
  auto make = [&](const void* packed) { return Op{xq, static_cast<const uint8_t*>(packed), Op::StepsPerRow(in)}; };
  Run(make, rows, in, products, count);
}

// This path's kernels, one per format (matmul_dot_tiles.h Int8Kernels).
constexpr Int8Kernels kKernels = {Multiply<Q8Op256>,
                                  Multiply<Q4Op256>,
                                  Multiply<KQuantOp256<false>>,
                                  Multiply<KQuantOp256<true>>,
                                  Multiply<Q6KOp256>,
                                  Multiply<Block32Op256<false, true, 0>>,
                                  Multiply<Block32Op256<true, false, 16>>,
                                  Multiply<Block32Op256<true, true, 0>>};
