// q4k quantization (llama.cpp's quantize_row_q4_K_ref and make_qkx2_quants, ggml-quants.c, in the
// same arithmetic) and the plain readers and reference product (q4k.h).
#include "kernels/cpu/q4k.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/parallel.h"

namespace steady::cpu {
namespace {

// ggml's nearest_int: round to nearest, ties to even (lrint in the default rounding mode).
int NearestInt(float v) { return int(std::lrint(v)); }

// make_qkx2_quants(32, 15, x, weights, L, &the_min, Laux, -1, 0.1, 20, false): the scale (returned)
// and the minimum (as -min >= 0, in *the_min) of one sub-block, and its q in L.
float FitSubBlock(const float* x, const float* weights, uint8_t* L, float* the_min) {
  constexpr int n = kQ4KSub, nmax = 15, nstep = 20;
  constexpr float rmin = -1.0f, rdelta = 0.1f;
  float min = x[0], max = x[0];
  float sum_w = weights[0], sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    min = std::min(min, x[i]);
    max = std::max(max, x[i]);
    sum_w += weights[i];
    sum_x += weights[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::fill_n(L, n, 0);
    *the_min = -min;
    return 0.0f;
  }
  float iscale = nmax / (max - min), scale = 1 / iscale, best_mad = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::clamp(NearestInt(iscale * (x[i] - min)), 0, nmax);
    L[i] = uint8_t(l);
    const float diff = scale * l + min - x[i];
    best_mad += weights[i] * (diff * diff);
  }
  uint8_t aux[n];
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(NearestInt(iscale * (x[i] - min)), 0, nmax);
      aux[i] = uint8_t(l);
      const float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float mad = 0;
      for (int i = 0; i < n; ++i) {
        const float diff = this_scale * aux[i] + this_min - x[i];
        mad += weights[i] * (diff * diff);
      }
      if (mad < best_mad) {
        std::copy_n(aux, n, L);
        best_mad = mad;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// One super-block of 256 values (zero padded) -> its 128 nibble bytes and scales.
void QuantizeBlock(const float* x, uint8_t* q, Q4KScales* s) {
  uint8_t L[kQ4KBlock];
  float scales[8], mins[8], weights[kQ4KSub], max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    // Each weight is |x| plus the sub-block's rms (not the super-block's: ggml's _ref quantizer).
    float sum_x2 = 0;
    for (int l = 0; l < kQ4KSub; ++l) sum_x2 += x[kQ4KSub * j + l] * x[kQ4KSub * j + l];
    const float av_x = std::sqrt(sum_x2 / kQ4KSub);
    for (int l = 0; l < kQ4KSub; ++l) weights[l] = av_x + std::fabs(x[kQ4KSub * j + l]);
    scales[j] = FitSubBlock(x + kQ4KSub * j, weights, L + kQ4KSub * j, &mins[j]);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  for (int j = 0; j < 8; ++j) {
    s->sc[j] = uint8_t(std::min(63, NearestInt(inv_scale * scales[j])));
    s->m[j] = uint8_t(std::min(63, NearestInt(inv_min * mins[j])));
  }
  s->d = FloatToF16(max_scale / 63.0f);
  s->dmin = FloatToF16(max_min / 63.0f);
  const float d = F16ToFloat(s->d), dmin = F16ToFloat(s->dmin);
  for (int j = 0; j < 8; ++j) {
    const float dj = d * s->sc[j], dm = dmin * s->m[j];
    if (dj == 0.0f) continue;  // ggml leaves such a sub-block's q as the fit left them
    for (int ii = 0; ii < kQ4KSub; ++ii) {
      L[kQ4KSub * j + ii] = uint8_t(std::clamp(NearestInt((x[kQ4KSub * j + ii] + dm) / dj), 0, 15));
    }
  }
  for (int j = 0; j < 8; ++j) {
    for (int i = 0; i < 16; ++i) q[16 * j + i] = uint8_t(L[32 * j + i] | (L[32 * j + 16 + i] << 4));
  }
}

}  // namespace

// What ggml's GGML_FP32_TO_FP16 does with F16C.
uint16_t FloatToF16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t abs = x & 0x7fffffff;
  if (abs >= 0x7f800000) return uint16_t(sign | 0x7c00 | (abs > 0x7f800000 ? 0x200 : 0));
  if (abs >= 0x477ff000) return uint16_t(sign | 0x7c00);  // rounds past 65504: infinity
  if (abs < 0x38800000) {  // a half subnormal (or zero): round abs / 2^-24 to an integer
    const float scaled = std::ldexp(std::fabs(f), 24);
    return uint16_t(sign | uint32_t(std::nearbyint(scaled)));
  }
  const uint32_t mant = abs & 0x7fffff;
  uint32_t h = ((abs >> 23) - 112) << 10 | (mant >> 13);
  const uint32_t rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
  return uint16_t(sign | h);
}

void QuantizeQ4K(const float* w, int64_t rows, int in, uint8_t* q, Q4KScales* scales) {
  const int64_t blocks = Q4KBlocksPerRow(in);
  ParallelFor(int(rows), [&](int r) {
    float x[kQ4KBlock];
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t k0 = b * kQ4KBlock, n = std::min<int64_t>(kQ4KBlock, in - k0);
      std::fill(std::copy_n(w + r * int64_t(in) + k0, n, x), x + kQ4KBlock, 0.0f);
      QuantizeBlock(x, q + (r * blocks + b) * (kQ4KBlock / 2), scales + r * blocks + b);
    }
  });
}

Q4KParts Q4KWeightParts(Q4KWeights w, int64_t in, int64_t j, int64_t k) {
  const int64_t blocks = Q4KBlocksPerRow(in), b = k / kQ4KBlock, s = (k % kQ4KBlock) / kQ4KSub, i = k % kQ4KSub;
  const Q4KScales& sc = w.scales[j * blocks + b];
  const uint8_t byte = w.q[(j * blocks + b) * (kQ4KBlock / 2) + 16 * s + i % 16];
  const int q = i < 16 ? byte & 15 : byte >> 4;
  return {F16ToFloat(sc.d) * sc.sc[s] * float(q), F16ToFloat(sc.dmin) * sc.m[s]};
}

float Q4KWeightValue(Q4KWeights w, int64_t in, int64_t j, int64_t k) {
  const Q4KParts p = Q4KWeightParts(w, in, j, k);
  return p.scaled - p.min;
}

void DequantizeQ4K(Q4KWeights w, int64_t in, int64_t r0, int64_t r1, float* out) {
  for (int64_t j = r0; j < r1; ++j) {
    for (int64_t k = 0; k < in; ++k) out[(j - r0) * in + k] = Q4KWeightValue(w, in, j, k);
  }
}

void MatMulNTQ4KReference(const float* x, int rows, int in, Q4KWeights w, int out, float* y) {
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < out; ++j) {
      double s = 0;
      for (int k = 0; k < in; ++k) s += double(x[int64_t(r) * in + k]) * Q4KWeightValue(w, in, j, k);
      y[int64_t(r) * out + j] = float(s);
    }
  }
}

}  // namespace steady::cpu
