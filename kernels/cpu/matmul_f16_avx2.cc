// f16 weights on AVX2 + FMA + F16C (matmul_dot.h, MatMulNTF16Dot): a checkpoint's own f16 matrices
// or a GGUF file's F16 tensors, packed once at load so that a step of the input is one contiguous
// 32-byte vector for a group of 16 columns (PackF16Dot), instead of the widening kernel's 3 or 4
// weight rows read side by side and summed across lanes at the end.
//
// The arithmetic: per output, one fp32 running sum over the inputs in order, each step a fused
// multiply-add of the activation as it is (fp32, not rounded) and the weight widened exactly by
// VCVTPH2PS. The same bits whatever the tile, the rows beside it or the thread
// (tests/kernels/cpu_dot_test.cc replays it with std::fma).
//
// The register tile is 4 rows x 1 group (two 8-column halves): 8 sums, 2 widened weight vectors and
// a broadcast. Below 4 rows it is 1 row x 4 groups, whose 8 sums keep both FMA pipes busy (each sum
// depends on its previous step), as in matmul_bf16_avx2.cc.
#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/matmul_dot_tiles.h"
#include "kernels/cpu/parallel.h"

#define STEADY_F16_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))

namespace steady::cpu::dot {
namespace {

template <int kRows, int kGroups>
struct F16OpAvx2 {
  const float* x;     // [rows, steps]: the call's activations
  const uint16_t* w;  // packed, at the tile's first group
  int64_t steps;      // inputs
  // 256 inputs x 32 bytes a group: 8 KB (4 x 1) or 32 KB (1 x 4) of weights stay in L1 while every
  // row tile of a pass uses them.
  static constexpr int64_t kChunk = 256;
  static constexpr int kTileRows = kRows, kTileGroups = kGroups;
  // As the bf16 kernel's: a pass of one tile asks for the next chunk too.
  static constexpr bool kAheadAlone = true;

  F16OpAvx2 Shift(int64_t groups) const { return {x, w + groups * steps * kGroup, steps}; }

  template <int R, int C>
  STEADY_F16_AVX2_TARGET void Tile(int r, int64_t k0, int64_t k1, float* acc, bool ahead) const {
    constexpr int H = 2 * C;  // 8-column halves
    __m256 a[R][H];
    for (int rr = 0; rr < R; ++rr) {
      for (int h = 0; h < H; ++h) a[rr][h] = _mm256_load_ps(acc + (rr * H + h) * 8);
    }
    const float* xr = x + int64_t(r) * steps;
    for (int64_t k = k0; k < k1; ++k) {
      // Two steps a 64-byte line.
      if (ahead && (k & 1) == 0 && k + kChunk < steps) {
        PrefetchGroups<C>(reinterpret_cast<const uint8_t*>(w + (k + kChunk) * kGroup), steps * 2 * kGroup, 0, 64);
      }
      __m256 wv[H];
      for (int h = 0; h < H; ++h) {
        wv[h] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + ((h / 2) * steps + k) * kGroup + (h % 2) * 8)));
      }
      for (int rr = 0; rr < R; ++rr) {
        const __m256 xb = _mm256_broadcast_ss(xr + rr * steps + k);
        for (int h = 0; h < H; ++h) a[rr][h] = _mm256_fmadd_ps(xb, wv[h], a[rr][h]);
      }
    }
    for (int rr = 0; rr < R; ++rr) {
      for (int h = 0; h < H; ++h) _mm256_store_ps(acc + (rr * H + h) * 8, a[rr][h]);
    }
  }
};

#define STEADY_DRIVER_TARGET STEADY_F16_AVX2_TARGET
#include "kernels/cpu/matmul_dot_driver-inl.h"
#undef STEADY_DRIVER_TARGET

}  // namespace

void MatMulNTF16DotsAvx2(const float* x, int rows, int in, const DotProduct* products, int count) {
  if (rows < 4) {
    return Run([&](const void* packed) { return F16OpAvx2<1, 4>{x, static_cast<const uint16_t*>(packed), in}; }, rows,
               in, products, count);
  }
  Run([&](const void* packed) { return F16OpAvx2<4, 1>{x, static_cast<const uint16_t*>(packed), in}; }, rows, in,
      products, count);
}

}  // namespace steady::cpu::dot

#endif  // __x86_64__
