// What both sliced decoders (sliced_tree.h, sliced_bins.h) answer for one kv head, and the running
// sums they keep. Every readout of sliced_relu and sliced_relu_bump is a function of
//   totals:        t = #keys, sum_j z_j, sum_j v_j
//   ReLU moments:  r1(x) = sum_j (x - z_j)+,   rv(x) = sum_j (x - z_j)+ v_j    (dv values)
// (ties z_j == x contribute 0 to both, so "below" may be strict or not).
#ifndef STEADY_MODEL_MECHANISMS_SLICED_MOMENTS_H_
#define STEADY_MODEL_MECHANISMS_SLICED_MOMENTS_H_

#include <type_traits>
#include <vector>

#include "kernels/sliced_bins_math.h"
#include "model/mechanisms/common.h"

namespace steady {

// SlicedMomentCount (the moment vector: [count, sum_z, sum_v[0..dv), sum_zv[0..dv)]) and the running
// sums ReadSum/StoreSum/AddToSum live in kernels/sliced_bins_math.h, shared with the CUDA kernel.

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
