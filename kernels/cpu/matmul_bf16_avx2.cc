// bf16 x bf16 on AVX2 + FMA (matmul_dot.h, Bf16Path::kAvx2): what VDPBF16PS computes, for x86 CPUs
// without AVX512_BF16 (Zen 2/3, Intel before Cooper Lake, the E-cores of Sierra Forest), over the
// same packed layout (per group of 16 columns and pair of inputs, the 16 columns' two bf16 values
// side by side: 64 bytes, two ymm halves of 8 columns).
//
// The arithmetic is VDPBF16PS's as documented (Intel SDM): per lane the odd input's product is
// added, then the even one's, each a fused multiply-add of the bf16 values widened to fp32 (a
// product of two 8-bit significands is exact in fp32, so each step rounds once, to nearest even).
// A bf16 value widens to fp32 by a 16-bit shift (the even one of a pair) or by masking off the low
// half (the odd one); the activations are rounded to bf16 once and held widened, so their pairs are
// two broadcasts from memory (load ports, not the FMA pipes the shifts share on Intel's cores).
// Where no input or sum is subnormal the results are VDPBF16PS's bits; VDPBF16PS flushes
// subnormals to zero, this kernel keeps them (tests/kernels/cpu_dot_test.cc checks both).
//
// The register tile is 4 rows x 1 group (two halves): 8 fp32 sums, the group's weights as 4 widened
// vectors (even and odd per half), 2 broadcasts: 14 of AVX2's 16 registers. Below 4 rows it is 1 row
// x 4 groups: each sum's two multiply-adds a pair depend on each other, so a row needs 8 sums in
// flight to keep both FMA pipes busy (docs/cpu.md, "bf16 on AVX2").
#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/matmul_dot_tiles.h"
#include "kernels/cpu/parallel.h"

#define STEADY_BF16_AVX2_TARGET __attribute__((target("avx2,fma")))

namespace steady::cpu::dot {
namespace {

template <int kRows, int kGroups>
struct Bf16OpAvx2 {
  const float* x;     // [rows, 2 * steps]: bf16(x) widened to fp32, an odd tail padded with zero
  const uint16_t* w;  // packed, at the tile's first group
  int64_t steps;      // pairs of inputs
  // 128 pairs x 64 bytes a group: 8 KB (4 x 1) or 32 KB (1 x 4) of weights stay in L1 while every row
  // tile of a pass uses them.
  static constexpr int64_t kChunk = 128;
  static constexpr int kTileRows = kRows, kTileGroups = kGroups;
  // A pass of one tile asks for the next chunk too: without, 4 rows of the 2048 x 128256 head took
  // 28.0 ms against 17.0 (AVX2-only Zen 4, 2026-11-29).
  static constexpr bool kAheadAlone = true;

  Bf16OpAvx2 Shift(int64_t groups) const { return {x, w + groups * steps * 32, steps}; }

  template <int R, int C>
  STEADY_BF16_AVX2_TARGET void Tile(int r, int64_t p0, int64_t p1, float* acc, bool ahead) const {
    constexpr int H = 2 * C;  // 8-column halves
    const __m256i high = _mm256_set1_epi32(int32_t(0xffff0000u));
    __m256 a[R][H];
    for (int rr = 0; rr < R; ++rr) {
      for (int h = 0; h < H; ++h) a[rr][h] = _mm256_load_ps(acc + (rr * H + h) * 8);
    }
    const float* xr = x + int64_t(r) * 2 * steps;
    for (int64_t p = p0; p < p1; ++p) {
      if (ahead && p + kChunk < steps) PrefetchGroups<C>(reinterpret_cast<const uint8_t*>(w + (p + kChunk) * 32), steps * 64, 0, 64);
      __m256 even[H], odd[H];
      for (int h = 0; h < H; ++h) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + ((h / 2) * steps + p) * 32 + (h % 2) * 16));
        even[h] = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
        odd[h] = _mm256_castsi256_ps(_mm256_and_si256(v, high));
      }
      for (int rr = 0; rr < R; ++rr) {
        const float* xp = xr + rr * 2 * steps + 2 * p;
        const __m256 xo = _mm256_broadcast_ss(xp + 1), xe = _mm256_broadcast_ss(xp);
        for (int h = 0; h < H; ++h) a[rr][h] = _mm256_fmadd_ps(xe, even[h], _mm256_fmadd_ps(xo, odd[h], a[rr][h]));
      }
    }
    for (int rr = 0; rr < R; ++rr) {
      for (int h = 0; h < H; ++h) _mm256_store_ps(acc + (rr * H + h) * 8, a[rr][h]);
    }
  }
};

#define STEADY_DRIVER_TARGET STEADY_BF16_AVX2_TARGET
#include "kernels/cpu/matmul_dot_driver-inl.h"
#undef STEADY_DRIVER_TARGET

// FloatToBf16 then back to fp32, eight at a time: round to nearest even, a NaN stays a quiet NaN.
STEADY_BF16_AVX2_TARGET void RoundToBf16Floats(const float* x, int64_t n, float* out) {
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + k));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    const __m256i r = _mm256_blendv_epi8(rounded, _mm256_or_si256(u, _mm256_set1_epi32(0x400000)), nan);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k), _mm256_and_si256(r, _mm256_set1_epi32(int32_t(0xffff0000u))));
  }
  for (; k < n; ++k) out[k] = Bf16ToFloat(FloatToBf16(x[k]));
}

}  // namespace

void MatMulNTBf16DotsAvx2(const float* x, int rows, int in, const DotProduct* products, int count) {
  const float* xf = RoundRowsToFloats(x, rows, in, RoundToBf16Floats);
  const int64_t pairs = (in + 1) / 2;
  // A few rows: one row x 4 groups, whose 8 chains of sums keep both FMA pipes busy (4 x 1's tile at
  // one row has 2 chains of two dependent FMAs a pair: latency-bound, 197 against 130 us at 2048 x 2048).
  if (rows < 4) {
    return Run([&](const void* packed) { return Bf16OpAvx2<1, 4>{xf, static_cast<const uint16_t*>(packed), pairs}; },
               rows, in, products, count);
  }
  Run([&](const void* packed) { return Bf16OpAvx2<4, 1>{xf, static_cast<const uint16_t*>(packed), pairs}; }, rows, in,
      products, count);
}

}  // namespace steady::cpu::dot

#endif  // __x86_64__
