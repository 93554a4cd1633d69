// The scalar arithmetic of the sliced mechanisms' bucketed decoder (model/mechanisms/sliced_bins.h
// describes the method), shared by the CPU path and the CUDA kernel (kernels/cuda/sliced.cu) so that
// both compute one function with the same operations in the same order: the bins, running sums kept
// in T beside an optional compensation, Welford's variance update, and the two point masses that
// stand in for the bin holding a query point.
#ifndef STEADY_KERNELS_SLICED_BINS_MATH_H_
#define STEADY_KERNELS_SLICED_BINS_MATH_H_

#include <cmath>
#include <cstddef>
#include <type_traits>

#include "kernels/host_device.h"

namespace steady {

// Moments of a set of keys, the unit both sliced decoders store: count, sum z, sum v [dv], sum z v [dv].
// Layout of a moment vector (2 * dv + 2 values): [count, sum_z, sum_v[0..dv), sum_zv[0..dv)].
STEADY_HOST_DEVICE inline int SlicedMomentCount(int value_dim) { return 2 * value_dim + 2; }

struct SlicedBinsLayout {
  int bins = 64;
  double z_min = -4.0;
  double z_max = 4.0;
  int value_dim = 0;
  bool compensated = false;

  // Values per bin: the moments and M2 = sum (z - bin mean)^2.
  STEADY_HOST_DEVICE int BinFloats() const { return SlicedMomentCount(value_dim) + 1; }
  STEADY_HOST_DEVICE size_t HeadFloats() const {
    return size_t(bins + 2) * BinFloats() * (compensated ? 2 : 1) + 2;
  }
};

// A running sum stored in T, optionally with a compensation term beside it (comp == nullptr: plain).
// Compensated pairs are updated in double: for T = float the pair (sum, comp) then holds the sum to
// about 2^-48 relative, so a key's z * v product is not rounded to float before it is added.
template <typename T>
STEADY_HOST_DEVICE inline double ReadSum(const T* sum, const T* comp) {
  return comp ? double(*sum) + double(*comp) : double(*sum);
}

template <typename T>
STEADY_HOST_DEVICE inline void StoreSum(double hi, double lo, T* sum, T* comp) {
  if (!comp) {
    *sum = T(hi + lo);
  } else if constexpr (std::is_same_v<T, double>) {
    *sum = hi;
    *comp = lo;
  } else {
    const double s = hi + lo;
    *sum = T(s);
    *comp = T((hi - double(*sum)) + lo);
  }
}

template <typename T>
STEADY_HOST_DEVICE inline void AddToSum(double x, T* sum, T* comp) {
  if (!comp) {
    *sum = T(double(*sum) + x);
    return;
  }
  double hi = double(*sum), lo = double(*comp);
  KahanAdd(hi, lo, x);
  StoreSum(hi, lo, sum, comp);
}

namespace sliced_bins {

// Relative resolution of a head's stored sums (a spread below it counts as 0): compensated float
// pairs hold ~48 bits, plain sums the precision of T.
template <typename T>
STEADY_HOST_DEVICE inline double Resolution(bool compensated) {
  return std::is_same_v<T, double> ? 0x1p-52 : compensated ? 0x1p-48 : 0x1p-23;
}

// Bin of score z in z order: 0 left tail, 1..bins interior, bins + 1 right tail. Keys and queries use
// the same function, so "entirely below" is consistent; NaN lands in the left tail.
STEADY_HOST_DEVICE inline int BinOf(const SlicedBinsLayout& layout, double z) {
  if (!(z >= layout.z_min)) return 0;
  if (z >= layout.z_max) return layout.bins + 1;
  const double u = (z - layout.z_min) / (layout.z_max - layout.z_min) * layout.bins;
  const int i = int(u);
  return 1 + (i < 0 ? 0 : i > layout.bins - 1 ? layout.bins - 1 : i);
}

// Left edge of interior bin i (i = bins + 1 gives z_max).
STEADY_HOST_DEVICE inline double EdgeBelow(const SlicedBinsLayout& layout, int i) {
  return layout.z_min + (layout.z_max - layout.z_min) * double(i - 1) / layout.bins;
}

// Welford: what a key at z adds to its bin's M2, given the bin's count and sum z before it.
STEADY_HOST_DEVICE inline double WelfordIncrement(double count, double sum_z, double z) {
  const double old_mean = count > 0 ? sum_z / count : z;
  return (z - old_mean) * (z - (sum_z + z) / (count + 1));
}

// Two point masses standing in for one bin's keys: `ca` keys at `a`, `cb` at `b` (a <= b).
struct TwoPoints {
  double a, b, ca, cb;
};

// Matches count c, mean, variance var of keys known to lie in [e0, e1] (see sliced_bins.h).
STEADY_HOST_DEVICE inline TwoPoints MatchTwoPoints(double c, double mean, double var, double e0, double e1) {
  // Bhatia-Davis: var <= (e1 - mean)(mean - e0) for values in [e0, e1]; clamping absorbs rounding.
  const double bound = (e1 - mean) * (mean - e0);
  const double hi = bound > 0.0 ? bound : 0.0;
  var = var < 0.0 ? 0.0 : var > hi ? hi : var;
  const double sigma = sqrt(var);
  if (sigma <= 0) return {mean, mean, c, 0.0};
  if (mean + sigma > e1) {  // upper point on e1; weight p there keeps mean and variance
    const double d = e1 - mean, p = var / (var + d * d);
    return {mean - var / d, e1, c * (1 - p), c * p};
  }
  if (mean - sigma < e0) {
    const double d = mean - e0, p = var / (var + d * d);
    return {e0, mean + var / d, c * p, c * (1 - p)};
  }
  return {mean - sigma, mean + sigma, 0.5 * c, 0.5 * c};
}

// How the bin holding query point x enters x's ReLU moments: not at all (x at or below its lower
// point), whole (x at or above its upper point: the exact form), or through its lower point only.
struct OwnBin {
  enum Kind { kNone, kWhole, kLower } kind = kNone;
  TwoPoints p = {0, 0, 0, 0};
};

// The bin b holding x, with count c, sum z and M2 m2 (c > 0); lowest and highest bound the tails.
STEADY_HOST_DEVICE inline OwnBin SplitOwnBin(const SlicedBinsLayout& layout, int b, double x, double c,
                                             double sum_z, double m2, double lowest, double highest,
                                             double resolution) {
  double e0, e1;
  if (b == 0) {
    e0 = lowest, e1 = layout.z_min;
  } else if (b == layout.bins + 1) {
    e0 = layout.z_max, e1 = highest;
  } else {
    e0 = EdgeBelow(layout, b), e1 = EdgeBelow(layout, b + 1);
  }
  // A spread within rounding of 0 (e.g. all keys equal) is one point, so equal scores give an exact
  // 0/0 -> 0 readout rather than noise.
  const double mean = sum_z / c;
  double var = m2 / c > 0.0 ? m2 / c : 0.0;
  if (sqrt(var) <= 64 * resolution * sqrt(c) * fabs(mean)) var = 0;
  OwnBin own;
  own.p = MatchTwoPoints(c, mean, var, e0, e1);
  own.kind = x <= own.p.a ? OwnBin::kNone : x >= own.p.b ? OwnBin::kWhole : OwnBin::kLower;
  return own;
}

// The own bin's share of r1(x) = sum (x - z_j)+ (c keys, sum z).
STEADY_HOST_DEVICE inline double OwnBinR1(const OwnBin& own, double x, double c, double sum_z) {
  if (own.kind == OwnBin::kWhole) return x * c - sum_z;
  if (own.kind == OwnBin::kLower) return own.p.ca * (x - own.p.a);
  return 0.0;
}

// Its share of one column of rv(x) = sum (x - z_j)+ v_j, from the bin's sum v and sum z v in that
// column. The lower point's share of v: va + vb = sum v, a va + b vb = sum z v.
STEADY_HOST_DEVICE inline double OwnBinRv(const OwnBin& own, double x, double sum_v, double sum_zv) {
  if (own.kind == OwnBin::kWhole) return x * sum_v - sum_zv;
  if (own.kind == OwnBin::kLower) {
    const double vb = (sum_zv - own.p.a * sum_v) / (own.p.b - own.p.a);
    return (sum_v - vb) * (x - own.p.a);
  }
  return 0.0;
}

}  // namespace sliced_bins
}  // namespace steady

#endif  // STEADY_KERNELS_SLICED_BINS_MATH_H_
