// Highway compiles this file once per x86 instruction set (foreach_target.h) and HWY_DYNAMIC_DISPATCH
// picks the best one the CPU supports at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/matmul.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/q2k.h"
#include "kernels/cpu/q32.h"
#include "kernels/cpu/q3k_iq4.h"
#include "kernels/cpu/q4k.h"
#include "kernels/cpu/q5k.h"
#include "kernels/cpu/q6k.h"

HWY_BEFORE_NAMESPACE();
namespace steady::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Weight rows per register tile: with 32 vector registers (AVX-512) a 4 x 4 tile of accumulators
// plus 4 weight vectors and one x vector fits; with 16 (AVX2, SSE4) a 4 x 3 tile does.
constexpr int kTileCols = HWY_MAX_BYTES >= 64 ? 4 : 3;

// Rows of x handled per pass over a block of weight rows, and the stretch of `in` their
// accumulators run over before moving to the next 4 rows: a chunk of C weight rows (C KB) stays in
// L1 while every row of x uses it, so the weights stream from memory at an even pace while the
// arithmetic runs, instead of in bursts between stretches of pure arithmetic.
constexpr int kPassRows = 32;
constexpr int64_t kChunk = 256;

// The weight matrices the kernel reads, as fp32 values: fp32 as they are; bf16 bits (the top half
// of an fp32) widened exactly; q8_0 blocks as q * the block's scale, rounded to fp32. Every product
// below is the fp32 product of that value. Shift() moves a matrix to its row j, LoadWeights() reads
// a vector of a row from column k (the K-quants: WidenChunk() a super-block into L1, below),
// WeightValue() one weight.
HWY_INLINE const float* Shift(const float* w, int64_t in, int64_t j) { return w + j * in; }
HWY_INLINE const uint16_t* Shift(const uint16_t* w, int64_t in, int64_t j) { return w + j * in; }
// IEEE half-precision bits; a struct so that it overloads apart from bf16's uint16_t.
struct F16Weights {
  const uint16_t* h;
};
HWY_INLINE F16Weights Shift(F16Weights w, int64_t in, int64_t j) { return {w.h + j * in}; }
HWY_INLINE Q8Weights Shift(Q8Weights w, int64_t in, int64_t j) {
  return {w.q + j * in, w.scales + j * Q8BlocksPerRow(in)};
}
HWY_INLINE Q4Weights Shift(Q4Weights w, int64_t in, int64_t j) { return {w.blocks + j * Q4Bytes(1, in)}; }
HWY_INLINE Q4KWeights Shift(Q4KWeights w, int64_t in, int64_t j) { return {w.blocks + j * Q4KBytes(1, in)}; }
HWY_INLINE Q5KWeights Shift(Q5KWeights w, int64_t in, int64_t j) { return {w.blocks + j * Q5KBytes(1, in)}; }
HWY_INLINE Q6KWeights Shift(Q6KWeights w, int64_t in, int64_t j) { return {w.blocks + j * Q6KBytes(1, in)}; }
HWY_INLINE Q8_0Weights Shift(Q8_0Weights w, int64_t in, int64_t j) { return {w.blocks + j * Q8_0Bytes(1, in)}; }
// q4_1, q5_0 and q5_1 (q32.h): a type each, so that each one's loads are code of their own.
template <Q32Type kType>
struct Q32Rows {
  const uint8_t* blocks;
};
template <Q32Type T>
HWY_INLINE Q32Rows<T> Shift(Q32Rows<T> w, int64_t in, int64_t j) { return {w.blocks + j * Q32Bytes(T, 1, in)}; }
// q2k (q2k.h), q3k, iq4_xs and iq4_nl (q3k_iq4.h); iq4_nl's row carries its length, since a chunk of
// it (8 blocks) may run past a row's end.
HWY_INLINE Q2KWeights Shift(Q2KWeights w, int64_t in, int64_t j) { return {w.blocks + j * Q2KBytes(1, in)}; }
HWY_INLINE Q3KWeights Shift(Q3KWeights w, int64_t in, int64_t j) { return {w.blocks + j * Q3KBytes(1, in)}; }
HWY_INLINE Iq4XsWeights Shift(Iq4XsWeights w, int64_t in, int64_t j) { return {w.blocks + j * Iq4XsBytes(1, in)}; }
struct Iq4NlRows {
  const uint8_t* blocks;
  int64_t in;
};
HWY_INLINE Iq4NlRows Shift(Iq4NlRows w, int64_t in, int64_t j) { return {w.blocks + j * Iq4NlBytes(1, in), in}; }

// The fp16 value at p, widened exactly by the vector unit (F16C where there is one): the scalar
// conversion's branches cost more than the weights' own arithmetic (a llama1b step: 60 ms, 22 ms
// with this, for q4).
HWY_INLINE float WidenHalf(const void* p) {
  const hn::CappedTag<float, 1> d1;
  const hn::Rebind<hwy::float16_t, decltype(d1)> dh1;
  return hn::GetLane(hn::PromoteTo(d1, hn::LoadU(dh1, static_cast<const hwy::float16_t*>(p))));
}

template <class D>
HWY_INLINE hn::Vec<D> LoadWeights(D d, const float* HWY_RESTRICT w, int64_t k) {
  return hn::LoadU(d, w + k);
}
template <class D>
HWY_INLINE hn::Vec<D> LoadWeights(D d, const uint16_t* HWY_RESTRICT w, int64_t k) {
  const hn::RebindToUnsigned<D> du32;
  const hn::Rebind<uint16_t, D> du16;
  return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du32, hn::LoadU(du16, w + k))));
}
template <class D>
HWY_INLINE hn::Vec<D> LoadWeights(D d, F16Weights w, int64_t k) {
  const hn::Rebind<hwy::float16_t, D> df16;
  return hn::PromoteTo(d, hn::LoadU(df16, reinterpret_cast<const hwy::float16_t*>(w.h) + k));
}
// A vector never straddles two blocks: lanes (4, 8 or 16) divide kQ8Block and k is a multiple of them.
template <class D>
HWY_INLINE hn::Vec<D> LoadWeights(D d, Q8Weights w, int64_t k) {
  const hn::RebindToSigned<D> di32;
  const hn::Rebind<int8_t, D> di8;
  return hn::Mul(hn::ConvertTo(d, hn::PromoteTo(di32, hn::LoadU(di8, w.q + k))), hn::Set(d, w.scales[k / kQ8Block]));
}
// q8_0 (matmul.h): as q8's, the block's fp16 d widened exactly.
template <class D>
HWY_INLINE hn::Vec<D> LoadWeights(D d, Q8_0Weights w, int64_t k) {
  const hn::RebindToSigned<D> di32;
  const hn::Rebind<int8_t, D> di8;
  const uint8_t* block = w.blocks + (k / kQ8Block) * kQ8_0BlockBytes;
  const float scale = WidenHalf(block);
  const auto q = hn::PromoteTo(di32, hn::LoadU(di8, reinterpret_cast<const int8_t*>(block + 2 + k % kQ8Block)));
  return hn::Mul(hn::ConvertTo(d, q), hn::Set(d, scale));
}
// q4 (matmul.h): a vector of lanes within one half of a block: its bytes' low or high nibbles, less 8,
// times the block's scale: exact in fp32 (a 4-bit integer times an fp16 value), as Q4WeightValue.
template <class D>
HWY_INLINE hn::Vec<D> LoadWeights(D d, Q4Weights w, int64_t k) {
  const hn::RebindToSigned<D> di32;
  const hn::RebindToUnsigned<D> du32;
  const hn::Rebind<uint8_t, D> du8;
  const int64_t b = k / kQ8Block, i = k % kQ8Block;
  const uint8_t* block = w.blocks + b * kQ4_0BlockBytes;
  auto bytes = hn::PromoteTo(du32, hn::LoadU(du8, block + 2 + (i & 15)));
  bytes = i < 16 ? hn::And(bytes, hn::Set(du32, 15u)) : hn::ShiftRight<4>(bytes);
  const auto q = hn::Sub(hn::ConvertTo(d, hn::BitCast(di32, bytes)), hn::Set(d, 8.0f));
  return hn::Mul(q, hn::Set(d, WidenHalf(block)));
}
// q4_1, q5_0 and q5_1 (q32.h): a vector of lanes within one half of a block, its bytes' low or high
// nibbles with (q5) their fifth bits from qh, then d (q - 16) (exact) or d q + m (rounded once), as
// Q32WeightValue.
template <class D, Q32Type T>
HWY_INLINE hn::Vec<D> LoadWeights(D d, Q32Rows<T> w, int64_t k) {
  constexpr Q32Format f = Q32FormatOf(T);
  const hn::RebindToSigned<D> di32;
  const hn::RebindToUnsigned<D> du32;
  const hn::Rebind<uint8_t, D> du8;
  const int64_t b = k / kQ8Block;
  const int i = int(k % kQ8Block);
  const uint8_t* block = w.blocks + b * f.bytes;
  auto q = hn::PromoteTo(du32, hn::LoadU(du8, block + f.qs + (i & 15)));
  q = i < 16 ? hn::And(q, hn::Set(du32, 15u)) : hn::ShiftRight<4>(q);
  if constexpr (f.fifth) {
    uint32_t qh;
    std::memcpy(&qh, block + (f.min ? 4 : 2), 4);
    const auto high = hn::And(hn::Shr(hn::Set(du32, qh), hn::Iota(du32, uint32_t(i))), hn::Set(du32, 1u));
    q = hn::Or(q, hn::ShiftLeft<4>(high));
  }
  const auto qf = hn::ConvertTo(d, hn::BitCast(di32, q));
  if constexpr (f.min) {
    const hn::CappedTag<float, 2> d2;  // d and m widened together (F16C where there is one)
    const hn::Rebind<hwy::float16_t, decltype(d2)> dh2;
    const auto dm = hn::PromoteTo(d2, hn::LoadU(dh2, reinterpret_cast<const hwy::float16_t*>(block)));
    return hn::MulAdd(qf, hn::Set(d, hn::GetLane(dm)), hn::Set(d, hn::ExtractLane(dm, 1)));
  } else {
    return hn::Mul(hn::Sub(qf, hn::Set(d, float(f.offset))), hn::Set(d, WidenHalf(block)));
  }
}
HWY_INLINE float WeightValue(const float* w, int64_t k) { return w[k]; }
HWY_INLINE float WeightValue(const uint16_t* w, int64_t k) { return hwy::F32FromBF16(hwy::bfloat16_t{w[k]}); }
HWY_INLINE float WeightValue(F16Weights w, int64_t k) { return F16ToFloat(w.h[k]); }
HWY_INLINE float WeightValue(Q8Weights w, int64_t k) { return float(w.q[k]) * w.scales[k / kQ8Block]; }
// Shift() left w at its row: the row index is 0 and `in` only matters for it.
HWY_INLINE float WeightValue(Q4Weights w, int64_t k) { return Q4WeightValue(w, k + 1, 0, k); }
HWY_INLINE float WeightValue(Q4KWeights w, int64_t k) { return Q4KWeightValue(w, k + 1, 0, k); }
HWY_INLINE float WeightValue(Q5KWeights w, int64_t k) { return Q5KWeightValue(w, k + 1, 0, k); }
HWY_INLINE float WeightValue(Q6KWeights w, int64_t k) { return Q6KWeightValue(w, k + 1, 0, k); }
template <Q32Type T>
HWY_INLINE float WeightValue(Q32Rows<T> w, int64_t k) { return Q32WeightValue({T, w.blocks}, k + 1, 0, k); }
HWY_INLINE float WeightValue(Q2KWeights w, int64_t k) { return Q2KWeightValue(w, k + kQ2KBlock, 0, k); }
HWY_INLINE float WeightValue(Q3KWeights w, int64_t k) { return Q3KWeightValue(w, k + kQ3KBlock, 0, k); }
HWY_INLINE float WeightValue(Iq4XsWeights w, int64_t k) { return Iq4XsWeightValue(w, k + kIq4XsBlock, 0, k); }
HWY_INLINE float WeightValue(Iq4NlRows w, int64_t k) { return Iq4NlWeightValue({w.blocks}, w.in, 0, k); }
HWY_INLINE float WeightValue(Q8_0Weights w, int64_t k) {
  const uint8_t* block = w.blocks + (k / kQ8Block) * kQ8_0BlockBytes;
  return float(int8_t(block[2 + k % kQ8Block])) * F16At(block);
}

// Asks for weights [k0, k1) of row c of w to come into the caches (row c as Shift() finds it): the
// bytes that hold them for the formats read in place, nothing for the 4-bit ones (their blocks'
// layout differs; left to the hardware).
HWY_INLINE void PrefetchBytes(const void* p, int64_t bytes) {
  for (int64_t o = 0; o < bytes; o += 64) hwy::Prefetch(static_cast<const char*>(p) + o);
}
HWY_INLINE void PrefetchRow(const float* w, int64_t in, int c, int64_t k0, int64_t k1) {
  PrefetchBytes(w + c * in + k0, (k1 - k0) * 4);
}
HWY_INLINE void PrefetchRow(const uint16_t* w, int64_t in, int c, int64_t k0, int64_t k1) {
  PrefetchBytes(w + c * in + k0, (k1 - k0) * 2);
}
HWY_INLINE void PrefetchRow(F16Weights w, int64_t in, int c, int64_t k0, int64_t k1) {
  PrefetchBytes(w.h + c * in + k0, (k1 - k0) * 2);
}
HWY_INLINE void PrefetchRow(Q8Weights w, int64_t in, int c, int64_t k0, int64_t k1) {
  PrefetchBytes(w.q + c * in + k0, k1 - k0);
}
HWY_INLINE void PrefetchRow(Q4Weights, int64_t, int, int64_t, int64_t) {}
HWY_INLINE void PrefetchRow(Q4KWeights, int64_t, int, int64_t, int64_t) {}
HWY_INLINE void PrefetchRow(Q5KWeights, int64_t, int, int64_t, int64_t) {}
HWY_INLINE void PrefetchRow(Q6KWeights, int64_t, int, int64_t, int64_t) {}
HWY_INLINE void PrefetchRow(Q8_0Weights, int64_t, int, int64_t, int64_t) {}
template <Q32Type T>
HWY_INLINE void PrefetchRow(Q32Rows<T>, int64_t, int, int64_t, int64_t) {}
HWY_INLINE void PrefetchRow(Q2KWeights, int64_t, int, int64_t, int64_t) {}
HWY_INLINE void PrefetchRow(Q3KWeights, int64_t, int, int64_t, int64_t) {}
HWY_INLINE void PrefetchRow(Iq4XsWeights, int64_t, int, int64_t, int64_t) {}
HWY_INLINE void PrefetchRow(Iq4NlRows, int64_t, int, int64_t, int64_t) {}

// Accumulators acc[r][c] (vectors, in `acc`) += x[r, k0:k1] * w[c, k0:k1], lane by lane, for R rows
// of x and C rows of w, each `in` long.
template <int R, int C, typename W>
HWY_INLINE void TileChunk(const float* HWY_RESTRICT x, int64_t in, W w, int64_t k0, int64_t k1,
                          float* HWY_RESTRICT acc) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const int64_t lanes = int64_t(hn::Lanes(d));
  V a[R][C];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) a[r][c] = hn::Load(d, acc + (r * C + c) * lanes);
  }
  W rows[C];
  for (int c = 0; c < C; ++c) rows[c] = Shift(w, in, c);
  for (int64_t k = k0; k < k1; k += lanes) {
    V wv[C];
    for (int c = 0; c < C; ++c) wv[c] = LoadWeights(d, rows[c], k);
    for (int r = 0; r < R; ++r) {
      const V xv = hn::LoadU(d, x + r * in + k);
      for (int c = 0; c < C; ++c) a[r][c] = hn::MulAdd(xv, wv[c], a[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) hn::Store(a[r][c], d, acc + (r * C + c) * lanes);
  }
}

// C rows of widened weights, kChunk values each, from input k0 on (fp32, aligned).
struct WidenedChunk {
  const float* values;
  int64_t k0;
};
HWY_INLINE WidenedChunk Shift(WidenedChunk w, int64_t, int64_t j) { return {w.values + j * kChunk, w.k0}; }
template <class D>
HWY_INLINE hn::Vec<D> LoadWeights(D d, WidenedChunk w, int64_t k) {
  return hn::Load(d, w.values + (k - w.k0));
}

// out[i] = factor * float(v[i]) for the n (a multiple of 8) 8-bit integers v (uint8_t or int8_t), a
// vector at a time: a super-block's scales (exact: an fp16 value times at most 8 bits).
template <typename T>
HWY_INLINE void TimesFactor(const T* v, int n, float factor, float* HWY_RESTRICT out) {
  const hn::CappedTag<float, 8> d;
  const hn::RebindToSigned<decltype(d)> di32;
  const hn::Rebind<T, decltype(d)> d8;
  for (int i = 0; i < n; i += int(hn::Lanes(d))) {
    hn::StoreU(hn::Mul(hn::ConvertTo(d, hn::PromoteTo(di32, hn::LoadU(d8, v + i))), hn::Set(d, factor)), d, out + i);
  }
}

// q4k (q4k.h) and q5k (q5k.h): the super-block at `block` (a chunk is one), its eight scales and
// minimums unpacked and times d and dmin once (exact in fp32: 11 significant bits times 6), then
// each value q * (d sc) - dmin m in one rounding (the product is exact), Q4KWeightValue's and
// Q5KWeightValue's value: q is the nibbles' low (even sub-block s) or high (odd s) halves at
// `nibbles` (the block's 32-byte runs) and for q5k bit s of the same lanes' qh bytes at `fifth` as 16.
template <bool kFifth>
HWY_INLINE void WidenKQuantBlock(const uint8_t* block, const uint8_t* nibbles, const uint8_t* fifth, float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di32;
  const hn::RebindToUnsigned<decltype(d)> du32;
  const hn::Rebind<uint8_t, decltype(d)> du8;
  const int lanes = int(hn::Lanes(d));
  const hn::CappedTag<float, 2> d2;
  const hn::Rebind<hwy::float16_t, decltype(d2)> dh2;
  const auto dd = hn::PromoteTo(d2, hn::LoadU(dh2, reinterpret_cast<const hwy::float16_t*>(block)));
  const Q4KScales sm = Q4KBlockScales(block);
  HWY_ALIGN float scale[8], min[8];
  TimesFactor(sm.sc, 8, hn::GetLane(dd), scale);
  TimesFactor(sm.m, 8, hn::ExtractLane(dd, 1), min);
  for (int s = 0; s < 8; ++s) {
    for (int i = 0; i < kQ4KSub; i += lanes) {
      auto q = hn::PromoteTo(du32, hn::LoadU(du8, nibbles + 32 * (s / 2) + i));
      q = s % 2 == 0 ? hn::And(q, hn::Set(du32, 15u)) : hn::ShiftRight<4>(q);
      if constexpr (kFifth) {
        const auto high = hn::And(hn::ShiftRightSame(hn::PromoteTo(du32, hn::LoadU(du8, fifth + i)), s), hn::Set(du32, 1u));
        q = hn::Or(q, hn::ShiftLeft<4>(high));
      }
      hn::Store(hn::MulAdd(hn::ConvertTo(d, hn::BitCast(di32, q)), hn::Set(d, scale[s]), hn::Set(d, -min[s])), d,
                out + kQ4KSub * s + i);
    }
  }
}
static_assert(kChunk == kQ4KBlock && kChunk == kQ5KBlock && kChunk == kQ6KBlock && kChunk == kQ3KBlock && kChunk == kQ2KBlock &&
                  kChunk == kIq4XsBlock, "a chunk is one super-block");
HWY_INLINE void WidenChunk(Q4KWeights row, int64_t k0, float* HWY_RESTRICT out) {
  const uint8_t* block = row.blocks + (k0 / kQ4KBlock) * kQ4KBlockBytes;
  WidenKQuantBlock<false>(block, block + 16, nullptr, out);
}
HWY_INLINE void WidenChunk(Q5KWeights row, int64_t k0, float* HWY_RESTRICT out) {
  const uint8_t* block = row.blocks + (k0 / kQ5KBlock) * kQ5KBlockBytes;
  WidenKQuantBlock<true>(block, block + 48, block + 16, out);
}

// q6k (q6k.h): the super-block, its sixteen scales times d once (exact), then each value (q - 32) *
// (d sc) in one rounding, Q6KWeightValue's: value i is a sub-block's 16 consecutive bytes of ql (their
// low or high nibbles) and of qh (two of their bits).
HWY_INLINE void WidenChunk(Q6KWeights row, int64_t k0, float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di32;
  const hn::RebindToUnsigned<decltype(d)> du32;
  const hn::Rebind<uint8_t, decltype(d)> du8;
  const int lanes = int(hn::Lanes(d));
  const uint8_t* block = row.blocks + (k0 / kQ6KBlock) * kQ6KBlockBytes;
  HWY_ALIGN float scale[kQ6KBlock / kQ6KSub];
  TimesFactor(reinterpret_cast<const int8_t*>(block + 192), kQ6KBlock / kQ6KSub, WidenHalf(block + 208), scale);
  for (int half = 0; half < 2; ++half) {
    for (int t = 0; t < 4; ++t) {
      for (int l = 0; l < 32; l += lanes) {
        auto low = hn::PromoteTo(du32, hn::LoadU(du8, block + 64 * half + l + 32 * (t % 2)));
        low = t < 2 ? hn::And(low, hn::Set(du32, 15u)) : hn::ShiftRight<4>(low);
        const auto high =
            hn::And(hn::ShiftRightSame(hn::PromoteTo(du32, hn::LoadU(du8, block + 128 + 32 * half + l)), 2 * t), hn::Set(du32, 3u));
        const auto q = hn::Sub(hn::BitCast(di32, hn::Or(low, hn::ShiftLeft<4>(high))), hn::Set(di32, 32));
        const int i = 128 * half + 32 * t + l;
        hn::Store(hn::Mul(hn::ConvertTo(d, q), hn::Set(d, scale[i / kQ6KSub])), d, out + i);
      }
    }
  }
}

// q2k (q2k.h) and q3k (q3k_iq4.h): value 128 h + 32 j + l (half h, bit pair j) of a super-block is
// bits 2j of qs[32 h + l], for q3k less 4 unless bit 4h + j of hmask[l] is set; each value q * (d
// scale) - (dmin min) in one rounding (the product is exact: 11 + 6 significant bits times 3), with
// q3k's minimums 0 (adding -0 keeps every product's bits, a zero's sign included). The sixteen
// scales and minimums are times d and dmin once (exact). A vector of lanes (at most 16) lies within
// one sub-block of 16.
HWY_INLINE void WidenTwoBitBlock(const uint8_t* qs, const uint8_t* hmask, const float* scale, const float* min,
                                 float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di32;
  const hn::RebindToUnsigned<decltype(d)> du32;
  const hn::Rebind<uint8_t, decltype(d)> du8;
  const int lanes = int(hn::Lanes(d));
  for (int h = 0; h < 2; ++h) {
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < 32; l += lanes) {
        auto q = hn::BitCast(di32, hn::And(hn::ShiftRightSame(hn::PromoteTo(du32, hn::LoadU(du8, qs + 32 * h + l)), 2 * j),
                                           hn::Set(du32, 3u)));
        if (hmask != nullptr) {
          const auto third = hn::And(hn::ShiftRightSame(hn::PromoteTo(du32, hn::LoadU(du8, hmask + l)), 4 * h + j),
                                     hn::Set(du32, 1u));
          q = hn::Sub(hn::Or(q, hn::BitCast(di32, hn::ShiftLeft<2>(third))), hn::Set(di32, 4));
        }
        const int v = 128 * h + 32 * j + l;
        hn::Store(hn::MulAdd(hn::ConvertTo(d, q), hn::Set(d, scale[v / 16]), hn::Set(d, -min[v / 16])), d, out + v);
      }
    }
  }
}
HWY_INLINE void WidenChunk(Q2KWeights row, int64_t k0, float* HWY_RESTRICT out) {
  const uint8_t* block = row.blocks + (k0 / kQ2KBlock) * kQ2KBlockBytes;
  HWY_ALIGN float scale[kQ2KBlock / 16], min[kQ2KBlock / 16];
  const float dd = WidenHalf(block + 80), dmin = WidenHalf(block + 82);
  for (int s = 0; s < kQ2KBlock / 16; ++s) {
    scale[s] = dd * float(Q2KScale(block, s));
    min[s] = dmin * float(Q2KMin(block, s));
  }
  WidenTwoBitBlock(block + 16, nullptr, scale, min, out);
}
HWY_INLINE void WidenChunk(Q3KWeights row, int64_t k0, float* HWY_RESTRICT out) {
  const uint8_t* block = row.blocks + (k0 / kQ3KBlock) * kQ3KBlockBytes;
  HWY_ALIGN float scale[kQ3KBlock / 16];
  HWY_ALIGN const float min[kQ3KBlock / 16] = {};
  const float dd = WidenHalf(block + 108);
  for (int s = 0; s < kQ3KBlock / 16; ++s) scale[s] = dd * float(Q3KScale(block, s));
  WidenTwoBitBlock(block + 32, block, scale, min, out);
}

// iq4_xs and iq4_nl (q3k_iq4.h): each run of 32 values, its table values times the run's scale (d *
// scale for IQ4_XS, exact; d for IQ4_NL) in one rounding, the WeightValue's. iq4_nl's chunk stops at
// the row's end.
HWY_INLINE void WidenIq4Run(const uint8_t* qs, float scale, float* HWY_RESTRICT out) {
  for (int i = 0; i < kQ8Block; ++i) out[i] = scale * float(Iq4RunValue(qs, i));
}
HWY_INLINE void WidenChunk(Iq4XsWeights row, int64_t k0, float* HWY_RESTRICT out) {
  const uint8_t* block = row.blocks + (k0 / kIq4XsBlock) * kIq4XsBlockBytes;
  const float dd = WidenHalf(block);
  for (int r = 0; r < kIq4XsBlock / kQ8Block; ++r) {
    WidenIq4Run(block + 8 + 16 * r, dd * float(Iq4XsScale(block, r)), out + r * kQ8Block);
  }
}
HWY_INLINE void WidenChunk(Iq4NlRows row, int64_t k0, float* HWY_RESTRICT out) {
  for (int64_t k = k0; k < std::min(row.in, k0 + kChunk); k += kQ8Block) {
    const uint8_t* block = row.blocks + (k / kQ8Block) * kIq4NlBlockBytes;
    WidenIq4Run(block + 2, WidenHalf(block), out + (k - k0));
  }
}

// The formats whose weights cost more to unpack than to multiply, widened a chunk at a time (C rows
// of kChunk values into L1) before any row of x uses them: those with a WidenChunk above, the
// K-quants. Read a vector at a time, every vector unpacked its sub-block's scale and minimum with
// scalar code the vector work waited on, and did it again for each 4-row tile (2026-11-29: 1.6-2x
// slower).
template <typename W>
inline constexpr bool kWidenedByChunk = requires(W row, float* out) { WidenChunk(row, int64_t{0}, out); };

// acc += the chunk [k0, k1) of n rows of x (from xp) times C rows of w, 4 rows of x at a time.
template <int C, typename W>
HWY_INLINE void RowTiles(const float* xp, int n, int64_t in, W w, int64_t k0, int64_t k1, float* acc) {
  const int64_t lanes = int64_t(hn::Lanes(hn::ScalableTag<float>()));
  int r = 0;
  for (; r + 4 <= n; r += 4) TileChunk<4, C>(xp + r * in, in, w, k0, k1, acc + r * C * lanes);
  float* a = acc + r * C * lanes;
  switch (n - r) {
    case 3: TileChunk<3, C>(xp + r * in, in, w, k0, k1, a); break;
    case 2: TileChunk<2, C>(xp + r * in, in, w, k0, k1, a); break;
    case 1: TileChunk<1, C>(xp + r * in, in, w, k0, k1, a); break;
    default: break;
  }
}

// y[r, c] (row stride `out`) = dot(x[r, :], w[c, :]) for every row of x and C rows of w. Each
// element's accumulator sums its own products lane by lane over whole vectors in order of k, then
// its lanes, then the scalar tail: the same arithmetic whatever the number of rows, the tile it
// falls in or the thread that runs it.
template <int C, typename W>
HWY_NOINLINE void Columns(const float* x, int rows, int64_t in, W w, float* y, int64_t out) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = int64_t(hn::Lanes(d));
  const int64_t vec_end = in - in % lanes;
  HWY_ALIGN float acc[kPassRows * C * HWY_MAX_BYTES / sizeof(float)];
  for (int r0 = 0; r0 < rows; r0 += kPassRows) {
    const int n = std::min(kPassRows, rows - r0);
    const float* xp = x + r0 * in;
    for (int64_t i = 0; i < n * C * lanes; i += lanes) hn::Store(hn::Zero(d), d, acc + i);
    for (int64_t k0 = 0; k0 < vec_end; k0 += kChunk) {
      const int64_t k1 = std::min(vec_end, k0 + kChunk);
      // With more than one tile of rows, the tiles after the first read the chunk from L1 and the
      // weights' stream goes quiet: ask for the next chunk now, as the dot kernels do (matmul_dot.h).
      if (n > 4 && k1 < vec_end) {
        for (int c = 0; c < C; ++c) PrefetchRow(w, in, c, k1, std::min(vec_end, k1 + kChunk));
      }
      if constexpr (kWidenedByChunk<W>) {
        HWY_ALIGN float widened[C * kChunk];
        for (int c = 0; c < C; ++c) WidenChunk(Shift(w, in, c), k0, widened + c * kChunk);
        RowTiles<C>(xp, n, in, WidenedChunk{widened, k0}, k0, k1, acc);
      } else {
        RowTiles<C>(xp, n, in, w, k0, k1, acc);
      }
    }
    for (int r = 0; r < n; ++r) {
      for (int c = 0; c < C; ++c) {
        float s = hn::GetLane(hn::SumOfLanes(d, hn::Load(d, acc + (r * C + c) * lanes)));
        const W row = Shift(w, in, c);
        for (int64_t t = vec_end; t < in; ++t) s += xp[r * in + t] * WeightValue(row, t);
        y[(r0 + r) * out + c] = s;
      }
    }
  }
}

// bias + sum over k of double(row[k]) * x[k]: two vectors of lanes, then their lanes, then the tail.
HWY_INLINE double RowDotF64(const float* HWY_RESTRICT row, int in, const double* HWY_RESTRICT x, float bias) {
  const hn::ScalableTag<double> d;
  const hn::Rebind<float, decltype(d)> df;
  const int64_t lanes = int64_t(hn::Lanes(d));
  auto a0 = hn::Zero(d), a1 = hn::Zero(d);
  int64_t k = 0;
  for (; k + 2 * lanes <= in; k += 2 * lanes) {
    a0 = hn::MulAdd(hn::PromoteTo(d, hn::LoadU(df, row + k)), hn::LoadU(d, x + k), a0);
    a1 = hn::MulAdd(hn::PromoteTo(d, hn::LoadU(df, row + k + lanes)), hn::LoadU(d, x + k + lanes), a1);
  }
  double s = double(bias) + hn::GetLane(hn::SumOfLanes(d, hn::Add(a0, a1)));
  for (; k < in; ++k) s += double(row[k]) * x[k];
  return s;
}

// A tile of RowDotF64s: R rows of w (row i at w + i * w_stride) by V vectors (vector v at
// x + v * x_stride), `len` values of each (whole pairs of vectors), continuing the accumulators in
// `acc` (row i's at acc + i * row_stride: a0 then a1 for each vector). Every (row, vector) has
// RowDotF64's two accumulators and takes the same multiply-adds in the same order however k is
// split, so its sum is the same bits; the tile keeps 2 R V chains in flight and widens each weight
// vector once for the V.
template <int R, int V>
HWY_INLINE void F64Tile(const float* HWY_RESTRICT w, int64_t w_stride, const double* HWY_RESTRICT x, int64_t x_stride,
                        int64_t len, double* HWY_RESTRICT acc, int64_t row_stride) {
  const hn::ScalableTag<double> d;
  const hn::Rebind<float, decltype(d)> df;
  const int64_t lanes = int64_t(hn::Lanes(d));
  hn::Vec<decltype(d)> a[R][V][2];
  for (int i = 0; i < R; ++i) {
    for (int v = 0; v < V; ++v) {
      for (int h = 0; h < 2; ++h) a[i][v][h] = hn::LoadU(d, acc + i * row_stride + (v * 2 + h) * lanes);
    }
  }
  for (int64_t k = 0; k < len; k += 2 * lanes) {
    hn::Vec<decltype(d)> wv[R][2];
    for (int i = 0; i < R; ++i) {
      for (int h = 0; h < 2; ++h) wv[i][h] = hn::PromoteTo(d, hn::LoadU(df, w + i * w_stride + k + h * lanes));
    }
    for (int v = 0; v < V; ++v) {
      for (int h = 0; h < 2; ++h) {
        const auto xv = hn::LoadU(d, x + v * x_stride + k + h * lanes);
        for (int i = 0; i < R; ++i) a[i][v][h] = hn::MulAdd(wv[i][h], xv, a[i][v][h]);
      }
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int v = 0; v < V; ++v) {
      for (int h = 0; h < 2; ++h) hn::StoreU(a[i][v][h], d, acc + i * row_stride + (v * 2 + h) * lanes);
    }
  }
}

// Rows [begin, end) of MatVecsF64: y [n, rows] for the n vectors x [n, in]. The sums of one (row,
// vector) alone are latency-bound on their two accumulators, so the vectors go in pairs (an odd last
// one through RowDotF64) against 4 rows of w at a time (16 accumulators, where there are 32 vector
// registers; 2 rows with 16), up to 16 vectors over each chunk of k while the rows' chunk stays in
// L1: each row of w is read from memory once per 16 vectors. At 2048 x 2048 (matmul_bench
// BM_MatVecsF64), 4 to 64 vectors take 0.49-0.66x the time of RowDotF64 alone.
constexpr int kF64TileRows = HWY_MAX_BYTES >= 64 ? 4 : 2;
constexpr int kF64TileVectors = 2;
constexpr int kF64BlockVectors = 16;
constexpr int64_t kF64Chunk = 256;
void MatVecsF64Rows(const float* HWY_RESTRICT w, int rows, int in, int n, const double* HWY_RESTRICT x,
                    const float* HWY_RESTRICT bias, int64_t begin, int64_t end, double* HWY_RESTRICT y) {
  const hn::ScalableTag<double> d;
  const int64_t lanes = int64_t(hn::Lanes(d));
  const int64_t vec_end = in - in % (2 * lanes);
  constexpr int V = kF64TileVectors;
  thread_local std::vector<double> acc;  // [end - begin, nb, 2, lanes]
  const int tiled = n - n % V;
  for (int b0 = 0; b0 < tiled; b0 += kF64BlockVectors) {
    const int nb = std::min(kF64BlockVectors, tiled - b0);
    const int64_t row_stride = int64_t(nb) * 2 * lanes;
    const double* xb = x + int64_t(b0) * in;
    acc.assign(size_t((end - begin) * row_stride), 0.0);
    for (int64_t k0 = 0; k0 < vec_end; k0 += kF64Chunk) {
      const int64_t len = std::min(vec_end - k0, kF64Chunk);
      int64_t i = begin;
      const auto tiles = [&](auto rows_per_tile) {
        constexpr int R = decltype(rows_per_tile)::value;
        for (int v0 = 0; v0 < nb; v0 += V) {
          F64Tile<R, V>(w + i * in + k0, in, xb + int64_t(v0) * in + k0, in, len,
                        acc.data() + (i - begin) * row_stride + v0 * 2 * lanes, row_stride);
        }
      };
      for (; i + kF64TileRows <= end; i += kF64TileRows) tiles(std::integral_constant<int, kF64TileRows>());
      for (; i < end; ++i) tiles(std::integral_constant<int, 1>());
    }
    for (int64_t i = begin; i < end; ++i) {
      const float* row = w + i * in;
      for (int v = 0; v < nb; ++v) {
        const double* a = acc.data() + (i - begin) * row_stride + v * 2 * lanes;
        double sum = double(bias[i]) + hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::LoadU(d, a), hn::LoadU(d, a + lanes))));
        for (int64_t t = vec_end; t < in; ++t) sum += double(row[t]) * xb[int64_t(v) * in + t];
        y[int64_t(b0 + v) * rows + i] = sum;
      }
    }
  }
  for (int r = tiled; r < n; ++r) {
    for (int64_t i = begin; i < end; ++i) y[int64_t(r) * rows + i] = RowDotF64(w + i * in, in, x + int64_t(r) * in, bias[i]);
  }
}

// Output columns [begin, end) of y[rows, out].
template <typename W>
void ColumnRange(const float* x, int rows, int64_t in, W w, int64_t out, int64_t begin, int64_t end, float* y) {
  int64_t j = begin;
  for (; j + kTileCols <= end; j += kTileCols) Columns<kTileCols>(x, rows, in, Shift(w, in, j), y + j, out);
  for (; j < end; ++j) Columns<1>(x, rows, in, Shift(w, in, j), y + j, out);
}
void MatMulNTColumns(const float* x, int rows, int64_t in, const float* w, int64_t out, int64_t begin, int64_t end,
                     float* y) {
  ColumnRange(x, rows, in, w, out, begin, end, y);
}
void MatMulNTBf16Columns(const float* x, int rows, int64_t in, const uint16_t* w, int64_t out, int64_t begin,
                         int64_t end, float* y) {
  ColumnRange(x, rows, in, w, out, begin, end, y);
}

void MatMulNTF16Columns(const float* x, int rows, int64_t in, const uint16_t* w, int64_t out, int64_t begin,
                        int64_t end, float* y) {
  ColumnRange(x, rows, in, F16Weights{w}, out, begin, end, y);
}

void MatMulNTQ8Columns(const float* x, int rows, int64_t in, Q8Weights w, int64_t out, int64_t begin, int64_t end,
                       float* y) {
  ColumnRange(x, rows, in, w, out, begin, end, y);
}

void MatMulNTQ4Columns(const float* x, int rows, int64_t in, Q4Weights w, int64_t out, int64_t begin, int64_t end,
                       float* y) {
  ColumnRange(x, rows, in, w, out, begin, end, y);
}

void MatMulNTQ4KColumns(const float* x, int rows, int64_t in, Q4KWeights w, int64_t out, int64_t begin, int64_t end,
                        float* y) {
  ColumnRange(x, rows, in, w, out, begin, end, y);
}

void MatMulNTQ5KColumns(const float* x, int rows, int64_t in, Q5KWeights w, int64_t out, int64_t begin, int64_t end,
                        float* y) {
  ColumnRange(x, rows, in, w, out, begin, end, y);
}

void MatMulNTQ6KColumns(const float* x, int rows, int64_t in, Q6KWeights w, int64_t out, int64_t begin, int64_t end,
                        float* y) {
  ColumnRange(x, rows, in, w, out, begin, end, y);
}

void MatMulNTQ8_0Columns(const float* x, int rows, int64_t in, Q8_0Weights w, int64_t out, int64_t begin, int64_t end,
                         float* y) {
  ColumnRange(x, rows, in, w, out, begin, end, y);
}

void MatMulNTQ2KColumns(const float* x, int rows, int64_t in, Q2KWeights w, int64_t out, int64_t begin, int64_t end,
                        float* y) {
  ColumnRange(x, rows, in, w, out, begin, end, y);
}

void MatMulNTQ3KColumns(const float* x, int rows, int64_t in, Q3KWeights w, int64_t out, int64_t begin, int64_t end,
                        float* y) {
  ColumnRange(x, rows, in, w, out, begin, end, y);
}

void MatMulNTIq4XsColumns(const float* x, int rows, int64_t in, Iq4XsWeights w, int64_t out, int64_t begin,
                          int64_t end, float* y) {
  ColumnRange(x, rows, in, w, out, begin, end, y);
}

void MatMulNTIq4NlColumns(const float* x, int rows, int64_t in, Iq4NlWeights w, int64_t out, int64_t begin,
                          int64_t end, float* y) {
  ColumnRange(x, rows, in, Iq4NlRows{w.blocks, in}, out, begin, end, y);
}

// q32's three types, one exported function (the type chosen once a call).
void MatMulNTQ32Columns(const float* x, int rows, int64_t in, Q32Weights w, int64_t out, int64_t begin, int64_t end,
                        float* y) {
  switch (w.type) {
    case Q32Type::kQ4_1: return ColumnRange(x, rows, in, Q32Rows<Q32Type::kQ4_1>{w.blocks}, out, begin, end, y);
    case Q32Type::kQ5_0: return ColumnRange(x, rows, in, Q32Rows<Q32Type::kQ5_0>{w.blocks}, out, begin, end, y);
    case Q32Type::kQ5_1: return ColumnRange(x, rows, in, Q32Rows<Q32Type::kQ5_1>{w.blocks}, out, begin, end, y);
  }
}

// y[r, j0 : j0 + C vectors] = x[r, :] w[:, j0 : ...] for R rows of x and w [in, out] (input-major):
// each output lane starts at zero and takes one fused multiply-add per k, in order of k. The last
// vector of the block holds `tail` lanes when tail > 0 (copied through a zeroed buffer: the memory
// past it is never read or written), so every y[r, j] is the same arithmetic wherever its column
// falls and however many rows come with it.
template <int R, int C, typename T>
HWY_INLINE void NNBlock(const T* HWY_RESTRICT x, int64_t in, const T* HWY_RESTRICT w, int64_t out,
                        int64_t j0, size_t tail, T* HWY_RESTRICT y) {
  const hn::ScalableTag<T> d;
  using V = hn::Vec<decltype(d)>;
  const int64_t lanes = int64_t(hn::Lanes(d));
  HWY_ALIGN T part[HWY_MAX_BYTES / sizeof(T)] = {};
  const auto load = [&](const T* p, int c) {
    if (tail == 0 || c < C - 1) return hn::LoadU(d, p + c * lanes);
    std::copy(p + c * lanes, p + c * lanes + tail, part);
    return hn::Load(d, part);
  };
  V a[R][C];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) a[r][c] = hn::Zero(d);
  }
  for (int64_t k = 0; k < in; ++k) {
    const T* wk = w + k * out + j0;
    V wv[C];
    for (int c = 0; c < C; ++c) wv[c] = load(wk, c);
    for (int r = 0; r < R; ++r) {
      const V xv = hn::Set(d, x[r * in + k]);
      for (int c = 0; c < C; ++c) a[r][c] = hn::MulAdd(xv, wv[c], a[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    T* yr = y + r * out + j0;
    for (int c = 0; c < C; ++c) {
      if (tail > 0 && c == C - 1) {
        hn::Store(a[r][c], d, part);
        std::copy(part, part + tail, yr + c * lanes);
      } else {
        hn::StoreU(a[r][c], d, yr + c * lanes);
      }
    }
  }
}

// Every column of y for R rows: blocks of kTileCols vectors, then single vectors, then the partial one.
template <int R, typename T>
HWY_INLINE void NNRows(const T* HWY_RESTRICT x, int64_t in, const T* HWY_RESTRICT w, int64_t out,
                       T* HWY_RESTRICT y) {
  const int64_t lanes = int64_t(hn::Lanes(hn::ScalableTag<T>()));
  int64_t j = 0;
  for (; j + kTileCols * lanes <= out; j += kTileCols * lanes) NNBlock<R, kTileCols>(x, in, w, out, j, 0, y);
  for (; j + lanes <= out; j += lanes) NNBlock<R, 1>(x, in, w, out, j, 0, y);
  if (j < out) NNBlock<R, 1>(x, in, w, out, j, size_t(out - j), y);
}

template <typename T>
void NNAllRows(const T* x, int rows, int64_t in, const T* w, int64_t out, T* y) {
  int r = 0;
  for (; r + 4 <= rows; r += 4) NNRows<4>(x + r * in, in, w, out, y + r * out);
  switch (rows - r) {
    case 3: NNRows<3>(x + r * in, in, w, out, y + r * out); break;
    case 2: NNRows<2>(x + r * in, in, w, out, y + r * out); break;
    case 1: NNRows<1>(x + r * in, in, w, out, y + r * out); break;
    default: break;
  }
}
void MatMulNNRows(const float* x, int rows, int64_t in, const float* w, int64_t out, float* y) {
  NNAllRows(x, rows, in, w, out, y);
}
void MatMulNNRowsF64(const double* x, int rows, int64_t in, const double* w, int64_t out, double* y) {
  NNAllRows(x, rows, in, w, out, y);
}

const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace steady::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <atomic>
#include <cmath>
#include <cstring>

#include "kernels/cpu/parallel.h"

namespace steady::cpu {
namespace {
std::atomic<bool> small_row_kernel{true};
}  // namespace

void UseSmallRowKernel(bool on) { small_row_kernel.store(on); }
bool SmallRowKernelInUse() { return small_row_kernel.load(std::memory_order_relaxed); }

HWY_EXPORT(MatMulNTColumns);
HWY_EXPORT(MatMulNTBf16Columns);
HWY_EXPORT(MatMulNTF16Columns);
HWY_EXPORT(MatMulNTQ8Columns);
HWY_EXPORT(MatMulNTQ4Columns);
HWY_EXPORT(MatMulNTQ4KColumns);
HWY_EXPORT(MatMulNTQ5KColumns);
HWY_EXPORT(MatMulNTQ6KColumns);
HWY_EXPORT(MatMulNTQ8_0Columns);
HWY_EXPORT(MatMulNTQ32Columns);
HWY_EXPORT(MatMulNTQ2KColumns);
HWY_EXPORT(MatMulNTQ3KColumns);
HWY_EXPORT(MatMulNTIq4XsColumns);
HWY_EXPORT(MatMulNTIq4NlColumns);
HWY_EXPORT(TargetName);
HWY_EXPORT(MatVecsF64Rows);
HWY_EXPORT(MatMulNNRows);
HWY_EXPORT(MatMulNNRowsF64);

namespace {

// Splits y's columns over the compute threads; `columns(begin, end)` computes a range of them.
template <typename Fn>
void SplitColumns(int rows, int in, int out, const Fn& columns) {
  if (int64_t(rows) * in * out < kMinParallelWork) return columns(0, out);
  // Column chunks a multiple of 48 (both tile widths, 3 and 4, divide it), about 4 per thread so that
  // a thread that starts late still finds work.
  const int threads = ComputeThreads();
  const int64_t per_task = std::max<int64_t>(48, (int64_t(out) / (4 * threads) + 47) / 48 * 48);
  const int tasks = int((out + per_task - 1) / per_task);
  ParallelFor(tasks, [&](int t) {
    const int64_t begin = t * per_task;
    columns(begin, std::min<int64_t>(out, begin + per_task));
  });
}

}  // namespace

void MatMulNTSmallRows(const float* x, int rows, int in, const float* w, int out, float* y) {
  SplitColumns(rows, in, out, [&](int64_t begin, int64_t end) {
    HWY_DYNAMIC_DISPATCH(MatMulNTColumns)(x, rows, in, w, out, begin, end, y);
  });
}

void MatMulNTBf16(const float* x, int rows, int in, const uint16_t* w, int out, float* y) {
  SplitColumns(rows, in, out, [&](int64_t begin, int64_t end) {
    HWY_DYNAMIC_DISPATCH(MatMulNTBf16Columns)(x, rows, in, w, out, begin, end, y);
  });
}

void MatMulNTF16(const float* x, int rows, int in, const uint16_t* w, int out, float* y) {
  SplitColumns(rows, in, out, [&](int64_t begin, int64_t end) {
    HWY_DYNAMIC_DISPATCH(MatMulNTF16Columns)(x, rows, in, w, out, begin, end, y);
  });
}

void MatMulNTF16Reference(const float* x, int rows, int in, const uint16_t* w, int out, float* y) {
  ReferenceProduct(x, rows, in, out, y, [&](int64_t j, int64_t k) { return F16ToFloat(w[j * in + k]); });
}

void MatMulNTQ8(const float* x, int rows, int in, Q8Weights w, int out, float* y) {
  SplitColumns(rows, in, out, [&](int64_t begin, int64_t end) {
    HWY_DYNAMIC_DISPATCH(MatMulNTQ8Columns)(x, rows, in, w, out, begin, end, y);
  });
}

void MatMulNTQ4K(const float* x, int rows, int in, Q4KWeights w, int out, float* y) {
  SplitColumns(rows, in, out, [&](int64_t begin, int64_t end) {
    HWY_DYNAMIC_DISPATCH(MatMulNTQ4KColumns)(x, rows, in, w, out, begin, end, y);
  });
}

void MatMulNTQ8_0(const float* x, int rows, int in, Q8_0Weights w, int out, float* y) {
  SplitColumns(rows, in, out, [&](int64_t begin, int64_t end) {
    HWY_DYNAMIC_DISPATCH(MatMulNTQ8_0Columns)(x, rows, in, w, out, begin, end, y);
  });
}

void MatMulNTQ5K(const float* x, int rows, int in, Q5KWeights w, int out, float* y) {
  SplitColumns(rows, in, out, [&](int64_t begin, int64_t end) {
    HWY_DYNAMIC_DISPATCH(MatMulNTQ5KColumns)(x, rows, in, w, out, begin, end, y);
  });
}

void MatMulNTQ32(const float* x, int rows, int in, Q32Weights w, int out, float* y) {
  SplitColumns(rows, in, out, [&](int64_t begin, int64_t end) {
    HWY_DYNAMIC_DISPATCH(MatMulNTQ32Columns)(x, rows, in, w, out, begin, end, y);
  });
}

void MatMulNTQ6K(const float* x, int rows, int in, Q6KWeights w, int out, float* y) {
  SplitColumns(rows, in, out, [&](int64_t begin, int64_t end) {
    HWY_DYNAMIC_DISPATCH(MatMulNTQ6KColumns)(x, rows, in, w, out, begin, end, y);
  });
}

void MatMulNTQ2K(const float* x, int rows, int in, Q2KWeights w, int out, float* y) {
  SplitColumns(rows, in, out, [&](int64_t begin, int64_t end) {
    HWY_DYNAMIC_DISPATCH(MatMulNTQ2KColumns)(x, rows, in, w, out, begin, end, y);
  });
}

void MatMulNTQ3K(const float* x, int rows, int in, Q3KWeights w, int out, float* y) {
  SplitColumns(rows, in, out, [&](int64_t begin, int64_t end) {
    HWY_DYNAMIC_DISPATCH(MatMulNTQ3KColumns)(x, rows, in, w, out, begin, end, y);
  });
}

void MatMulNTIq4Xs(const float* x, int rows, int in, Iq4XsWeights w, int out, float* y) {
  SplitColumns(rows, in, out, [&](int64_t begin, int64_t end) {
    HWY_DYNAMIC_DISPATCH(MatMulNTIq4XsColumns)(x, rows, in, w, out, begin, end, y);
  });
}

void MatMulNTIq4Nl(const float* x, int rows, int in, Iq4NlWeights w, int out, float* y) {
  SplitColumns(rows, in, out, [&](int64_t begin, int64_t end) {
    HWY_DYNAMIC_DISPATCH(MatMulNTIq4NlColumns)(x, rows, in, w, out, begin, end, y);
  });
}

void MatMulNTQ4(const float* x, int rows, int in, Q4Weights w, int out, float* y) {
  SplitColumns(rows, in, out, [&](int64_t begin, int64_t end) {
    HWY_DYNAMIC_DISPATCH(MatMulNTQ4Columns)(x, rows, in, w, out, begin, end, y);
  });
}

void MatMulNTQ4Reference(const float* x, int rows, int in, Q4Weights w, int out, float* y) {
  ReferenceProduct(x, rows, in, out, y, [&](int64_t j, int64_t k) { return Q4WeightValue(w, in, j, k); });
}

void MatMulNTQ8Reference(const float* x, int rows, int in, Q8Weights w, int out, float* y) {
  const int64_t blocks = Q8BlocksPerRow(in);
  ReferenceProduct(x, rows, in, out, y, [&](int64_t j, int64_t k) {
    return float(w.q[j * in + k]) * w.scales[j * blocks + k / kQ8Block];
  });
}

void QuantizeQ8(const float* w, int64_t rows, int in, int8_t* q, float* scales) {
  const int64_t blocks = Q8BlocksPerRow(in);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t k0 = b * kQ8Block, k1 = std::min<int64_t>(in, k0 + kQ8Block);
      float amax = 0.0f;
      for (int64_t k = k0; k < k1; ++k) amax = std::max(amax, std::fabs(w[r * in + k]));
      const float scale = amax / 127.0f;
      const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
      scales[r * blocks + b] = scale;
      for (int64_t k = k0; k < k1; ++k) q[r * in + k] = int8_t(std::lrint(w[r * in + k] * inv));
    }
  }
}

void MatMulNTBf16Reference(const float* x, int rows, int in, const uint16_t* w, int out, float* y) {
  ReferenceProduct(x, rows, in, out, y, [&](int64_t j, int64_t k) { return Bf16ToFloat(w[j * in + k]); });
}

uint16_t FloatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // NaN stays a (quiet) NaN
  u += 0x7fffu + ((u >> 16) & 1u);                                           // round to nearest even
  return uint16_t(u >> 16);
}

float Bf16ToFloat(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

void MatVecF64(const float* w, int rows, int in, const double* x, const float* bias, double* y) {
  MatVecsF64(w, rows, in, 1, x, bias, y);
}

void MatVecsF64(const float* w, int rows, int in, int n, const double* x, const float* bias, double* y) {
  constexpr int kRowsPerTask = 64;
  const int tasks = (rows + kRowsPerTask - 1) / kRowsPerTask;
  const auto run = [&](int t0, int t1) {  // the rows of tasks [t0, t1)
    HWY_DYNAMIC_DISPATCH(MatVecsF64Rows)(w, rows, in, n, x, bias, int64_t(t0) * kRowsPerTask,
                                         std::min<int64_t>(rows, int64_t(t1) * kRowsPerTask), y);
  };
  if (int64_t(rows) * in * n < kMinParallelWork) return run(0, tasks);
  ParallelFor(tasks, [&](int t) { run(t, t + 1); });
}

void MatVecF64Reference(const float* w, int rows, int in, const double* x, const float* bias, double* y) {
  for (int i = 0; i < rows; ++i) {
    double s = bias[i];
    for (int k = 0; k < in; ++k) s += double(w[int64_t(i) * in + k]) * x[k];
    y[i] = s;
  }
}

void MatMulNTReference(const float* x, int rows, int in, const float* w, int out, float* y) {
  ReferenceProduct(x, rows, in, out, y, [&](int64_t j, int64_t k) { return w[j * in + k]; });
}

void MatMulNN(const float* x, int rows, int in, const float* w, int out, float* y) {
  HWY_DYNAMIC_DISPATCH(MatMulNNRows)(x, rows, in, w, out, y);
}

void MatMulNNF64(const double* x, int rows, int in, const double* w, int out, double* y) {
  HWY_DYNAMIC_DISPATCH(MatMulNNRowsF64)(x, rows, in, w, out, y);
}

void MatMulNNReference(const float* x, int rows, int in, const float* w, int out, float* y) {
  ReferenceProduct(x, rows, in, out, y, [&](int64_t j, int64_t k) { return w[k * out + j]; });
}

const char* SimdTargetName() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }

}  // namespace steady::cpu
#endif  // HWY_ONCE
