#include "model/mechanisms/sliced_bins.h"

#include <algorithm>
#include <cmath>

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
void BinsSnapshot(const SlicedBinsLayout& layout, const T* head, SlicedBinsSnapshot* out) {
  const int m = SlicedMomentCount(layout.value_dim), row_floats = layout.BinFloats();
  const size_t cells = size_t(layout.bins + 2) * row_floats;
  out->rows.resize(cells);
  cpu::WidenSums(head, layout.compensated ? head + cells : nullptr, out->rows.data(), int(cells));  // ReadSum each
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
  out->resolution = sliced_bins::Resolution<T>(layout.compensated);
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
  const sliced_bins::OwnBin split =
      sliced_bins::SplitOwnBin(layout, b, x, c, own[1], own[m], snap.lowest, snap.highest, snap.resolution);
  if (split.kind == sliced_bins::OwnBin::kNone) return;
  out->r1 += sliced_bins::OwnBinR1(split, x, c, own[1]);
  for (int d = 0; d < dv; ++d) out->rv[d] += sliced_bins::OwnBinRv(split, x, own[2 + d], own[2 + dv + d]);
}

#define STEADY_INSTANTIATE_BINS(T)                                                      \
  template void BinsInit<T>(const SlicedBinsLayout&, T*);                              \
  template void BinsInsert<T>(const SlicedBinsLayout&, double, const T*, T*);          \
  template void BinsSnapshot<T>(const SlicedBinsLayout&, const T*, SlicedBinsSnapshot*);
STEADY_INSTANTIATE_BINS(float)
STEADY_INSTANTIATE_BINS(double)
#undef STEADY_INSTANTIATE_BINS

}  // namespace steady
