// The sliced mechanisms' bucketed decoder: a constant-size histogram of the keys over z.
//
// Bins, in z order: a left tail (z < z_min), `bins` uniform bins over [z_min, z_max), a right tail
// (z >= z_max). Each holds count, sum z, sum v, sum z v of its keys and their sum of squared deviations
// from the bin's mean (Welford's running M2, no cancellation); the state also keeps the lowest and
// highest z seen, which bound the tails. At a query point x:
//   - bins entirely below x contribute exactly: sum (x - z_j) u_j = x sum u_j - sum z_j u_j (u = 1, v);
//   - bins entirely above contribute nothing to the ReLU moments (and enter |.| through the totals);
//   - the bin holding x, with edges e0 <= x < e1 (tails: [lowest, z_min), [z_max, highest]), is
//     replaced by two point masses that match its count, mean and variance: at mean -/+ sigma with half
//     the count each, or, when that would leave [e0, e1], one point on the edge and the other placed to
//     keep mean and variance. Its sum v and sum z v fix how v splits between the two points. So the
//     interpolation is exact whenever the bin holds one or two distinct keys (or x is outside the span
//     of its points), and for keys spread uniformly over a bin of width w it errs by at most
//     0.022 * count * w in sum (x - z_j)+ (linear interpolation between the edges: 0.125 * count * w).
// The result is continuous in x, linear in the values (so centering is exact), and its denominator
// sum |x - z_j| is a sum of non-negative terms. Measured errors: docs/mechanisms/sliced_relu.md.
//
// Head state, HeadFloats() values of T:
//   [bins + 2 rows of (count, sum z, sum v[dv], sum z v[dv], M2)]
//   [compensation, same shape, when compensated] [lowest z, highest z]
#ifndef STEADY_MODEL_MECHANISMS_SLICED_BINS_H_
#define STEADY_MODEL_MECHANISMS_SLICED_BINS_H_

#include <cstddef>
#include <vector>

#include "model/mechanisms/sliced_moments.h"

namespace steady {

// SlicedBinsLayout (bins, z range, value_dim, compensation; floats per bin and per head) is in
// kernels/sliced_bins_math.h with the rest of the arithmetic the CUDA kernel shares.

template <typename T>
void BinsInit(const SlicedBinsLayout& layout, T* head);

// Adds key (z, v[dv]) to one kv head's histogram.
template <typename T>
void BinsInsert(const SlicedBinsLayout& layout, double z, const T* v, T* head);

// One kv head's histogram read out in double at the points a token's readouts will ask for (its GQA
// group's query scores; the bump's x - b and x + b too): for the bin of each, the moments of every
// bin before it (running sums over the bins in z order) and its own sums; and every bin's moments.
// Computed once per token and kv head and shared by that head's readouts. One pass over the bins
// that keeps only these (not each bin's widened row and prefix: at most 4 bins' at llama1b's shape,
// whose GQA groups have 4 queries, instead of 66); the running sums add the bins in the same order,
// so the same bits as prefixes over all of them.
struct SlicedBinsSnapshot {
  std::vector<int> at;        // the points' bins, sorted, each once
  std::vector<double> below;  // [at.size() x (2dv + 2)]: the moments of bins 0 .. at[i] - 1
  std::vector<double> own;    // [at.size() x BinFloats()]: bin at[i]'s sums
  std::vector<double> total;  // [2dv + 2]: the moments of every bin
  double lowest = 0, highest = 0;
  double resolution = 0;  // relative resolution of the stored sums (a spread below it counts as 0)
};

template <typename T>
void BinsSnapshot(const SlicedBinsLayout& layout, const T* head, const double* points, int count,
                  SlicedBinsSnapshot* out);

void BinsTotals(const SlicedBinsLayout& layout, const SlicedBinsSnapshot& snap, SlicedTotals* out);

// r1(x), rv(x) as described above (out->rv is resized to dv), x one of the snapshot's points.
void BinsReluMoments(const SlicedBinsLayout& layout, const SlicedBinsSnapshot& snap, double x,
                     SlicedReluMoments* out);

}  // namespace steady

#endif  // STEADY_MODEL_MECHANISMS_SLICED_BINS_H_
