#include "model/mechanisms/sliced_bins.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "kernels/cpu/state_update.h"

namespace steady {

using sliced_bins::BinOf;

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
  key[m] = sliced_bins::WelfordIncrement(ReadSum(sums, comp(0)), ReadSum(sums + 1, comp(1)), z);
  cpu::AddRowToSums(key.data(), sums, comps, row_floats);  // SIMD for fp32, bit for bit AddToSum
  const size_t n = layout.HeadFloats();
  head[n - 2] = std::min(head[n - 2], T(z));
  head[n - 1] = std::max(head[n - 1], T(z));
}

template <typename T>
void BinsSnapshot(const SlicedBinsLayout& layout, const T* head, const double* points, int count,
                  SlicedBinsSnapshot* out) {
  const int m = SlicedMomentCount(layout.value_dim), row_floats = layout.BinFloats();
  const size_t cells = size_t(layout.bins + 2) * row_floats;
  const T* comps = layout.compensated ? head + cells : nullptr;
  out->at.resize(size_t(count));
  for (int i = 0; i < count; ++i) out->at[size_t(i)] = BinOf(layout, points[i]);
  std::sort(out->at.begin(), out->at.end());
  out->at.erase(std::unique(out->at.begin(), out->at.end()), out->at.end());
  out->below.resize(out->at.size() * m);
  out->own.resize(out->at.size() * row_floats);
  out->total.assign(size_t(m), 0.0);
  size_t next = 0;  // the next of `at` the pass reaches
  for (int b = 0; b < layout.bins + 2; ++b) {
    const T* row = head + size_t(b) * row_floats;
    const T* comp = comps != nullptr ? comps + size_t(b) * row_floats : nullptr;
    if (next < out->at.size() && out->at[next] == b) {
      std::copy(out->total.begin(), out->total.end(), out->below.begin() + std::ptrdiff_t(next * m));
      cpu::WidenSums(row, comp, out->own.data() + next * row_floats, row_floats);  // ReadSum each
      ++next;
    }
    cpu::AddWidenedSums(row, comp, out->total.data(), m);
  }
  const size_t n = layout.HeadFloats();
  out->lowest = double(head[n - 2]);
  out->highest = double(head[n - 1]);
  out->resolution = sliced_bins::Resolution<T>(layout.compensated);
}

void BinsTotals(const SlicedBinsLayout& layout, const SlicedBinsSnapshot& snap, SlicedTotals* out) {
  const int dv = layout.value_dim;
  const double* all = snap.total.data();
  out->count = all[0];
  out->sum_z = all[1];
  out->sum_v.assign(all + 2, all + 2 + dv);
}

void BinsReluMoments(const SlicedBinsLayout& layout, const SlicedBinsSnapshot& snap, double x,
                     SlicedReluMoments* out) {
  const int dv = layout.value_dim, m = SlicedMomentCount(dv);
  const int b = BinOf(layout, x);
  const auto at = std::lower_bound(snap.at.begin(), snap.at.end(), b);
  STEADY_CHECK(at != snap.at.end() && *at == b);  // x was one of the snapshot's points
  const size_t i = size_t(at - snap.at.begin());
  const double* below = snap.below.data() + i * m;  // bins 0..b-1: entirely below x
  out->r1 = x * below[0] - below[1];
  out->rv.resize(dv);
  for (int d = 0; d < dv; ++d) out->rv[d] = x * below[2 + d] - below[2 + dv + d];

  // The bin holding x: [count, sum z, sum v[dv], sum z v[dv], M2].
  const double* own = snap.own.data() + i * layout.BinFloats();
  const double c = own[0];
  if (c == 0) return;
  const sliced_bins::OwnBin split =
      sliced_bins::SplitOwnBin(layout, b, x, c, own[1], own[m], snap.lowest, snap.highest, snap.resolution);
  if (split.kind == sliced_bins::OwnBin::kNone) return;
  out->r1 += sliced_bins::OwnBinR1(split, x, c, own[1]);
  for (int d = 0; d < dv; ++d) out->rv[d] += sliced_bins::OwnBinRv(split, x, own[2 + d], own[2 + dv + d]);
}

#define STEADY_INSTANTIATE_BINS(T)                                                      \
  template void BinsInit<T>(const SlicedBinsLayout&, T*);                              \
  template void BinsInsert<T>(const SlicedBinsLayout&, double, const T*, T*);          \
  template void BinsSnapshot<T>(const SlicedBinsLayout&, const T*, const double*, int, SlicedBinsSnapshot*);
STEADY_INSTANTIATE_BINS(float)
STEADY_INSTANTIATE_BINS(double)
#undef STEADY_INSTANTIATE_BINS

}  // namespace steady
