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
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/parallel.h"

#define STEADY_DOT_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vnni,f16c")))

namespace steady::cpu {
namespace {

constexpr int kGroup = 16;      // output columns per packed group: one vector of fp32 sums
constexpr int kTileGroups = 4;  // groups per register tile (64 columns)
constexpr int kTileRows = 4;    // rows of x per register tile: 16 accumulators + 4 weights + x
constexpr int kPassRows = 32;   // rows of x whose sums are kept (in L1) during a pass over the weights
constexpr int64_t kQ8Record = 8 * 64 + 64;  // bytes per group and block: 8 weight vectors, 16 scales
constexpr int64_t kQ4Record = 4 * 64 + 32;  // 4 vectors of two nibbles, 16 fp16 scales
// Per group and q4k super-block: 16 fp16 d, 16 fp16 dmin, the 8 sub-blocks' 16 scales and 16
// minimums (a byte each), then per sub-block 4 vectors of two nibbles: 2368 bytes per 4096 weights.
constexpr int64_t kQ4KHead = 32 + 32 + 128 + 128;
constexpr int64_t kQ4KRecord = kQ4KHead + 8 * 4 * 64;

int64_t Groups(int64_t out) { return (out + kGroup - 1) / kGroup; }

// bf16 x bf16: acc[rr][c] (16 columns each) += x[r + rr, pair p] . w[group c, pair p] over [p0, p1).
struct Bf16Op {
  const uint32_t* x;  // [rows, steps]: bf16(x) two by two, the odd tail padded with zero
  const uint16_t* w;  // packed, at the tile's first group
  int64_t steps;      // pairs of inputs
  // 64 pairs x 4 groups x 64 bytes: the tile's 16 KB of weights stay in L1 while every row uses them.
  static constexpr int64_t kChunk = 64;

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

// The activations of the int8 kernels: each row quantized per q8_0 block (QuantizeRow).
struct Q8Rows {
  const int8_t* x;      // [rows, blocks * 32], zero padded
  const float* xscale;  // [rows, blocks]
  const int32_t* xsum;  // [rows, blocks]: the block's sum of q_x
  int64_t blocks;

  // s[rr][c] = -offset * the sum of q_x of row r + rr's block b: VPDPBUSD's sums of q_x (q_w +
  // offset) start there, and end at the exact sum of q_x q_w.
  template <int R, int C>
  STEADY_DOT_TARGET void Start(int r, int64_t b, int32_t offset, __m512i (&s)[R][C]) const {
    for (int rr = 0; rr < R; ++rr) {
      const __m512i start = _mm512_set1_epi32(-offset * xsum[(r + rr) * blocks + b]);
      for (int c = 0; c < C; ++c) s[rr][c] = start;
    }
  }
  // s[rr][c] += the 16 columns' 4 weights wv[c] times row r + rr's inputs 4u..4u+3 of block b.
  template <int R, int C>
  STEADY_DOT_TARGET void Add(int r, int64_t b, int u, const __m512i (&wv)[C], __m512i (&s)[R][C]) const {
    for (int rr = 0; rr < R; ++rr) {
      int32_t four;
      std::memcpy(&four, x + ((r + rr) * blocks + b) * 32 + u * 4, 4);
      const __m512i xv = _mm512_set1_epi32(four);
      for (int c = 0; c < C; ++c) s[rr][c] = _mm512_dpbusd_epi32(s[rr][c], wv[c], xv);
    }
  }
  // acc[rr][c] += s[rr][c] * scale_x(row r + rr, block b) * ws[c], in fp32.
  template <int R, int C>
  STEADY_DOT_TARGET void Scale(int r, int64_t b, const __m512i (&s)[R][C], const __m512 (&ws)[C], float* acc) const {
    for (int c = 0; c < C; ++c) {
      for (int rr = 0; rr < R; ++rr) {
        float* a = acc + (rr * C + c) * 16;
        const __m512 scale = _mm512_mul_ps(ws[c], _mm512_set1_ps(xscale[(r + rr) * blocks + b]));
        _mm512_store_ps(a, _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[rr][c]), scale, _mm512_load_ps(a)));
      }
    }
  }
};

// int8 x int8, a q8_0 block (32 inputs) per step: 8 VPDPBUSD of the weights (+ 128, unsigned) by x's
// 4 bytes broadcast (signed) into int32 sums that start at -128 * the block's sum of q_x, so that
// they end at the exact sum of q_x q_w; then one conversion and one fp32 multiply-add by
// scale_x scale_w.
struct Q8Op {
  Q8Rows x;
  const uint8_t* w;  // packed, at the tile's first group
  int64_t steps;     // blocks
  static constexpr int64_t kChunk = 8;  // 8 blocks x 4 groups x 576 bytes: 18 KB in L1

  Q8Op Shift(int64_t groups) const { return {x, w + groups * steps * kQ8Record, steps}; }

  template <int R, int C>
  STEADY_DOT_TARGET void Tile(int r, int64_t b0, int64_t b1, float* acc) const {
    for (int64_t b = b0; b < b1; ++b) {
      __m512i s[R][C];
      x.Start(r, b, 128, s);
      const uint8_t* wb = w + b * kQ8Record;
      for (int u = 0; u < 8; ++u) {
        __m512i wv[C];
        for (int c = 0; c < C; ++c) wv[c] = _mm512_loadu_si512(wb + c * steps * kQ8Record + u * 64);
        x.Add(r, b, u, wv, s);
      }
      __m512 ws[C];
      for (int c = 0; c < C; ++c) ws[c] = _mm512_loadu_ps(reinterpret_cast<const float*>(wb + c * steps * kQ8Record + 512));
      x.Scale(r, b, s, ws, acc);
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

  Q4Op Shift(int64_t groups) const { return {x, w + groups * steps * kQ4Record, steps}; }

  template <int R, int C>
  STEADY_DOT_TARGET void Tile(int r, int64_t b0, int64_t b1, float* acc) const {
    const __m512i low = _mm512_set1_epi8(0x0f);
    for (int64_t b = b0; b < b1; ++b) {
      __m512i s[R][C];
      x.Start(r, b, 8, s);
      const uint8_t* wb = w + b * kQ4Record;
      for (int v = 0; v < 4; ++v) {
        __m512i raw[C], wv[C];
        for (int c = 0; c < C; ++c) raw[c] = _mm512_loadu_si512(wb + c * steps * kQ4Record + v * 64);
        for (int c = 0; c < C; ++c) wv[c] = _mm512_and_si512(raw[c], low);  // inputs 4v..4v+3
        x.Add(r, b, v, wv, s);
        for (int c = 0; c < C; ++c) wv[c] = _mm512_and_si512(_mm512_srli_epi16(raw[c], 4), low);  // 16 + 4v..
        x.Add(r, b, v + 4, wv, s);
      }
      __m512 ws[C];
      for (int c = 0; c < C; ++c) {
        ws[c] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + c * steps * kQ4Record + 256)));
      }
      x.Scale(r, b, s, ws, acc);
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
        x.Start(r, xb, 0, sums);
        for (int v = 0; v < 4; ++v) {
          __m512i raw[C], wv[C];
          for (int c = 0; c < C; ++c) raw[c] = _mm512_loadu_si512(wb + c * steps * kQ4KRecord + kQ4KHead + s * 256 + v * 64);
          for (int c = 0; c < C; ++c) wv[c] = _mm512_and_si512(raw[c], low);
          x.Add(r, xb, v, wv, sums);
          for (int c = 0; c < C; ++c) wv[c] = _mm512_and_si512(_mm512_srli_epi16(raw[c], 4), low);
          x.Add(r, xb, v + 4, wv, sums);
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

// y[r, c * 16 + l] (row stride `out`; only the first `valid` columns) for every row of x and the C
// groups at op. Each output is one lane's running sum over the steps in order, whatever the tile.
template <int C, class Op>
STEADY_DOT_TARGET void Columns(const Op& op, int rows, float* y, int64_t out, int64_t valid) {
  alignas(64) float acc[kPassRows * C * 16];
  for (int r0 = 0; r0 < rows; r0 += kPassRows) {
    const int n = std::min(kPassRows, rows - r0);
    std::memset(acc, 0, sizeof(float) * n * C * 16);
    for (int64_t s0 = 0; s0 < op.steps; s0 += Op::kChunk) {
      const int64_t s1 = std::min(op.steps, s0 + Op::kChunk);
      int r = 0;
      for (; r + kTileRows <= n; r += kTileRows) op.template Tile<kTileRows, C>(r0 + r, s0, s1, acc + r * C * 16);
      float* a = acc + r * C * 16;
      switch (n - r) {
        case 3: op.template Tile<3, C>(r0 + r, s0, s1, a); break;
        case 2: op.template Tile<2, C>(r0 + r, s0, s1, a); break;
        case 1: op.template Tile<1, C>(r0 + r, s0, s1, a); break;
        default: break;
      }
    }
    for (int r = 0; r < n; ++r) {
      for (int c = 0; c < C && c * 16 < valid; ++c) {
        const int64_t cols = std::min<int64_t>(16, valid - c * 16);
        const __mmask16 m = cols == 16 ? __mmask16(0xffff) : __mmask16((1u << cols) - 1);
        _mm512_mask_storeu_ps(y + (r0 + r) * out + c * 16, m, _mm512_load_ps(acc + (r * C + c) * 16));
      }
    }
  }
}

// Groups [g0, g1) of y's columns.
template <class Op>
STEADY_DOT_TARGET void GroupRange(const Op& op, int rows, int64_t out, int64_t g0, int64_t g1, float* y) {
  int64_t g = g0;
  for (; g + kTileGroups <= g1; g += kTileGroups) {
    Columns<kTileGroups>(op.Shift(g), rows, y + g * kGroup, out, out - g * kGroup);
  }
  for (; g < g1; ++g) Columns<1>(op.Shift(g), rows, y + g * kGroup, out, out - g * kGroup);
}

// Splits the column groups over the compute threads in runs of whole tiles, about 4 per thread (as
// matmul.cc does): no output's arithmetic depends on the split.
template <class Op>
void Run(const Op& op, int rows, int in, int out, float* y) {
  const int64_t groups = Groups(out);
  if (int64_t(rows) * in * out < kMinParallelWork) return GroupRange(op, rows, out, 0, groups, y);
  const int threads = ComputeThreads();
  const int64_t per_task = std::max<int64_t>(kTileGroups, (groups / (4 * threads) + kTileGroups - 1) / kTileGroups * kTileGroups);
  const int tasks = int((groups + per_task - 1) / per_task);
  ParallelFor(tasks, [&](int t) {
    const int64_t g0 = t * per_task;
    GroupRange(op, rows, out, g0, std::min<int64_t>(groups, g0 + per_task), y);
  });
}

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

// QuantizeQ8 of one row, a block at a time (the same arithmetic: scale = max |x| / 127, q = x * (1 /
// scale) rounded to nearest even, as lrint does), with each block's sum of q.
STEADY_DOT_TARGET void QuantizeRow(const float* x, int64_t in, int8_t* q, float* scales, int32_t* sums) {
  for (int64_t b = 0; b * kQ8Block < in; ++b) {
    const int64_t k0 = b * kQ8Block, left = in - k0;
    const __mmask16 m0 = left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
    const __mmask16 m1 = left >= 32 ? __mmask16(0xffff) : left <= 16 ? __mmask16(0) : __mmask16((1u << (left - 16)) - 1);
    const __m512 v0 = _mm512_maskz_loadu_ps(m0, x + k0), v1 = _mm512_maskz_loadu_ps(m1, x + k0 + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const float scale = amax / 127.0f;
    const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, _mm512_set1_ps(inv)));
    const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, _mm512_set1_ps(inv)));
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
bool Int8DotAvailable() {
  static const bool ok = HasAvx512Base() && __builtin_cpu_supports("avx512vnni");
  return ok;
}

const char* Bf16DotPath() {
  static const std::string path =
      Bf16DotAvailable() ? "avx512_bf16 (VDPBF16PS)" : std::string("widening fp32 (") + SimdTargetName() + ")";
  return path.c_str();
}
const char* Int8DotPath() {
  static const std::string path =
      Int8DotAvailable() ? "avx512_vnni (VPDPBUSD)" : std::string("widening fp32 (") + SimdTargetName() + ")";
  return path.c_str();
}

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

// q8(x) into per-thread scratch, for the int8 kernels.
Q8Rows QuantizeRows(const float* x, int rows, int in) {
  thread_local std::vector<int8_t> scratch_q;
  thread_local std::vector<float> scratch_scales;
  thread_local std::vector<int32_t> scratch_sums;
  const int64_t blocks = Q8BlocksPerRow(in), xs = blocks * kQ8Block;
  int8_t* q = Scratch(scratch_q, size_t(rows * xs));
  float* scales = Scratch(scratch_scales, size_t(rows * blocks));
  int32_t* sums = Scratch(scratch_sums, size_t(rows * blocks));
  for (int r = 0; r < rows; ++r) QuantizeRow(x + int64_t(r) * in, in, q + r * xs, scales + r * blocks, sums + r * blocks);
  return {q, scales, sums, blocks};
}

STEADY_DOT_TARGET uint16_t FloatToF16(float f) { return uint16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT)); }

}  // namespace

void MatMulNTQ8Dot(const float* x, int rows, int in, const uint8_t* packed, int out, float* y) {
  const Q8Rows xq = QuantizeRows(x, rows, in);
  Run(Q8Op{xq, packed, xq.blocks}, rows, in, out, y);
}

void MatMulNTQ4Dot(const float* x, int rows, int in, const uint8_t* packed, int out, float* y) {
  const Q8Rows xq = QuantizeRows(x, rows, in);
  Run(Q4Op{xq, packed, xq.blocks}, rows, in, out, y);
}

void MatMulNTQ4KDot(const float* x, int rows, int in, const uint8_t* packed, int out, float* y) {
  const Q8Rows xq = QuantizeRows(x, rows, in);
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
