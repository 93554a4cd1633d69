// bf16 x bf16 and int8 x int8 decode GEMMs over packed weights (matmul_dot.h). The kernels are
// AVX-512 intrinsics in functions compiled for their own target (the rest of the binary stays
// baseline x86-64) and run only after a run-time CPU check. Why intrinsics and not Highway: Debian's
// Highway (1.0.3) emulates ReorderWidenMulAccumulate on bf16 with shifts and fp32 FMAs (its source
// says "TODO: _mm_dpbf16_ps") and has no SumOfMulQuadAccumulate, so through it neither VDPBF16PS nor
// VPDPBUSD would be emitted.
//
// Why the packed layout (docs/cpu.md): the first version of these kernels read the row-major
// weights, one 32-pair vector of a weight row against one of an activation row, and summed each
// output's 16 lanes at the end. That lost to the widening kernels (0.13x to 0.93x): q8 spent five
// instructions per VPDPBUSD on signs and scales, and both shared each weight vector across only the
// rows of a 4-row tile. Packed by column groups, one broadcast activation unit times one weight
// vector is 16 outputs' worth of work, the int32 sums of a q8 block need one conversion and one
// scale per 16 outputs, and the + 128 offset makes the weights VPDPBUSD's unsigned operand directly.
#include "kernels/cpu/matmul_dot.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "base/check.h"
#include "kernels/cpu/matmul_dot_tiles.h"
#include "kernels/cpu/parallel.h"

#define STEADY_DOT_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vnni,f16c")))

namespace steady::cpu {
namespace {

using dot::Groups;
using dot::kGroup;
using dot::kPassRows;
using dot::kQ4KHead;
using dot::kQ4KRecord;
using dot::kQ4Record;
using dot::kQ8Record;
using dot::Q8Rows;

// The AVX-512 register tiles: 4 rows x 4 groups, 16 accumulators + 4 weights + x of 32 registers.
constexpr int kTileRows = 4;
constexpr int kTileGroups = 4;

// bf16 x bf16: acc[rr][c] (16 columns each) += x[r + rr, pair p] . w[group c, pair p] over [p0, p1).
struct Bf16Op {
  const uint32_t* x;  // [rows, steps]: bf16(x) two by two, the odd tail padded with zero
  const uint16_t* w;  // packed, at the tile's first group
  int64_t steps;      // pairs of inputs
  // 64 pairs x 4 groups x 64 bytes: the tile's 16 KB of weights stay in L1 while every row uses them.
  static constexpr int64_t kChunk = 64;
  static constexpr int kTileRows = steady::cpu::kTileRows, kTileGroups = steady::cpu::kTileGroups;

  Bf16Op Shift(int64_t groups) const { return {x, w + groups * steps * 32, steps}; }

  template <int R, int C>
  STEADY_DOT_TARGET void Tile(int r, int64_t p0, int64_t p1, float* acc) const {
    __m512 a[R][C];
    for (int rr = 0; rr < R; ++rr) {
      for (int c = 0; c < C; ++c) a[rr][c] = _mm512_load_ps(acc + (rr * C + c) * 16);
    }
    for (int64_t p = p0; p < p1; ++p) {
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
// acc[rr][c] += s[rr][c] * scale_x(row r + rr, block b) * ws[c], in fp32.
template <int R, int C>
STEADY_DOT_TARGET void Scale(const Q8Rows& x, int r, int64_t b, const __m512i (&s)[R][C], const __m512 (&ws)[C], float* acc) {
  for (int c = 0; c < C; ++c) {
    for (int rr = 0; rr < R; ++rr) {
      float* a = acc + (rr * C + c) * 16;
      const __m512 scale = _mm512_mul_ps(ws[c], _mm512_set1_ps(x.xscale[(r + rr) * x.blocks + b]));
      _mm512_store_ps(a, _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[rr][c]), scale, _mm512_load_ps(a)));
    }
  }
}

// int8 x int8, a q8_0 block (32 inputs) per step: 8 VPDPBUSD of the weights (+ 128, unsigned) by x's
// 4 bytes broadcast (signed) into int32 sums that start at -128 * the block's sum of q_x, so that
// they end at the exact sum of q_x q_w; then one conversion and one fp32 multiply-add by
// scale_x scale_w.
struct Q8Op {
  Q8Rows x;
  const uint8_t* w;  // packed, at the tile's first group
  int64_t steps;     // blocks
  static constexpr int64_t kChunk = 8;  // 8 blocks x 4 groups x 576 bytes: 18 KB in L1
  static constexpr int kTileRows = steady::cpu::kTileRows, kTileGroups = steady::cpu::kTileGroups;

  Q8Op Shift(int64_t groups) const { return {x, w + groups * steps * kQ8Record, steps}; }

  template <int R, int C>
  STEADY_DOT_TARGET void Tile(int r, int64_t b0, int64_t b1, float* acc) const {
    for (int64_t b = b0; b < b1; ++b) {
      __m512i s[R][C];
      Start(x, r, b, 128, s);
      const uint8_t* wb = w + b * kQ8Record;
      for (int u = 0; u < 8; ++u) {
        __m512i wv[C];
        for (int c = 0; c < C; ++c) wv[c] = _mm512_loadu_si512(wb + c * steps * kQ8Record + u * 64);
        Add(x, r, b, u, wv, s);
      }
      __m512 ws[C];
      for (int c = 0; c < C; ++c) ws[c] = _mm512_loadu_ps(reinterpret_cast<const float*>(wb + c * steps * kQ8Record + 512));
      Scale(x, r, b, s, ws, acc);
    }
  }
};

// int8 x 4-bit: as Q8Op, the weights' nibbles (q_w + 8 in 0..15, unsigned) unpacked with a mask and
// a shift, the sums starting at -8 * the block's sum of q_x, the scales widened from fp16.
struct Q4Op {
  Q8Rows x;
  const uint8_t* w;  // packed, at the tile's first group
  int64_t steps;     // blocks
  static constexpr int64_t kChunk = 16;  // 16 blocks x 4 groups x 288 bytes: 18 KB in L1
  static constexpr int kTileRows = steady::cpu::kTileRows, kTileGroups = steady::cpu::kTileGroups;

  Q4Op Shift(int64_t groups) const { return {x, w + groups * steps * kQ4Record, steps}; }

  template <int R, int C>
  STEADY_DOT_TARGET void Tile(int r, int64_t b0, int64_t b1, float* acc) const {
    const __m512i low = _mm512_set1_epi8(0x0f);
    for (int64_t b = b0; b < b1; ++b) {
      __m512i s[R][C];
      Start(x, r, b, 8, s);
      const uint8_t* wb = w + b * kQ4Record;
      for (int v = 0; v < 4; ++v) {
        __m512i raw[C], wv[C];
        for (int c = 0; c < C; ++c) raw[c] = _mm512_loadu_si512(wb + c * steps * kQ4Record + v * 64);
        for (int c = 0; c < C; ++c) wv[c] = _mm512_and_si512(raw[c], low);  // inputs 4v..4v+3
        Add(x, r, b, v, wv, s);
        for (int c = 0; c < C; ++c) wv[c] = _mm512_and_si512(_mm512_srli_epi16(raw[c], 4), low);  // 16 + 4v..
        Add(x, r, b, v + 4, wv, s);
      }
      __m512 ws[C];
      for (int c = 0; c < C; ++c) {
        ws[c] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + c * steps * kQ4Record + 256)));
      }
      Scale(x, r, b, s, ws, acc);
    }
  }
};

// int8 x q4k: per sub-block (32 inputs, one q8_0 block of x) the nibbles q in 0..15 times q_x summed
// exactly in int32 as Q4Op does (no offset: q is unsigned), then in fp32
//     acc += sum * (scale_x * d * sc)  -  (scale_x * sum of q_x) * (dmin * m),
// the minimum's share taken off with the block's sum of q_x. The scales are widened per group and
// sub-block, once for every row of the tile.
struct Q4KOp {
  Q8Rows x;
  const uint8_t* w;  // packed, at the tile's first group
  int64_t steps;     // super-blocks
  static constexpr int64_t kChunk = 2;  // 2 super-blocks x 4 groups x 2368 bytes: 19 KB in L1
  static constexpr int kTileRows = steady::cpu::kTileRows, kTileGroups = steady::cpu::kTileGroups;

  Q4KOp Shift(int64_t groups) const { return {x, w + groups * steps * kQ4KRecord, steps}; }

  template <int R, int C>
  STEADY_DOT_TARGET void Tile(int r, int64_t b0, int64_t b1, float* acc) const {
    const __m512i low = _mm512_set1_epi8(0x0f);
    for (int64_t b = b0; b < b1; ++b) {
      const uint8_t* wb = w + b * kQ4KRecord;
      // x's padding ends at its last q8_0 block; the weights' sub-blocks past it are zero.
      const int64_t subs = std::min<int64_t>(8, x.blocks - 8 * b);
      for (int64_t s = 0; s < subs; ++s) {
        const int64_t xb = 8 * b + s;
        __m512i sums[R][C];
        Start(x, r, xb, 0, sums);
        for (int v = 0; v < 4; ++v) {
          __m512i raw[C], wv[C];
          for (int c = 0; c < C; ++c) raw[c] = _mm512_loadu_si512(wb + c * steps * kQ4KRecord + kQ4KHead + s * 256 + v * 64);
          for (int c = 0; c < C; ++c) wv[c] = _mm512_and_si512(raw[c], low);
          Add(x, r, xb, v, wv, sums);
          for (int c = 0; c < C; ++c) wv[c] = _mm512_and_si512(_mm512_srli_epi16(raw[c], 4), low);
          Add(x, r, xb, v + 4, wv, sums);
        }
        for (int c = 0; c < C; ++c) {
          const uint8_t* g = wb + c * steps * kQ4KRecord;
          const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g)));
          const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + 32)));
          const __m512 scale = _mm512_mul_ps(
              d, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 64 + 16 * s)))));
          const __m512 min = _mm512_mul_ps(
              dmin, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 192 + 16 * s)))));
          for (int rr = 0; rr < R; ++rr) {
            float* a = acc + (rr * C + c) * 16;
            const int64_t i = (r + rr) * x.blocks + xb;
            const float dx = x.xscale[i];
            __m512 sum = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[rr][c]), _mm512_mul_ps(scale, _mm512_set1_ps(dx)), _mm512_load_ps(a));
            sum = _mm512_fnmadd_ps(min, _mm512_set1_ps(dx * float(x.xsum[i])), sum);
            _mm512_store_ps(a, sum);
          }
        }
      }
    }
  }
};

#define STEADY_DRIVER_TARGET STEADY_DOT_TARGET
#include "kernels/cpu/matmul_dot_driver-inl.h"
#undef STEADY_DRIVER_TARGET

bool HasAvx512Base() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}

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

// QuantizeQ8 of one row, a block at a time (the same arithmetic: scale = max |x| / 127, q = x * (1 /
// scale) rounded to nearest even, as lrint does, kept to its low byte as int8_t(lrint) does), with
// each block's sum of the stored q. (Only a block whose 1 / scale overflows, max |x| < 4e-37, makes a
// q outside -127..127: x * inf converts to INT_MIN, whose low byte is 0.)
STEADY_DOT_TARGET void QuantizeRow(const float* x, int64_t in, int8_t* q, float* scales, int32_t* sums) {
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

// Per-thread scratch for the rounded activations (a decode step calls these kernels hundreds of
// times: no allocation per call once they have grown).
template <typename T>
T* Scratch(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

}  // namespace

bool Bf16DotAvailable() {
  static const bool ok = HasAvx512Base() && __builtin_cpu_supports("avx512bf16");
  return ok;
}
const char* Bf16DotPath() {
  static const std::string path =
      Bf16DotAvailable() ? "avx512_bf16 (VDPBF16PS)" : std::string("widening fp32 (") + SimdTargetName() + ")";
  return path.c_str();
}
bool Int8PathAvailable(Int8Path path) {
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  switch (path) {
    case Int8Path::kAvx512Vnni: {
      static const bool ok = HasAvx512Base() && __builtin_cpu_supports("avx512vnni");
      return ok;
    }
    case Int8Path::kAvxVnni: {
      static const bool ok = avx2 && __builtin_cpu_supports("avxvnni");
      return ok;
    }
    case Int8Path::kAvx2: return avx2;
    case Int8Path::kNone: return true;
  }
  return false;
}

Int8Path WidestInt8Path() {
  for (Int8Path p : {Int8Path::kAvx512Vnni, Int8Path::kAvxVnni, Int8Path::kAvx2}) {
    if (Int8PathAvailable(p)) return p;
  }
  return Int8Path::kNone;
}

namespace {

std::atomic<Int8Path>& Int8PathSetting() {
  static std::atomic<Int8Path> path{WidestInt8Path()};
  return path;
}

}  // namespace

void SetInt8Path(Int8Path path) {
  STEADY_CHECK(Int8PathAvailable(path));
  Int8PathSetting().store(path, std::memory_order_relaxed);
}
Int8Path CurrentInt8Path() { return Int8PathSetting().load(std::memory_order_relaxed); }

const char* Int8PathName(Int8Path path) {
  static const std::string widening = std::string("widening fp32 (") + SimdTargetName() + ")";
  switch (path) {
    case Int8Path::kAvx512Vnni: return "avx512_vnni (VPDPBUSD)";
    case Int8Path::kAvxVnni: return "avx_vnni (VPDPBUSD ymm)";
    case Int8Path::kAvx2: return "avx2 (VPMADDUBSW)";
    case Int8Path::kNone: return widening.c_str();
  }
  return "?";
}

const char* Int8PathExtension(Int8Path path) {
  switch (path) {
    case Int8Path::kAvx512Vnni: return "AVX512_VNNI";
    case Int8Path::kAvxVnni: return "AVX_VNNI";
    case Int8Path::kAvx2: return "AVX2";
    case Int8Path::kNone: return "";
  }
  return "?";
}

bool Int8DotAvailable() { return CurrentInt8Path() != Int8Path::kNone; }
const char* Int8DotPath() { return Int8PathName(CurrentInt8Path()); }

int64_t Bf16DotPackedSize(int64_t out, int64_t in) { return Groups(out) * ((in + 1) / 2) * 32; }

void PackBf16Dot(const uint16_t* w, int64_t out, int64_t in, uint16_t* packed) {
  const int64_t pairs = (in + 1) / 2;
  for (int64_t g = 0; g < Groups(out); ++g) {
    for (int64_t p = 0; p < pairs; ++p) {
      uint16_t* v = packed + (g * pairs + p) * 32;
      for (int c = 0; c < kGroup; ++c) {
        const int64_t j = g * kGroup + c;
        for (int e = 0; e < 2; ++e) {
          const int64_t k = 2 * p + e;
          v[2 * c + e] = j < out && k < in ? w[j * in + k] : uint16_t(0);
        }
      }
    }
  }
}

int64_t Q8DotPackedSize(int64_t out, int64_t in) { return Groups(out) * Q8BlocksPerRow(in) * kQ8Record; }

void PackQ8Dot(Q8Weights w, int64_t out, int64_t in, uint8_t* packed) {
  const int64_t blocks = Q8BlocksPerRow(in);
  for (int64_t g = 0; g < Groups(out); ++g) {
    for (int64_t b = 0; b < blocks; ++b) {
      uint8_t* rec = packed + (g * blocks + b) * kQ8Record;
      float scales[kGroup];
      for (int c = 0; c < kGroup; ++c) {
        const int64_t j = g * kGroup + c;
        scales[c] = j < out ? w.scales[j * blocks + b] : 0.0f;
        for (int i = 0; i < kQ8Block; ++i) {
          const int64_t k = b * kQ8Block + i;
          const int value = j < out && k < in ? w.q[j * in + k] : 0;
          rec[(i / 4) * 64 + c * 4 + i % 4] = uint8_t(value + 128);
        }
      }
      std::memcpy(rec + 512, scales, sizeof(scales));
    }
  }
}

void MatMulNTBf16Dot(const float* x, int rows, int in, const uint16_t* packed, int out, float* y) {
  thread_local std::vector<uint32_t> scratch;
  const int64_t pairs = (in + 1) / 2;
  uint32_t* xb = Scratch(scratch, size_t(rows * pairs));
  for (int r = 0; r < rows; ++r) {
    uint16_t* row = reinterpret_cast<uint16_t*>(xb + r * pairs);
    RoundToBf16(x + int64_t(r) * in, in, row);
    if (in % 2 != 0) row[in] = 0;
  }
  Run(Bf16Op{xb, packed, pairs}, rows, in, out, y);
}

namespace {

STEADY_DOT_TARGET uint16_t FloatToF16(float f) { return uint16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT)); }

}  // namespace

namespace dot {

Q8Rows QuantizeRows(const float* x, int rows, int in, QuantizeRowFn quantize) {
  thread_local std::vector<int8_t> scratch_q;
  thread_local std::vector<float> scratch_scales;
  thread_local std::vector<int32_t> scratch_sums;
  const int64_t blocks = Q8BlocksPerRow(in), xs = blocks * kQ8Block;
  int8_t* q = Scratch(scratch_q, size_t(rows * xs));
  float* scales = Scratch(scratch_scales, size_t(rows * blocks));
  int32_t* sums = Scratch(scratch_sums, size_t(rows * blocks));
  for (int r = 0; r < rows; ++r) quantize(x + int64_t(r) * in, in, q + r * xs, scales + r * blocks, sums + r * blocks);
  return {q, scales, sums, blocks};
}

}  // namespace dot

// On the current path; the 256-bit ones quantize x themselves (an AVX2 CPU runs them).
void MatMulNTQ8Dot(const float* x, int rows, int in, const uint8_t* packed, int out, float* y) {
  const Int8Path path = CurrentInt8Path();
  if (path != Int8Path::kAvx512Vnni) return dot::MatMulNTQ8Dot256(path, x, rows, in, packed, out, y);
  const Q8Rows xq = dot::QuantizeRows(x, rows, in, QuantizeRow);
  Run(Q8Op{xq, packed, xq.blocks}, rows, in, out, y);
}

void MatMulNTQ4Dot(const float* x, int rows, int in, const uint8_t* packed, int out, float* y) {
  const Int8Path path = CurrentInt8Path();
  if (path != Int8Path::kAvx512Vnni) return dot::MatMulNTQ4Dot256(path, x, rows, in, packed, out, y);
  const Q8Rows xq = dot::QuantizeRows(x, rows, in, QuantizeRow);
  Run(Q4Op{xq, packed, xq.blocks}, rows, in, out, y);
}

void MatMulNTQ4KDot(const float* x, int rows, int in, const uint8_t* packed, int out, float* y) {
  const Int8Path path = CurrentInt8Path();
  if (path != Int8Path::kAvx512Vnni) return dot::MatMulNTQ4KDot256(path, x, rows, in, packed, out, y);
  const Q8Rows xq = dot::QuantizeRows(x, rows, in, QuantizeRow);
  Run(Q4KOp{xq, packed, Q4KBlocksPerRow(in)}, rows, in, out, y);
}

int64_t Q4KDotPackedSize(int64_t out, int64_t in) { return Groups(out) * Q4KBlocksPerRow(in) * kQ4KRecord; }

void PackQ4KDot(Q4KWeights w, int64_t out, int64_t in, uint8_t* packed) {
  const int64_t blocks = Q4KBlocksPerRow(in);
  std::memset(packed, 0, size_t(Q4KDotPackedSize(out, in)));
  for (int64_t g = 0; g < Groups(out); ++g) {
    for (int64_t b = 0; b < blocks; ++b) {
      uint8_t* rec = packed + (g * blocks + b) * kQ4KRecord;
      for (int c = 0; c < kGroup && g * kGroup + c < out; ++c) {
        const int64_t j = g * kGroup + c;
        const Q4KScales& s = w.scales[j * blocks + b];
        std::memcpy(rec + 2 * c, &s.d, 2);
        std::memcpy(rec + 32 + 2 * c, &s.dmin, 2);
        const uint8_t* q = w.q + (j * blocks + b) * (kQ4KBlock / 2);
        for (int sub = 0; sub < 8; ++sub) {
          rec[64 + 16 * sub + c] = s.sc[sub];
          rec[192 + 16 * sub + c] = s.m[sub];
          // Byte i of a sub-block holds its inputs i (low nibble) and 16 + i (high), as q4k.h's.
          for (int i = 0; i < 16; ++i) rec[kQ4KHead + sub * 256 + (i / 4) * 64 + c * 4 + i % 4] = q[16 * sub + i];
        }
      }
    }
  }
}

int64_t Q4DotPackedSize(int64_t out, int64_t in) { return Groups(out) * Q8BlocksPerRow(in) * kQ4Record; }

void QuantizePackQ4Dot(const float* w, int64_t out, int64_t in, uint8_t* packed) {
  const int64_t blocks = Q8BlocksPerRow(in);
  for (int64_t g = 0; g < Groups(out); ++g) {
    for (int64_t b = 0; b < blocks; ++b) {
      uint8_t* rec = packed + (g * blocks + b) * kQ4Record;
      uint16_t scales[kGroup];
      for (int c = 0; c < kGroup; ++c) {
        const int64_t j = g * kGroup + c;
        float v[kQ8Block] = {};
        for (int i = 0; i < kQ8Block && j < out && b * kQ8Block + i < in; ++i) v[i] = w[j * in + b * kQ8Block + i];
        float amax = 0.0f, m = 0.0f;  // llama.cpp's quantize_row_q4_0_ref
        for (float e : v) {
          if (amax < std::fabs(e)) {
            amax = std::fabs(e);
            m = e;
          }
        }
        const float d = m / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        scales[c] = FloatToF16(d);
        uint8_t q[kQ8Block];
        for (int i = 0; i < kQ8Block; ++i) q[i] = uint8_t(std::min(15, int(v[i] * id + 8.5f)));
        for (int i = 0; i < 16; ++i) rec[(i / 4) * 64 + c * 4 + i % 4] = uint8_t(q[i] | (q[i + 16] << 4));
      }
      std::memcpy(rec + 256, scales, sizeof(scales));
    }
  }
}

void DequantizeQ4Dot(const uint8_t* packed, int64_t out, int64_t in, int64_t r0, int64_t r1, float* w) {
  (void)out;
  const int64_t blocks = Q8BlocksPerRow(in);
  for (int64_t j = r0; j < r1; ++j) {
    const int64_t g = j / kGroup, c = j % kGroup;
    for (int64_t k = 0; k < in; ++k) {
      const int64_t b = k / kQ8Block, i = k % kQ8Block;
      const uint8_t* rec = packed + (g * blocks + b) * kQ4Record;
      uint16_t d;
      std::memcpy(&d, rec + 256 + 2 * c, 2);
      const uint8_t byte = rec[((i % 16) / 4) * 64 + c * 4 + i % 4];
      const int q = i < 16 ? byte & 15 : byte >> 4;
      w[(j - r0) * in + k] = float(q - 8) * F16ToFloat(d);
    }
  }
}

void MatMulNTBf16DotReference(const float* x, int rows, int in, const uint16_t* w, int out, float* y) {
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < out; ++j) {
      double s = 0;
      for (int k = 0; k < in; ++k) {
        s += double(Bf16ToFloat(FloatToBf16(x[int64_t(r) * in + k]))) * Bf16ToFloat(w[int64_t(j) * in + k]);
      }
      y[int64_t(r) * out + j] = float(s);
    }
  }
}

namespace {

// y[r, j] = sum over k of the dequantized q8(x)[r, k] * weight(j, k), in double.
template <typename WeightAt>
void Q8ActivationsProduct(const float* x, int rows, int in, int out, float* y, const WeightAt& weight) {
  const int64_t blocks = Q8BlocksPerRow(in);
  std::vector<int8_t> xq(static_cast<size_t>(in));
  std::vector<float> xd(static_cast<size_t>(blocks));
  for (int r = 0; r < rows; ++r) {
    QuantizeQ8(x + int64_t(r) * in, 1, in, xq.data(), xd.data());
    for (int j = 0; j < out; ++j) {
      double s = 0;
      for (int k = 0; k < in; ++k) s += double(xq[size_t(k)]) * xd[size_t(k / kQ8Block)] * weight(j, k);
      y[int64_t(r) * out + j] = float(s);
    }
  }
}

}  // namespace

void MatMulNTQ8DotReference(const float* x, int rows, int in, Q8Weights w, int out, float* y) {
  const int64_t blocks = Q8BlocksPerRow(in);
  Q8ActivationsProduct(x, rows, in, out, y, [&](int64_t j, int64_t k) {
    return double(w.q[j * in + k]) * w.scales[j * blocks + k / kQ8Block];
  });
}

void MatMulNTQ8ActivationsReference(const float* x, int rows, int in, const float* w, int out, float* y) {
  Q8ActivationsProduct(x, rows, in, out, y, [&](int64_t j, int64_t k) { return double(w[j * in + k]); });
}

}  // namespace steady::cpu
