// bf16 x bf16 and int8 x int8 decode GEMMs (matmul_dot.h). The kernels are AVX-512 intrinsics in
// functions compiled for their own target (the rest of the binary stays baseline x86-64) and run only
// after a run-time CPU check. Why intrinsics and not Highway: Debian's Highway (1.0.3) emulates
// ReorderWidenMulAccumulate on bf16 with shifts and fp32 FMAs (its source says "TODO: _mm_dpbf16_ps")
// and has no SumOfMulQuadAccumulate, so through it neither VDPBF16PS nor VPDPBUSD would be emitted.
#include "kernels/cpu/matmul_dot.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/parallel.h"

#define STEADY_DOT_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vnni")))

namespace steady::cpu {
namespace {

// As in matmul.cc: rows of x per pass over a block of weight rows, and the stretch of `in` (in
// elements) the pass's accumulators run over before the next 4 rows, so that the weight rows being
// read (4 x 1 KB in bf16) stay in L1 while every row of x uses them.
constexpr int kPassRows = 32;
constexpr int64_t kChunk = 512;
constexpr int kTileCols = 4;  // 16 accumulators + 4 weight vectors + x fit AVX-512's 32 registers
constexpr int64_t kPad = 64;  // rows of the rounded x are padded with zeros to a multiple of this

int64_t Padded(int64_t in) { return (in + kPad - 1) / kPad * kPad; }

// bf16 x bf16: acc[rr][c] += bf16 pairs of x row r + rr and w row c over [k0, k1), 32 at a time.
struct Bf16Op {
  const uint16_t* x;  // [rows, xs], zero padded
  int64_t xs;
  const uint16_t* w;  // [out, in]
  int64_t in;
  static constexpr int64_t kStep = 32;

  Bf16Op Shift(int64_t j) const { return {x, xs, w + j * in, in}; }

  template <int R, int C>
  STEADY_DOT_TARGET void Tile(int r, int64_t k0, int64_t k1, float* acc) const {
    __m512 a[R][C];
    for (int rr = 0; rr < R; ++rr) {
      for (int c = 0; c < C; ++c) a[rr][c] = _mm512_load_ps(acc + (rr * C + c) * 16);
    }
    const int64_t full = in - in % kStep;
    for (int64_t k = k0; k < k1; k += kStep) {
      // The last, partial vector of a weight row loads zeros past its end (x's padding is zero too).
      const __mmask32 m = k < full ? ~__mmask32(0) : __mmask32((1u << (in - k)) - 1);
      __m512i wv[C];
      for (int c = 0; c < C; ++c) wv[c] = _mm512_maskz_loadu_epi16(m, w + c * in + k);
      for (int rr = 0; rr < R; ++rr) {
        const __m512bh xv = (__m512bh)_mm512_loadu_si512(x + (r + rr) * xs + k);
        for (int c = 0; c < C; ++c) a[rr][c] = _mm512_dpbf16_ps(a[rr][c], xv, (__m512bh)wv[c]);
      }
    }
    for (int rr = 0; rr < R; ++rr) {
      for (int c = 0; c < C; ++c) _mm512_store_ps(acc + (rr * C + c) * 16, a[rr][c]);
    }
  }
};

// int8 x int8, 64 at a time (two q8_0 blocks): VPDPBUSD multiplies unsigned by signed bytes, so x
// enters as |x| and its sign moves onto w (|w| <= 127: -w never overflows). Each int32 lane (four
// products of one block) is scaled by scale_x * scale_w of its block and added in fp32.
struct Q8Op {
  const int8_t* x;       // [rows, xs], zero padded
  const float* xscale;   // [rows, xs / 4]: per 64 values, 8 lanes of block b's scale, 8 of b + 1's
  int64_t xs;
  const int8_t* wq;      // [out, in]
  const float* wscale;   // [out, blocks]
  int64_t in, blocks;
  static constexpr int64_t kStep = 64;

  Q8Op Shift(int64_t j) const { return {x, xscale, xs, wq + j * in, wscale + j * blocks, in, blocks}; }

  template <int R, int C>
  STEADY_DOT_TARGET void Tile(int r, int64_t k0, int64_t k1, float* acc) const {
    __m512 a[R][C];
    for (int rr = 0; rr < R; ++rr) {
      for (int c = 0; c < C; ++c) a[rr][c] = _mm512_load_ps(acc + (rr * C + c) * 16);
    }
    const __m512i zero = _mm512_setzero_si512();
    const int64_t full = in - in % kStep;
    for (int64_t k = k0; k < k1; k += kStep) {
      const __mmask64 m = k < full ? ~__mmask64(0) : (__mmask64(1) << (in - k)) - 1;
      const int64_t b = k / kQ8Block;
      __m512i wv[C];
      __m512 wd[C];
      for (int c = 0; c < C; ++c) {
        wv[c] = _mm512_maskz_loadu_epi8(m, wq + c * in + k);
        const float d0 = wscale[c * blocks + b], d1 = b + 1 < blocks ? wscale[c * blocks + b + 1] : 0.0f;
        wd[c] = _mm512_insertf32x8(_mm512_set1_ps(d0), _mm256_set1_ps(d1), 1);
      }
      for (int rr = 0; rr < R; ++rr) {
        const __m512i xv = _mm512_loadu_si512(x + (r + rr) * xs + k);
        const __mmask64 neg = _mm512_movepi8_mask(xv);
        const __m512i xa = _mm512_abs_epi8(xv);
        const __m512 xd = _mm512_loadu_ps(xscale + (r + rr) * (xs / 4) + k / 4);
        for (int c = 0; c < C; ++c) {
          const __m512i sw = _mm512_mask_sub_epi8(wv[c], neg, zero, wv[c]);
          const __m512i s = _mm512_dpbusd_epi32(zero, xa, sw);
          a[rr][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(xd, wd[c]), a[rr][c]);
        }
      }
    }
    for (int rr = 0; rr < R; ++rr) {
      for (int c = 0; c < C; ++c) _mm512_store_ps(acc + (rr * C + c) * 16, a[rr][c]);
    }
  }
};

// y[r, c] (row stride `out`) for every row of x and the C weight rows at op: each element's 16
// lanes run over all of `in` in order, then are summed by one fixed reduction, whatever the tile.
template <int C, class Op>
STEADY_DOT_TARGET void Columns(const Op& op, int rows, float* y, int64_t out) {
  alignas(64) float acc[kPassRows * C * 16];
  const int64_t kend = (op.in + Op::kStep - 1) / Op::kStep * Op::kStep;
  for (int r0 = 0; r0 < rows; r0 += kPassRows) {
    const int n = std::min(kPassRows, rows - r0);
    std::memset(acc, 0, sizeof(float) * n * C * 16);
    for (int64_t k0 = 0; k0 < kend; k0 += kChunk) {
      const int64_t k1 = std::min(kend, k0 + kChunk);
      int r = 0;
      for (; r + 4 <= n; r += 4) op.template Tile<4, C>(r0 + r, k0, k1, acc + r * C * 16);
      float* a = acc + r * C * 16;
      switch (n - r) {
        case 3: op.template Tile<3, C>(r0 + r, k0, k1, a); break;
        case 2: op.template Tile<2, C>(r0 + r, k0, k1, a); break;
        case 1: op.template Tile<1, C>(r0 + r, k0, k1, a); break;
        default: break;
      }
    }
    for (int r = 0; r < n; ++r) {
      for (int c = 0; c < C; ++c) y[(r0 + r) * out + c] = _mm512_reduce_add_ps(_mm512_load_ps(acc + (r * C + c) * 16));
    }
  }
}

template <class Op>
STEADY_DOT_TARGET void ColumnRange(const Op& op, int rows, int64_t out, int64_t begin, int64_t end, float* y) {
  int64_t j = begin;
  for (; j + kTileCols <= end; j += kTileCols) Columns<kTileCols>(op.Shift(j), rows, y + j, out);
  for (; j < end; ++j) Columns<1>(op.Shift(j), rows, y + j, out);
}

// Splits y's columns over the compute threads in chunks that are a multiple of the tile width,
// about 4 per thread (as matmul.cc does): no element's arithmetic depends on the split.
template <class Op>
void Run(const Op& op, int rows, int out, float* y) {
  if (int64_t(rows) * op.in * out < kMinParallelWork) return ColumnRange(op, rows, out, 0, out, y);
  const int threads = ComputeThreads();
  const int64_t per_task = std::max<int64_t>(64, (int64_t(out) / (4 * threads) + 63) / 64 * 64);
  const int tasks = int((out + per_task - 1) / per_task);
  ParallelFor(tasks, [&](int t) {
    const int64_t begin = t * per_task;
    ColumnRange(op, rows, out, begin, std::min<int64_t>(out, begin + per_task), y);
  });
}

bool HasAvx512Base() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}

// q8(x) as the kernel reads it: values zero padded to xs per row, scales spread per lane.
struct QuantizedRows {
  std::vector<int8_t> q;
  std::vector<float> lane_scales;
  int64_t xs;
};

QuantizedRows QuantizeRows(const float* x, int rows, int in) {
  const int64_t xs = Padded(in), blocks = Q8BlocksPerRow(in);
  QuantizedRows out{std::vector<int8_t>(size_t(rows * xs), 0), std::vector<float>(size_t(rows * xs / 4), 0.0f), xs};
  std::vector<float> scales(static_cast<size_t>(blocks));
  for (int r = 0; r < rows; ++r) {
    QuantizeQ8(x + int64_t(r) * in, 1, in, out.q.data() + r * xs, scales.data());
    // Lane l of the 16 per 64 values holds the scale of block 2 * (k / 64) + l / 8.
    for (int64_t b = 0; b < blocks; ++b) {
      std::fill_n(out.lane_scales.data() + r * xs / 4 + b * 8, 8, scales[size_t(b)]);
    }
  }
  return out;
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

const char* Bf16DotPath() { return Bf16DotAvailable() ? "avx512_bf16 (VDPBF16PS)" : "widening fp32"; }
const char* Int8DotPath() { return Int8DotAvailable() ? "avx512_vnni (VPDPBUSD)" : "widening fp32"; }

void MatMulNTBf16Dot(const float* x, int rows, int in, const uint16_t* w, int out, float* y) {
  if (!Bf16DotAvailable()) return MatMulNTBf16(x, rows, in, w, out, y);
  const int64_t xs = Padded(in);
  std::vector<uint16_t> xb(size_t(rows * xs), 0);
  for (int r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < in; ++k) xb[size_t(r * xs + k)] = FloatToBf16(x[r * int64_t(in) + k]);
  }
  Run(Bf16Op{xb.data(), xs, w, in}, rows, out, y);
}

void MatMulNTQ8Dot(const float* x, int rows, int in, Q8Weights w, int out, float* y) {
  if (!Int8DotAvailable()) return MatMulNTQ8(x, rows, in, w, out, y);
  const QuantizedRows xq = QuantizeRows(x, rows, in);
  Run(Q8Op{xq.q.data(), xq.lane_scales.data(), xq.xs, w.q, w.scales, in, Q8BlocksPerRow(in)}, rows, out, y);
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

void MatMulNTQ8DotReference(const float* x, int rows, int in, Q8Weights w, int out, float* y) {
  const int64_t blocks = Q8BlocksPerRow(in);
  std::vector<int8_t> xq(static_cast<size_t>(in));
  std::vector<float> xd(static_cast<size_t>(blocks));
  for (int r = 0; r < rows; ++r) {
    QuantizeQ8(x + int64_t(r) * in, 1, in, xq.data(), xd.data());
    for (int j = 0; j < out; ++j) {
      double s = 0;
      for (int k = 0; k < in; ++k) {
        s += double(xq[size_t(k)]) * xd[size_t(k / kQ8Block)] * double(w.q[int64_t(j) * in + k]) *
             w.scales[j * blocks + k / kQ8Block];
      }
      y[int64_t(r) * out + j] = float(s);
    }
  }
}

}  // namespace steady::cpu
