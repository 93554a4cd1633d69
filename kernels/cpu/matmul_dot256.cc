// The int8 kernels on 256-bit vectors, for CPUs without AVX512_VNNI (matmul_dot.h, Int8Path): the
// AVX-512 kernels' packed layout, tiles and fp32 arithmetic, with two ways to sum a block's int8
// products exactly in int32 (the body is matmul_dot256-inl.h, compiled once for each):
//
// - AVX-VNNI: the VEX-encoded VPDPBUSD, as on AVX-512 with half the width: the q8 weights + 128 are
//   the unsigned operand, q_x the signed one, the sums start at -128 * the block's sum of q_x.
// - AVX2: VPMADDUBSW multiplies unsigned by signed bytes like VPDPBUSD but adds each pair into a
//   saturating int16, and with the weights + 128 (up to 255) and q_x up to 127 a pair reaches 64770:
//   it would saturate. As llama.cpp does, the sign moves from one operand onto the other, here from
//   the weight onto x: |q_w| (up to 128: q_w may be -128 in a GGUF file) times q_x sign(q_w) (up to
//   127 in magnitude, since the quantizer never makes -128) is the same product, and a pair is at
//   most 2 * 128 * 127 = 32512: exact. VPMADDWD by ones then adds the pairs into int32 lanes. The
//   4-bit weights (0..15) are unsigned already: pairs of at most 3810, no sign work.
//
// Either way the int32 sums are the exact sums of q_x q_w, the same numbers as VPDPBUSD's on
// AVX-512, and the fp32 steps after them are the same operations per lane: the three paths give
// the same bits (tests/kernels/cpu_dot_test.cc).
#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "kernels/cpu/matmul_dot_tiles.h"
#include "kernels/cpu/parallel.h"

namespace steady::cpu::dot {
namespace {

namespace avxvnni {
#define STEADY_DOT256_TARGET __attribute__((target("avx2,fma,f16c,avxvnni")))
namespace flavour {
// 2 rows x 2 groups: 8 accumulators, 4 weight vectors, x (a VPDPBUSD has a few cycles' latency: one
// row alone still has 4 chains of sums to overlap; 4 x 1 was slower at one row in matmul_bench).
constexpr int kTileRows = 2, kTileGroups = 2;
constexpr int kQ8TileRows = 2, kQ8TileGroups = 2;  // q8's tile, the same here
using Q8Weights8 = __m256i;  // q_w + 128
constexpr int32_t kQ8Offset = 128;
constexpr bool kNibblesAheadAlone = false;  // not measured on a CPU with AVX-VNNI
STEADY_DOT256_TARGET inline __m256i LoadQ8(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
STEADY_DOT256_TARGET inline __m256i AddQ8(__m256i s, __m256i w, __m256i x) { return _mm256_dpbusd_avx_epi32(s, w, x); }
using NibbleSums = __m256i;  // int32: the block's sums themselves
STEADY_DOT256_TARGET inline __m256i NibbleStart(__m256i s) { return s; }
STEADY_DOT256_TARGET inline __m256i AddNibbles(__m256i p, __m256i w, __m256i x) { return _mm256_dpbusd_avx_epi32(p, w, x); }
STEADY_DOT256_TARGET inline __m256i NibbleEnd(__m256i, __m256i p) { return p; }
}  // namespace flavour
#include "kernels/cpu/matmul_dot256-inl.h"
#undef STEADY_DOT256_TARGET
}  // namespace avxvnni

namespace avx2 {
#define STEADY_DOT256_TARGET __attribute__((target("avx2,fma,f16c")))
namespace flavour {
// The 4- to 6-bit formats: 2 rows x 2 groups, as AVX-VNNI (more registers than the 16 there are, yet
// in matmul_bench at 2048 x 8192 faster than 4 x 1: q4k at 16 rows 2878-3242 us against 3463 in
// alternated rounds, 2026-11-29). q8, whose weights take two registers a vector (magnitude and
// sign): 4 rows x 1 group, 7.6-15% faster at 4 to 64 rows (q8 at 16 rows 2048 x 8192 3164 us
// against 3514, medians of 8 alternated rounds; one row the same; docs/benchmarks.md).
constexpr int kTileRows = 2, kTileGroups = 2;
constexpr int kQ8TileRows = 4, kQ8TileGroups = 1;
struct Q8Weights8 {
  __m256i magnitude;  // |q_w|, 0..128 as unsigned bytes
  __m256i sign;       // q_w
};
constexpr int32_t kQ8Offset = 0;
// At one row the 4-bit kernels' reads from memory ran behind the hardware prefetchers (Zen 4 with
// AVX-512 masked, 2026-11-29: 2048 x 128256 q4 4.8 ms with the requests against 5.7, q4k 5.3 against
// 6.1, q6k 7.5 against 9.9; a llama1b q4k step(1) 17.9 against 19.9 ms). q8's step was no faster.
constexpr bool kNibblesAheadAlone = true;
STEADY_DOT256_TARGET inline Q8Weights8 LoadQ8(const uint8_t* p) {
  const __m256i w = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), _mm256_set1_epi8(-128));
  return {_mm256_abs_epi8(w), w};
}
// Pairs of products into int16 (exact: see the top of the file), then into the columns' int32 lanes.
STEADY_DOT256_TARGET inline __m256i AddPairs(__m256i s, __m256i pairs) {
  return _mm256_add_epi32(s, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}
STEADY_DOT256_TARGET inline __m256i AddQ8(__m256i s, Q8Weights8 w, __m256i x) {
  return AddPairs(s, _mm256_maddubs_epi16(w.magnitude, _mm256_sign_epi8(x, w.sign)));
}
// A block's nibble products stay in the int16 pairs: 8 pairs of products of at most 15 * 127 make at
// most 30480 (no saturation), and one VPMADDWD per block widens them (q5k's 5-bit q: two per block,
// matmul_dot256-inl.h AddNibbleBlock).
using NibbleSums = __m256i;  // int16 pairs
STEADY_DOT256_TARGET inline __m256i NibbleStart(__m256i) { return _mm256_setzero_si256(); }
STEADY_DOT256_TARGET inline __m256i AddNibbles(__m256i p, __m256i w, __m256i x) {
  return _mm256_add_epi16(p, _mm256_maddubs_epi16(w, x));
}
STEADY_DOT256_TARGET inline __m256i NibbleEnd(__m256i s, __m256i p) { return AddPairs(s, p); }
}  // namespace flavour
#include "kernels/cpu/matmul_dot256-inl.h"
#undef STEADY_DOT256_TARGET
}  // namespace avx2

}  // namespace

const Int8Kernels kAvxVnniKernels = avxvnni::kKernels;
const Int8Kernels kAvx2Kernels = avx2::kKernels;

}  // namespace steady::cpu::dot

#endif  // __x86_64__
