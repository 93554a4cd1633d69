#include "model/mechanisms/sliced_bins.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

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

// Two point masses standing in for one bin's keys: `ca` keys at `a`, `cb` at `b` (a <= b).
struct TwoPoints {
  double a, b, ca, cb;
};

// Matches count c, mean, variance var of keys known to lie in [e0, e1] (see sliced_bins.h).
TwoPoints MatchTwoPoints(double c, double mean, double var, double e0, double e1) {
  // Bhatia-Davis: var <= (e1 - mean)(mean - e0) for values in [e0, e1]; clamping absorbs rounding.
  var = std::clamp(var, 0.0, std::max(0.0, (e1 - mean) * (mean - e0)));
  const double sigma = std::sqrt(var);
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
  T* sums = head + size_t(BinOf(layout, z)) * row_floats;
  T* comps = layout.compensated ? sums + cells : nullptr;
  auto comp = [&](int i) { return comps ? comps + i : nullptr; };
  std::vector<double> key(row_floats);
  KeyMoments(z, v, layout.value_dim, key.data());
  // Welford: M2 += (z - old mean)(z - new mean).
  const double count = ReadSum(sums, comp(0)), sum_z = ReadSum(sums + 1, comp(1));
  const double old_mean = count > 0 ? sum_z / count : z;
  key[m] = (z - old_mean) * (z - (sum_z + z) / (count + 1));
  for (int i = 0; i < row_floats; ++i) AddToSum(key[i], sums + i, comp(i));
  const size_t n = layout.HeadFloats();
  head[n - 2] = std::min(head[n - 2], T(z));
  head[n - 1] = std::max(head[n - 1], T(z));
}

template <typename T>
void BinsSnapshot(const SlicedBinsLayout& layout, const T* head, SlicedBinsSnapshot* out) {
  const int m = SlicedMomentCount(layout.value_dim), row_floats = layout.BinFloats();
  const size_t cells = size_t(layout.bins + 2) * row_floats;
  out->rows.resize(cells);
  for (size_t i = 0; i < cells; ++i) {
    out->rows[i] = ReadSum(head + i, layout.compensated ? head + cells + i : nullptr);
  }
  out->cum.assign(size_t(layout.bins + 3) * m, 0.0);
  for (int b = 0; b < layout.bins + 2; ++b) {
    const double* row = out->rows.data() + size_t(b) * row_floats;
    const double* prev = out->cum.data() + size_t(b) * m;
    double* next = out->cum.data() + size_t(b + 1) * m;
    for (int i = 0; i < m; ++i) next[i] = prev[i] + row[i];
  }
  const size_t n = layout.HeadFloats();
  out->lowest = double(head[n - 2]);
  out->highest = double(head[n - 1]);
  // Compensated float pairs hold ~48 bits; plain sums the precision of T.
  out->resolution = std::is_same_v<T, double> ? 0x1p-52 : layout.compensated ? 0x1p-48 : 0x1p-23;
}

void BinsTotals(const SlicedBinsLayout& layout, const SlicedBinsSnapshot& snap, SlicedTotals* out) {
  const int dv = layout.value_dim, m = SlicedMomentCount(dv);
  const double* all = snap.cum.data() + size_t(layout.bins + 2) * m;
  out->count = all[0];
  out->sum_z = all[1];
  out->sum_v.assign(all + 2, all + 2 + dv);
}

void BinsReluMoments(const SlicedBinsLayout& layout, const SlicedBinsSnapshot& snap, double x,
                     SlicedReluMoments* out) {
  const int dv = layout.value_dim, m = SlicedMomentCount(dv);
  const int b = BinOf(layout, x);
  const double* below = snap.cum.data() + size_t(b) * m;  // bins 0..b-1: entirely below x
  out->r1 = x * below[0] - below[1];
  out->rv.resize(dv);
  for (int d = 0; d < dv; ++d) out->rv[d] = x * below[2 + d] - below[2 + dv + d];

  // The bin holding x: [count, sum z, sum v[dv], sum z v[dv], M2].
  const double* own = snap.rows.data() + size_t(b) * layout.BinFloats();
  const double c = own[0];
  if (c == 0) return;
  double e0, e1;
  if (b == 0) {
    e0 = snap.lowest, e1 = layout.z_min;
  } else if (b == layout.bins + 1) {
    e0 = layout.z_max, e1 = snap.highest;
  } else {
    e0 = EdgeBelow(layout, b), e1 = EdgeBelow(layout, b + 1);
  }
  // A spread within rounding of 0 (e.g. all keys equal) is one point, so equal scores give an exact
  // 0/0 -> 0 readout rather than noise.
  const double mean = own[1] / c;
  double var = std::max(0.0, own[m] / c);
  if (std::sqrt(var) <= 64 * snap.resolution * std::sqrt(c) * std::abs(mean)) var = 0;
  const TwoPoints p = MatchTwoPoints(c, mean, var, e0, e1);
  if (x <= p.a) return;
  if (x >= p.b) {  // every key of the bin counts as below x: the exact form
    out->r1 += x * c - own[1];
    for (int d = 0; d < dv; ++d) out->rv[d] += x * own[2 + d] - own[2 + dv + d];
    return;
  }
  // Only the lower point is below x. Its share of v: va + vb = sum v, a va + b vb = sum z v.
  out->r1 += p.ca * (x - p.a);
  for (int d = 0; d < dv; ++d) {
    const double vb = (own[2 + dv + d] - p.a * own[2 + d]) / (p.b - p.a);
    out->rv[d] += (own[2 + d] - vb) * (x - p.a);
  }
}

#define STEADY_INSTANTIATE_BINS(T)                                                      \
  template void BinsInit<T>(const SlicedBinsLayout&, T*);                              \
  template void BinsInsert<T>(const SlicedBinsLayout&, double, const T*, T*);          \
  template void BinsSnapshot<T>(const SlicedBinsLayout&, const T*, SlicedBinsSnapshot*);
STEADY_INSTANTIATE_BINS(float)
STEADY_INSTANTIATE_BINS(double)
#undef STEADY_INSTANTIATE_BINS

}  // namespace steady
