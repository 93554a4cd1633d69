#include "model/mechanisms/sliced_bins.h"

#include <algorithm>
#include <cmath>

namespace steady {
namespace {

// Bin of score z in z order: 0 left tail, 1..bins interior, bins + 1 right tail. Keys and queries use
// the same function, so "entirely below" is consistent; NaN lands in the left tail.
int BinOf(const SlicedBinsLayout& layout, double z) {
  if (!(z >= layout.z_min)) return 0;
  if (z >= layout.z_max) return layout.bins + 1;
  const double u = (z - layout.z_min) / (layout.z_max - layout.z_min) * layout.bins;
  return 1 + std::clamp(int(u), 0, layout.bins - 1);
}

// Left edge of interior bin i (i = bins + 1 gives z_max).
double EdgeBelow(const SlicedBinsLayout& layout, int i) {
  return layout.z_min + (layout.z_max - layout.z_min) * double(i - 1) / layout.bins;
}

// The point the bin's second moment is taken about: its midpoint, or the boundary for a tail.
double Centre(const SlicedBinsLayout& layout, int b) {
  if (b == 0) return layout.z_min;
  if (b == layout.bins + 1) return layout.z_max;
  return 0.5 * (EdgeBelow(layout, b) + EdgeBelow(layout, b + 1));
}

// Two point masses standing in for one bin's keys: `ca` keys at `a`, `cb` at `b` (a <= b).
struct TwoPoints {
  double a, b, ca, cb;
};

// Matches count c, mean, variance var of keys known to lie in [e0, e1] (see sliced_bins.h).
TwoPoints MatchTwoPoints(double c, double mean, double var, double e0, double e1) {
  // Bhatia-Davis: var <= (e1 - mean)(mean - e0) for values in [e0, e1]; clamping absorbs rounding.
  var = std::clamp(var, 0.0, std::max(0.0, (e1 - mean) * (mean - e0)));
  const double sigma = std::sqrt(var);
  if (sigma <= 1e-12 * (std::abs(mean) + (e1 - e0))) return {mean, mean, c, 0.0};
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

}  // namespace

template <typename T>
void BinsInit(const SlicedBinsLayout& layout, T* head) {
  const size_t n = layout.HeadFloats();
  std::fill(head, head + n - 2, T(0));
  head[n - 2] = T(INFINITY);   // lowest z seen
  head[n - 1] = T(-INFINITY);  // highest z seen
}

template <typename T>
void BinsInsert(const SlicedBinsLayout& layout, double z, const T* v, T* head) {
  const int m = SlicedMomentCount(layout.value_dim), row_floats = layout.BinFloats();
  const size_t cells = size_t(layout.bins + 2) * row_floats;
  const int b = BinOf(layout, z);
  const size_t row = size_t(b) * row_floats;
  std::vector<double> key(row_floats);
  KeyMoments(z, v, layout.value_dim, key.data());
  key[m] = (z - Centre(layout, b)) * (z - Centre(layout, b));
  for (int i = 0; i < row_floats; ++i) {
    AddToSum(key[i], head + row + i, layout.compensated ? head + cells + row + i : nullptr);
  }
  const size_t n = layout.HeadFloats();
  head[n - 2] = std::min(head[n - 2], T(z));
  head[n - 1] = std::max(head[n - 1], T(z));
}

template <typename T>
void BinsPrefix(const SlicedBinsLayout& layout, const T* head, SlicedBinsPrefix* out) {
  const int m = SlicedMomentCount(layout.value_dim), row_floats = layout.BinFloats();
  const size_t cells = size_t(layout.bins + 2) * row_floats;
  out->cum.assign(size_t(layout.bins + 3) * m, 0.0);
  out->spread.resize(layout.bins + 2);
  auto read = [&](size_t i) { return ReadSum(head + i, layout.compensated ? head + cells + i : nullptr); };
  for (int b = 0; b < layout.bins + 2; ++b) {
    const double* prev = out->cum.data() + size_t(b) * m;
    double* next = out->cum.data() + size_t(b + 1) * m;
    const size_t row = size_t(b) * row_floats;
    for (int i = 0; i < m; ++i) next[i] = prev[i] + read(row + i);
    out->spread[b] = read(row + m);
  }
  const size_t n = layout.HeadFloats();
  out->lowest = double(head[n - 2]);
  out->highest = double(head[n - 1]);
}

void BinsTotals(const SlicedBinsLayout& layout, const SlicedBinsPrefix& prefix, SlicedTotals* out) {
  const int dv = layout.value_dim, m = SlicedMomentCount(dv);
  const double* all = prefix.cum.data() + size_t(layout.bins + 2) * m;
  out->count = all[0];
  out->sum_z = all[1];
  out->sum_v.assign(all + 2, all + 2 + dv);
}

void BinsReluMoments(const SlicedBinsLayout& layout, const SlicedBinsPrefix& prefix, double x,
                     SlicedReluMoments* out) {
  const int dv = layout.value_dim, m = SlicedMomentCount(dv);
  const int b = BinOf(layout, x);
  const double* below = prefix.cum.data() + size_t(b) * m;  // bins 0..b-1: entirely below x
  const double* through = below + m;                        // bins 0..b
  out->r1 = x * below[0] - below[1];
  out->rv.resize(dv);
  for (int d = 0; d < dv; ++d) out->rv[d] = x * below[2 + d] - below[2 + dv + d];

  // The bin holding x, own(i) = its moment i.
  auto own = [&](int i) { return through[i] - below[i]; };
  const double c = own(0);
  if (c == 0) return;
  double e0, e1;
  if (b == 0) {
    e0 = prefix.lowest, e1 = layout.z_min;
  } else if (b == layout.bins + 1) {
    e0 = layout.z_max, e1 = prefix.highest;
  } else {
    e0 = EdgeBelow(layout, b), e1 = EdgeBelow(layout, b + 1);
  }
  const double mean = own(1) / c, offset = mean - Centre(layout, b);
  const TwoPoints p = MatchTwoPoints(c, mean, prefix.spread[b] / c - offset * offset, e0, e1);
  if (x <= p.a) return;
  if (x >= p.b) {  // every key of the bin counts as below x: the exact form
    out->r1 += x * c - own(1);
    for (int d = 0; d < dv; ++d) out->rv[d] += x * own(2 + d) - own(2 + dv + d);
    return;
  }
  // Only the lower point is below x. Its share of v: va + vb = sum v, a va + b vb = sum z v.
  out->r1 += p.ca * (x - p.a);
  for (int d = 0; d < dv; ++d) {
    const double vb = (own(2 + dv + d) - p.a * own(2 + d)) / (p.b - p.a);
    out->rv[d] += (own(2 + d) - vb) * (x - p.a);
  }
}

#define STEADY_INSTANTIATE_BINS(T)                                                      \
  template void BinsInit<T>(const SlicedBinsLayout&, T*);                              \
  template void BinsInsert<T>(const SlicedBinsLayout&, double, const T*, T*);          \
  template void BinsPrefix<T>(const SlicedBinsLayout&, const T*, SlicedBinsPrefix*);
STEADY_INSTANTIATE_BINS(float)
STEADY_INSTANTIATE_BINS(double)
#undef STEADY_INSTANTIATE_BINS

}  // namespace steady
