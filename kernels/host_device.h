// Arithmetic shared by the CPU path and the CUDA kernels: plain C++ that nvcc also compiles for the
// device, so that both sides run the same operations in the same order.
#ifndef STEADY_KERNELS_HOST_DEVICE_H_
#define STEADY_KERNELS_HOST_DEVICE_H_

#if defined(__CUDACC__)
#define STEADY_HOST_DEVICE __host__ __device__
#else
#define STEADY_HOST_DEVICE
#endif

namespace steady {

// Compensated add: sum + x with the lost low-order part carried in `comp` (Kahan-Babuska/Neumaier),
// then folded back (fast two-sum) so |comp| stays below half an ulp of |sum|. Without the fold the
// compensation itself becomes a second fp32 running sum and drifts past ~1e7 tokens (docs/drift.md).
// The represented value is sum + comp.
template <typename T>
STEADY_HOST_DEVICE inline void KahanAdd(T& sum, T& comp, T x) {
  const T t = sum + x;
  if ((sum >= 0 ? sum : -sum) >= (x >= 0 ? x : -x)) {
    comp += (sum - t) + x;
  } else {
    comp += (x - t) + sum;
  }
  const T s = t + comp;
  comp -= s - t;
  sum = s;
}

}  // namespace steady

#endif  // STEADY_KERNELS_HOST_DEVICE_H_
