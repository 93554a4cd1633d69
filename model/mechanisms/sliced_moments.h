// What both sliced decoders (sliced_tree.h, sliced_bins.h) answer for one kv head, and the running
// sums they keep. Every readout of sliced_relu and sliced_relu_bump is a function of
//   totals:        t = #keys, sum_j z_j, sum_j v_j
//   ReLU moments:  r1(x) = sum_j (x - z_j)+,   rv(x) = sum_j (x - z_j)+ v_j    (dv values)
// (ties z_j == x contribute 0 to both, so "below" may be strict or not).
#ifndef STEADY_MODEL_MECHANISMS_SLICED_MOMENTS_H_
#define STEADY_MODEL_MECHANISMS_SLICED_MOMENTS_H_

#include <type_traits>
#include <vector>

#include "model/mechanisms/common.h"

namespace steady {

// Moments of a set of keys, the unit both decoders store: count, sum z, sum v [dv], sum z v [dv].
// Layout of a moment vector (2 * dv + 2 values): [count, sum_z, sum_v[0..dv), sum_zv[0..dv)].
inline int SlicedMomentCount(int value_dim) { return 2 * value_dim + 2; }

// The moments (1, z, v, z v) of one key, in double.
template <typename T>
inline void KeyMoments(double z, const T* v, int value_dim, double* out) {
  out[0] = 1;
  out[1] = z;
  for (int d = 0; d < value_dim; ++d) {
    out[2 + d] = double(v[d]);
    out[2 + value_dim + d] = z * double(v[d]);
  }
}

// A running sum stored in T, optionally with a compensation term beside it (comp == nullptr: plain).
// Compensated pairs are updated in double: for T = float the pair (sum, comp) then holds the sum to
// about 2^-48 relative, so a key's z * v product is not rounded to float before it is added.
template <typename T>
inline double ReadSum(const T* sum, const T* comp) {
  return comp ? double(*sum) + double(*comp) : double(*sum);
}

template <typename T>
inline void StoreSum(double hi, double lo, T* sum, T* comp) {
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
inline void AddToSum(double x, T* sum, T* comp) {
  if (!comp) {
    *sum = T(double(*sum) + x);
    return;
  }
  double hi = double(*sum), lo = double(*comp);
  KahanAdd(hi, lo, x);
  StoreSum(hi, lo, sum, comp);
}

// Totals and ReLU moments of one kv head's keys at one query point, in double.
struct SlicedTotals {
  double count = 0;
  double sum_z = 0;
  std::vector<double> sum_v;  // [dv]
};

struct SlicedReluMoments {
  double r1 = 0;           // sum_j (x - z_j)+
  std::vector<double> rv;  // [dv] sum_j (x - z_j)+ v_j
};

}  // namespace steady

#endif  // STEADY_MODEL_MECHANISMS_SLICED_MOMENTS_H_
