// The inner loop of every linear-state mechanism's update (model/mechanisms: taylor, slay, dark):
// one state row += a scalar times the value vector, with or without Neumaier compensation. SIMD
// (Highway, dispatched at run time) with the scalar reference beside it; the two agree bit for bit
// (each lane does KahanAdd's operations in KahanAdd's order, products rounded before the add, no
// fused multiply-add), tests/cpu_kernels_test.cc checks it.
#ifndef STEADY_KERNELS_CPU_STATE_UPDATE_H_
#define STEADY_KERNELS_CPU_STATE_UPDATE_H_

#include "kernels/host_device.h"

namespace steady::cpu {

// KahanAdd(row[d], comp[d], x * v[d]) for d in [0, n): the scalar reference, and the SIMD fp32
// kernel; fp64 rows take the reference.
template <typename T>
void KahanAxpyReference(T x, const T* v, T* row, T* comp, int n) {
  for (int i = 0; i < n; ++i) KahanAdd(row[i], comp[i], x * v[i]);
}
void KahanAxpy(float x, const float* v, float* row, float* comp, int n);
inline void KahanAxpy(double x, const double* v, double* row, double* comp, int n) {
  KahanAxpyReference(x, v, row, comp, n);
}

// row[d] += x * v[d] for d in [0, n), the same way.
template <typename T>
void AxpyReference(T x, const T* v, T* row, int n) {
  for (int i = 0; i < n; ++i) row[i] += x * v[i];
}
void Axpy(float x, const float* v, float* row, int n);
inline void Axpy(double x, const double* v, double* row, int n) { AxpyReference(x, v, row, n); }

}  // namespace steady::cpu

#endif  // STEADY_KERNELS_CPU_STATE_UPDATE_H_
