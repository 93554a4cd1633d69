// q4k quantization (q4k.h): llama.cpp's quantize_row_q4_K_ref and make_qkx2_quants (ggml-quants.c)
// in the same arithmetic. QuantizeQ4KReference is the plain copy, one sub-block after another;
// QuantizeQ4K fits a vector's worth of sub-blocks at once, one per lane (Highway, run-time
// dispatch), each lane doing the plain copy's operations in its order, so the two give the same
// bytes (tested). The fit is nearly all of the work: a first rounding, then 21 trial scales of two
// passes each over the sub-block's 32 values.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/q4k_quantize.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/aligned_allocator.h>
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/q4k.h"

#ifndef STEADY_KERNELS_CPU_Q4K_QUANTIZE_ONCE
#define STEADY_KERNELS_CPU_Q4K_QUANTIZE_ONCE
namespace steady::cpu::q4k_fit {

// make_qkx2_quants(32, 15, x, weights, L, &the_min, Laux, -1, 0.1, 20, false)'s constants.
inline constexpr int kNmax = 15, kSteps = 20;
inline constexpr float kRmin = -1.0f, kRdelta = 0.1f;
// The trial inverse scale's numerator at step `is`, rounded as ggml's float expression does.
inline float TrialNumerator(int is) { return kRmin + kRdelta * float(is) + float(kNmax); }
// ggml's nearest_int: round to nearest even through the float's mantissa (exact for |v| < 2^22;
// beyond, and for inf and NaN, what ggml's bits give, so that every input quantizes as ggml's does).
inline int NearestInt(float v) {
  const float shifted = v + 12582912.0f;
  int32_t bits;
  std::memcpy(&bits, &shifted, 4);
  return (bits & 0x007fffff) - 0x00400000;
}

}  // namespace steady::cpu::q4k_fit
#endif

HWY_BEFORE_NAMESPACE();
namespace steady::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Fits Lanes(d) sub-blocks at once. xt[i * N + lane] is value i of lane's sub-block; per lane,
// scale, min (as -min >= 0) and q (lt[i * N + lane]) as FitSubBlock gives them.
void FitSubBlocksLanes(const float* HWY_RESTRICT xt, float* HWY_RESTRICT scale_out, float* HWY_RESTRICT min_out,
                       int32_t* HWY_RESTRICT lt) {
  using namespace q4k_fit;
  constexpr hn::ScalableTag<float> d;
  constexpr hn::RebindToSigned<decltype(d)> di;
  const size_t N = hn::Lanes(d);
  constexpr int n = kQ4KSub;
  const auto zero = hn::Zero(d);
  const auto nmax = hn::Set(di, kNmax);
  const auto izero = hn::Zero(di);
  // ggml's nearest_int, lane-wise, clamped to 0..15.
  const auto magic = hn::Set(d, 12582912.0f);
  const auto mantissa = hn::Set(di, 0x007fffff), offset = hn::Set(di, 0x00400000);
  const auto quantize = [&](hn::Vec<decltype(d)> v) {
    const auto l = hn::Sub(hn::And(hn::BitCast(di, hn::Add(v, magic)), mantissa), offset);
    return hn::Max(izero, hn::Min(nmax, l));
  };
  HWY_ALIGN float w[n * hn::MaxLanes(d)];  // the weights, [i][lane]
  HWY_ALIGN int32_t aux[n * hn::MaxLanes(di)];  // a trial's q, [i][lane]

  // weights: |x| + the sub-block's rms
  auto sum_x2 = zero;
  for (int i = 0; i < n; ++i) {
    const auto x = hn::Load(d, xt + i * N);
    sum_x2 = hn::Add(sum_x2, hn::Mul(x, x));
  }
  const auto av_x = hn::Sqrt(hn::Div(sum_x2, hn::Set(d, float(n))));
  for (int i = 0; i < n; ++i) hn::Store(hn::Add(av_x, hn::Abs(hn::Load(d, xt + i * N))), d, w + i * N);

  auto x0 = hn::Load(d, xt), min = x0, max = x0, sum_w = hn::Load(d, w), sum_x = hn::Mul(sum_w, x0);
  for (int i = 1; i < n; ++i) {
    const auto x = hn::Load(d, xt + i * N), wi = hn::Load(d, w + i * N);
    min = hn::IfThenElse(hn::Lt(x, min), x, min);
    max = hn::IfThenElse(hn::Gt(x, max), x, max);
    sum_w = hn::Add(sum_w, wi);
    sum_x = hn::Add(sum_x, hn::Mul(wi, x));
  }
  min = hn::IfThenElse(hn::Gt(min, zero), zero, min);
  const auto flat = hn::Eq(max, min);  // such a lane's q are 0, its scale 0, its min this one
  const auto flat_min = min;
  auto iscale = hn::Div(hn::Set(d, float(kNmax)), hn::Sub(max, min));
  auto scale = hn::Div(hn::Set(d, 1.0f), iscale);
  auto best_mad = zero;
  for (int i = 0; i < n; ++i) {
    const auto x = hn::Load(d, xt + i * N);
    const auto l = quantize(hn::Mul(iscale, hn::Sub(x, min)));
    hn::Store(l, di, lt + i * N);
    const auto diff = hn::Sub(hn::Add(hn::Mul(scale, hn::ConvertTo(d, l)), min), x);
    best_mad = hn::Add(best_mad, hn::Mul(hn::Load(d, w + i * N), hn::Mul(diff, diff)));
  }
  for (int is = 0; is <= kSteps; ++is) {
    iscale = hn::Div(hn::Set(d, TrialNumerator(is)), hn::Sub(max, min));
    auto sum_l = zero, sum_l2 = zero, sum_xl = zero;
    for (int i = 0; i < n; ++i) {
      const auto x = hn::Load(d, xt + i * N), wi = hn::Load(d, w + i * N);
      const auto l = quantize(hn::Mul(iscale, hn::Sub(x, min)));
      hn::Store(l, di, aux + i * N);
      const auto lf = hn::ConvertTo(d, l), wl = hn::Mul(wi, lf);
      sum_l = hn::Add(sum_l, wl);
      sum_l2 = hn::Add(sum_l2, hn::Mul(wl, lf));
      sum_xl = hn::Add(sum_xl, hn::Mul(wl, x));
    }
    const auto D = hn::Sub(hn::Mul(sum_w, sum_l2), hn::Mul(sum_l, sum_l));
    const auto solvable = hn::Gt(D, zero);
    if (hn::AllFalse(d, solvable)) continue;
    auto this_scale = hn::Div(hn::Sub(hn::Mul(sum_w, sum_xl), hn::Mul(sum_x, sum_l)), D);
    auto this_min = hn::Div(hn::Sub(hn::Mul(sum_l2, sum_x), hn::Mul(sum_l, sum_xl)), D);
    const auto positive = hn::Gt(this_min, zero);
    this_min = hn::IfThenElse(positive, zero, this_min);
    this_scale = hn::IfThenElse(positive, hn::Div(sum_xl, sum_l2), this_scale);
    auto mad = zero;
    for (int i = 0; i < n; ++i) {
      const auto x = hn::Load(d, xt + i * N);
      const auto diff = hn::Sub(hn::Add(hn::Mul(this_scale, hn::ConvertTo(d, hn::Load(di, aux + i * N))), this_min), x);
      mad = hn::Add(mad, hn::Mul(hn::Load(d, w + i * N), hn::Mul(diff, diff)));
    }
    const auto better = hn::And(solvable, hn::Lt(mad, best_mad));
    if (hn::AllFalse(d, better)) continue;
    const auto better_i = hn::RebindMask(di, better);
    for (int i = 0; i < n; ++i) {
      hn::Store(hn::IfThenElse(better_i, hn::Load(di, aux + i * N), hn::Load(di, lt + i * N)), di, lt + i * N);
    }
    best_mad = hn::IfThenElse(better, mad, best_mad);
    scale = hn::IfThenElse(better, this_scale, scale);
    min = hn::IfThenElse(better, this_min, min);
  }
  const auto flat_i = hn::RebindMask(di, flat);
  for (int i = 0; i < n; ++i) hn::Store(hn::IfThenZeroElse(flat_i, hn::Load(di, lt + i * N)), di, lt + i * N);
  hn::Store(hn::IfThenElse(flat, zero, scale), d, scale_out);
  hn::Store(hn::Neg(hn::IfThenElse(flat, flat_min, min)), d, min_out);
}

size_t FitLanes() { return hn::Lanes(hn::ScalableTag<float>()); }

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace steady::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace steady::cpu {
namespace {
using namespace q4k_fit;

HWY_EXPORT(FitSubBlocksLanes);
HWY_EXPORT(FitLanes);

// make_qkx2_quants(32, 15, x, weights, L, &the_min, Laux, -1, 0.1, 20, false): the scale (returned)
// and the minimum (as -min >= 0, in *the_min) of one sub-block, and its q in L. Weights |x| + the
// sub-block's rms, as quantize_row_q4_K_ref gives them.
float FitSubBlock(const float* x, uint8_t* L, float* the_min) {
  constexpr int n = kQ4KSub;
  float sum_x2 = 0;
  for (int i = 0; i < n; ++i) sum_x2 += x[i] * x[i];
  const float av_x = std::sqrt(sum_x2 / n);
  float weights[n];
  for (int i = 0; i < n; ++i) weights[i] = av_x + std::fabs(x[i]);

  float min = x[0], max = x[0];
  float sum_w = weights[0], sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += weights[i];
    sum_x += weights[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::fill_n(L, n, 0);
    *the_min = -min;
    return 0.0f;
  }
  float iscale = kNmax / (max - min), scale = 1 / iscale, best_mad = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::clamp(NearestInt(iscale * (x[i] - min)), 0, kNmax);
    L[i] = uint8_t(l);
    const float diff = scale * l + min - x[i];
    best_mad += weights[i] * (diff * diff);
  }
  uint8_t aux[n];
  for (int is = 0; is <= kSteps; ++is) {
    iscale = TrialNumerator(is) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(NearestInt(iscale * (x[i] - min)), 0, kNmax);
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

// One super-block (x: 256 values, zero padded) from its 8 sub-blocks' fits (scales, mins, L): the
// 6-bit scales and minimums against their largest, d and dmin in fp16, every q rounded against
// them, then the block's bytes as ggml's quantize_row_q4_K_ref packs them.
void FinishBlock(const float* x, const float* scales, const float* mins, uint8_t* L, uint8_t* block) {
  Q4KScales s;
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  for (int j = 0; j < 8; ++j) {
    s.sc[j] = uint8_t(std::min(63, int(uint8_t(NearestInt(inv_scale * scales[j])))));
    s.m[j] = uint8_t(std::min(63, int(uint8_t(NearestInt(inv_min * mins[j])))));
  }
  s.d = FloatToF16(max_scale / 63.0f);
  s.dmin = FloatToF16(max_min / 63.0f);
  const float d = F16ToFloat(s.d), dmin = F16ToFloat(s.dmin);
  for (int j = 0; j < 8; ++j) {
    const float dj = d * s.sc[j], dm = dmin * s.m[j];
    if (dj == 0.0f) continue;  // ggml leaves such a sub-block's q as the fit left them
    for (int ii = 0; ii < kQ4KSub; ++ii) {
      L[kQ4KSub * j + ii] = uint8_t(std::clamp(NearestInt((x[kQ4KSub * j + ii] + dm) / dj), 0, 15));
    }
  }
  std::memcpy(block, &s.d, 2);
  std::memcpy(block + 2, &s.dmin, 2);
  uint8_t* packed = block + 4;  // the inverse of get_scale_min_k4
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      packed[j] = s.sc[j];
      packed[j + 4] = s.m[j];
    } else {
      packed[j + 4] = uint8_t((s.sc[j] & 0x0F) | ((s.m[j] & 0x0F) << 4));
      packed[j - 4] |= uint8_t((s.sc[j] >> 4) << 6);
      packed[j] |= uint8_t((s.m[j] >> 4) << 6);
    }
  }
  for (int j = 0; j < 4; ++j) {  // sub-blocks 2j and 2j + 1 in the low and high nibbles of 32 bytes
    for (int l = 0; l < 32; ++l) block[16 + 32 * j + l] = uint8_t(L[64 * j + l] | (L[64 * j + 32 + l] << 4));
  }
}

}  // namespace

void FitQ4KSubBlocksReference(const float* x, int64_t subs, float* scales, float* mins, uint8_t* q) {
  for (int64_t j = 0; j < subs; ++j) scales[j] = FitSubBlock(x + j * kQ4KSub, q + j * kQ4KSub, &mins[j]);
}

void FitQ4KSubBlocks(const float* x, int64_t subs, float* scales, float* mins, uint8_t* q) {
  const int64_t lanes = int64_t(HWY_DYNAMIC_DISPATCH(FitLanes)());
  auto xt = hwy::AllocateAligned<float>(size_t(lanes * kQ4KSub));  // a group of sub-blocks, [i][lane]
  auto lt = hwy::AllocateAligned<int32_t>(size_t(lanes * kQ4KSub));
  auto group_scales = hwy::AllocateAligned<float>(size_t(lanes));
  auto group_mins = hwy::AllocateAligned<float>(size_t(lanes));
  for (int64_t j0 = 0; j0 < subs; j0 += lanes) {
    const int64_t n = std::min(lanes, subs - j0);
    for (int64_t lane = 0; lane < lanes; ++lane) {  // lanes past the last sub-block fit zeros
      for (int i = 0; i < kQ4KSub; ++i) xt[size_t(i * lanes + lane)] = lane < n ? x[(j0 + lane) * kQ4KSub + i] : 0.0f;
    }
    HWY_DYNAMIC_DISPATCH(FitSubBlocksLanes)(xt.get(), group_scales.get(), group_mins.get(), lt.get());
    for (int64_t lane = 0; lane < n; ++lane) {
      scales[j0 + lane] = group_scales[size_t(lane)];
      mins[j0 + lane] = group_mins[size_t(lane)];
      for (int i = 0; i < kQ4KSub; ++i) q[(j0 + lane) * kQ4KSub + i] = uint8_t(lt[size_t(i * lanes + lane)]);
    }
  }
}

namespace {

// Rows of w to q4k, each fitted by `fit` (FitQ4KSubBlocks or its reference), `parallel` over the
// compute threads or on the calling one.
template <typename Fit>
void Quantize(const float* w, int64_t rows, int in, uint8_t* out, bool parallel, Fit fit) {
  const int64_t blocks = Q4KBlocksPerRow(in), subs = blocks * 8;
  const auto row = [&](int r) {
    std::vector<float> x(static_cast<size_t>(blocks * kQ4KBlock)), sub_scales(static_cast<size_t>(subs)),
        sub_mins(static_cast<size_t>(subs));
    std::vector<uint8_t> L(size_t(blocks * kQ4KBlock));
    std::fill(std::copy_n(w + r * int64_t(in), in, x.data()), x.data() + x.size(), 0.0f);  // zero padded
    fit(x.data(), subs, sub_scales.data(), sub_mins.data(), L.data());
    for (int64_t b = 0; b < blocks; ++b) {
      FinishBlock(x.data() + b * kQ4KBlock, sub_scales.data() + b * 8, sub_mins.data() + b * 8,
                  L.data() + b * kQ4KBlock, out + (r * blocks + b) * kQ4KBlockBytes);
    }
  };
  if (parallel) {
    ParallelFor(int(rows), row);
  } else {
    for (int64_t r = 0; r < rows; ++r) row(int(r));
  }
}

}  // namespace

void QuantizeQ4K(const float* w, int64_t rows, int in, uint8_t* blocks) {
  Quantize(w, rows, in, blocks, /*parallel=*/true, FitQ4KSubBlocks);
}

void QuantizeQ4KReference(const float* w, int64_t rows, int in, uint8_t* blocks) {
  Quantize(w, rows, in, blocks, /*parallel=*/false, FitQ4KSubBlocksReference);
}

}  // namespace steady::cpu
#endif  // HWY_ONCE
