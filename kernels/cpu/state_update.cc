#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/state_update.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/state_update.h"  // the scalar references the lanes equal
#include "kernels/host_device.h"
#include "kernels/sliced_bins_math.h"

HWY_BEFORE_NAMESPACE();
namespace steady::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void KahanAxpyLanes(float x, const float* HWY_RESTRICT v, float* HWY_RESTRICT row, float* HWY_RESTRICT comp, int n) {
  const hn::ScalableTag<float> d;
  const int lanes = int(hn::Lanes(d));
  const auto xv = hn::Set(d, x);
  int i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto p = hn::Mul(xv, hn::LoadU(d, v + i));
    const auto sum = hn::LoadU(d, row + i);
    auto c = hn::LoadU(d, comp + i);
    const auto t = hn::Add(sum, p);
    // KahanAdd: the lost part of the larger operand's sum with the smaller.
    const auto big = hn::Ge(hn::Abs(sum), hn::Abs(p));
    c = hn::Add(c, hn::IfThenElse(big, hn::Add(hn::Sub(sum, t), p), hn::Add(hn::Sub(p, t), sum)));
    const auto s = hn::Add(t, c);
    c = hn::Sub(c, hn::Sub(s, t));
    hn::StoreU(s, d, row + i);
    hn::StoreU(c, d, comp + i);
  }
  for (; i < n; ++i) KahanAdd(row[i], comp[i], x * v[i]);
}

void AxpyLanes(float x, const float* HWY_RESTRICT v, float* HWY_RESTRICT row, int n) {
  const hn::ScalableTag<float> d;
  const int lanes = int(hn::Lanes(d));
  const auto xv = hn::Set(d, x);
  int i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(hn::Add(hn::LoadU(d, row + i), hn::Mul(xv, hn::LoadU(d, v + i))), d, row + i);
  }
  for (; i < n; ++i) row[i] += x * v[i];
}

// Up to kMaxGroup queries' weights in registers; larger groups go in passes.
constexpr int kMaxGroup = 8;

// ReadRows for queries [i0, i0 + G) and the kVecs vectors of columns from d0: their sums stay in
// registers over every row; each lane does ReadRowReference's operations (r = row + comp, out + w * r)
// row by row in order, so the bits are its.
template <int G, int kVecs>
HWY_INLINE void ReadRowsTile(int m, int dv, int i0, int d0, const float* HWY_RESTRICT w, int64_t w_stride, float factor,
                             const float* HWY_RESTRICT sums, const float* HWY_RESTRICT comp, float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> d;
  const int lanes = int(hn::Lanes(d));
  hn::Vec<decltype(d)> acc[G][kVecs];
  for (int i = 0; i < G; ++i) {
    for (int v = 0; v < kVecs; ++v) acc[i][v] = hn::LoadU(d, out + (i0 + i) * dv + d0 + v * lanes);
  }
  for (int f = 0; f < m; ++f) {
    const float* row = sums + int64_t(f) * dv + d0;
    hn::Vec<decltype(d)> r[kVecs];
    for (int v = 0; v < kVecs; ++v) r[v] = hn::LoadU(d, row + v * lanes);
    if (comp != nullptr) {
      for (int v = 0; v < kVecs; ++v) r[v] = hn::Add(r[v], hn::LoadU(d, comp + int64_t(f) * dv + d0 + v * lanes));
    }
    for (int i = 0; i < G; ++i) {
      const auto wv = hn::Set(d, w[(i0 + i) * w_stride + f] * factor);
      for (int v = 0; v < kVecs; ++v) acc[i][v] = hn::Add(acc[i][v], hn::Mul(wv, r[v]));
    }
  }
  for (int i = 0; i < G; ++i) {
    for (int v = 0; v < kVecs; ++v) hn::StoreU(acc[i][v], d, out + (i0 + i) * dv + d0 + v * lanes);
  }
}

void ReadRowsLanes(int m, int dv, int group, const float* HWY_RESTRICT w, int64_t w_stride, float factor,
                   const float* HWY_RESTRICT sums, const float* HWY_RESTRICT comp, float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> d;
  const int lanes = int(hn::Lanes(d));
  // 4 queries x 2 vectors of sums in registers (8, with 2 of the rows and a weight: 11 of the 16
  // registers AVX2 has).
  constexpr int kG = 4, kVecs = 2;
  int d0 = 0;
  for (; d0 + kVecs * lanes <= dv; d0 += kVecs * lanes) {
    int i0 = 0;
    for (; i0 + kG <= group; i0 += kG) ReadRowsTile<kG, kVecs>(m, dv, i0, d0, w, w_stride, factor, sums, comp, out);
    for (; i0 < group; ++i0) ReadRowsTile<1, kVecs>(m, dv, i0, d0, w, w_stride, factor, sums, comp, out);
  }
  for (; d0 + lanes <= dv; d0 += lanes) {
    for (int i0 = 0; i0 < group; ++i0) ReadRowsTile<1, 1>(m, dv, i0, d0, w, w_stride, factor, sums, comp, out);
  }
  if (d0 == dv) return;
  for (int f = 0; f < m; ++f) {  // the columns past the last whole vector
    for (int i = 0; i < group; ++i) {
      ReadRowReference<float>(w[i * w_stride + f] * factor, sums + int64_t(f) * dv + d0,
                              comp != nullptr ? comp + int64_t(f) * dv + d0 : nullptr, out + i * dv + d0, dv - d0);
    }
  }
}

void ReadRowGroupLanes(const float* HWY_RESTRICT w, int64_t w_stride, int group, const float* HWY_RESTRICT row,
                       const float* HWY_RESTRICT comp, double* HWY_RESTRICT out, int n) {
  const hn::ScalableTag<double> d;
  const hn::Rebind<float, decltype(d)> df;
  const int lanes = int(hn::Lanes(d));
  for (int i0 = 0; i0 < group; i0 += kMaxGroup) {
    const int g = std::min(kMaxGroup, group - i0);
    hn::Vec<decltype(d)> wv[kMaxGroup];
    for (int i = 0; i < g; ++i) wv[i] = hn::Set(d, double(w[(i0 + i) * w_stride]));
    int k = 0;
    for (; k + lanes <= n; k += lanes) {
      auto r = hn::PromoteTo(d, hn::LoadU(df, row + k));
      if (comp != nullptr) r = hn::Add(r, hn::PromoteTo(d, hn::LoadU(df, comp + k)));
      for (int i = 0; i < g; ++i) {
        double* o = out + (i0 + i) * n + k;
        hn::StoreU(hn::Add(hn::LoadU(d, o), hn::Mul(wv[i], r)), d, o);
      }
    }
    for (; k < n; ++k) {
      double r = double(row[k]);
      if (comp != nullptr) r += double(comp[k]);
      for (int i = 0; i < g; ++i) out[(i0 + i) * n + k] += double(w[(i0 + i) * w_stride]) * r;
    }
  }
}

void ExpFeaturesLanes(float* HWY_RESTRICT x, int n, float shift, float scale) {
  const hn::ScalableTag<float> d;
  const int lanes = int(hn::Lanes(d));
  const auto sh = hn::Set(d, shift), sc = hn::Set(d, scale);
  int i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(hn::Mul(hn::Exp(d, hn::Sub(hn::LoadU(d, x + i), sh)), sc), d, x + i);
  for (; i < n; ++i) x[i] = std::exp(x[i] - shift) * scale;
}

float MaxOfLanes(const float* HWY_RESTRICT x, int n) {
  const hn::ScalableTag<float> d;
  const int lanes = int(hn::Lanes(d));
  float top = x[0];
  int i = 0;
  if (n >= lanes) {
    auto a = hn::LoadU(d, x);
    for (i = lanes; i + lanes <= n; i += lanes) a = hn::Max(a, hn::LoadU(d, x + i));
    top = hn::GetLane(hn::MaxOfLanes(d, a));
  }
  for (; i < n; ++i) top = std::max(top, x[i]);
  return top;
}

// out[i] = ReadSum(sums + i, comps + i), or with kAdd out[i] + that (WidenSums, AddWidenedSums).
template <bool kAdd>
void WidenSumsInto(const float* HWY_RESTRICT sums, const float* HWY_RESTRICT comps, double* HWY_RESTRICT out,
                   int n) {
  const hn::ScalableTag<double> d;
  const hn::Rebind<float, decltype(d)> df;
  const int lanes = int(hn::Lanes(d));
  int i = 0;
  for (; i + lanes <= n; i += lanes) {
    auto v = hn::PromoteTo(d, hn::LoadU(df, sums + i));
    if (comps != nullptr) v = hn::Add(v, hn::PromoteTo(d, hn::LoadU(df, comps + i)));
    if constexpr (kAdd) v = hn::Add(hn::LoadU(d, out + i), v);
    hn::StoreU(v, d, out + i);
  }
  for (; i < n; ++i) {
    const double v = comps != nullptr ? double(sums[i]) + double(comps[i]) : double(sums[i]);
    out[i] = kAdd ? out[i] + v : v;
  }
}
void WidenSumsLanes(const float* HWY_RESTRICT sums, const float* HWY_RESTRICT comps, double* HWY_RESTRICT out,
                    int n) {
  WidenSumsInto<false>(sums, comps, out, n);
}
void AddWidenedSumsLanes(const float* HWY_RESTRICT sums, const float* HWY_RESTRICT comps,
                         double* HWY_RESTRICT running, int n) {
  WidenSumsInto<true>(sums, comps, running, n);
}

// AddToSum lane by lane: KahanAdd in double on the widened pair, then StoreSum's rounding to fp32.
void AddRowToSumsLanes(const double* HWY_RESTRICT x, float* HWY_RESTRICT sums, float* HWY_RESTRICT comps, int n) {
  const hn::ScalableTag<double> d;
  const hn::Rebind<float, decltype(d)> df;
  const int lanes = int(hn::Lanes(d));
  int i = 0;
  if (comps == nullptr) {
    for (; i + lanes <= n; i += lanes) {
      const auto s = hn::Add(hn::PromoteTo(d, hn::LoadU(df, sums + i)), hn::LoadU(d, x + i));
      hn::StoreU(hn::DemoteTo(df, s), df, sums + i);
    }
    for (; i < n; ++i) sums[i] = float(double(sums[i]) + x[i]);
    return;
  }
  for (; i + lanes <= n; i += lanes) {
    const auto xv = hn::LoadU(d, x + i);
    const auto hi = hn::PromoteTo(d, hn::LoadU(df, sums + i));
    auto lo = hn::PromoteTo(d, hn::LoadU(df, comps + i));
    const auto t = hn::Add(hi, xv);
    const auto big = hn::Ge(hn::Abs(hi), hn::Abs(xv));
    lo = hn::Add(lo, hn::IfThenElse(big, hn::Add(hn::Sub(hi, t), xv), hn::Add(hn::Sub(xv, t), hi)));
    const auto s = hn::Add(t, lo);
    lo = hn::Sub(lo, hn::Sub(s, t));
    // StoreSum: sum = fp32(s'), comp = fp32((s' - sum) + lo) where s' = s + lo is KahanAdd's new hi.
    const auto whole = hn::Add(s, lo);
    const auto sum32 = hn::DemoteTo(df, whole);
    const auto rest = hn::Add(hn::Sub(s, hn::PromoteTo(d, sum32)), lo);
    hn::StoreU(sum32, df, sums + i);
    hn::StoreU(hn::DemoteTo(df, rest), df, comps + i);
  }
  for (; i < n; ++i) AddToSum(x[i], sums + i, comps + i);
}

}  // namespace HWY_NAMESPACE
}  // namespace steady::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/cpu/state_update.h"

namespace steady::cpu {

HWY_EXPORT(KahanAxpyLanes);
HWY_EXPORT(AxpyLanes);
HWY_EXPORT(ReadRowGroupLanes);
HWY_EXPORT(ReadRowsLanes);
HWY_EXPORT(WidenSumsLanes);
HWY_EXPORT(AddWidenedSumsLanes);
HWY_EXPORT(ExpFeaturesLanes);
HWY_EXPORT(MaxOfLanes);
HWY_EXPORT(AddRowToSumsLanes);

void KahanAxpy(float x, const float* v, float* row, float* comp, int n) {
  HWY_DYNAMIC_DISPATCH(KahanAxpyLanes)(x, v, row, comp, n);
}

void Axpy(float x, const float* v, float* row, int n) { HWY_DYNAMIC_DISPATCH(AxpyLanes)(x, v, row, n); }

void ReadRows(int m, int dv, int group, const float* w, int64_t w_stride, float factor, const float* sums,
              const float* comp, float* out) {
  HWY_DYNAMIC_DISPATCH(ReadRowsLanes)(m, dv, group, w, w_stride, factor, sums, comp, out);
}

void ExpFeatures(float* x, int n, float shift, float scale) {
  HWY_DYNAMIC_DISPATCH(ExpFeaturesLanes)(x, n, shift, scale);
}

float MaxOf(const float* x, int n) { return HWY_DYNAMIC_DISPATCH(MaxOfLanes)(x, n); }

void WidenSums(const float* sums, const float* comps, double* out, int n) {
  HWY_DYNAMIC_DISPATCH(WidenSumsLanes)(sums, comps, out, n);
}

void AddWidenedSums(const float* sums, const float* comps, double* running, int n) {
  HWY_DYNAMIC_DISPATCH(AddWidenedSumsLanes)(sums, comps, running, n);
}

void AddRowToSums(const double* x, float* sums, float* comps, int n) {
  HWY_DYNAMIC_DISPATCH(AddRowToSumsLanes)(x, sums, comps, n);
}

void ReadRowGroup(const float* w, int64_t w_stride, int group, const float* row, const float* comp, double* out,
                  int n) {
  HWY_DYNAMIC_DISPATCH(ReadRowGroupLanes)(w, w_stride, group, row, comp, out, n);
}

}  // namespace steady::cpu
#endif  // HWY_ONCE
