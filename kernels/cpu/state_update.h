// The inner loop of every linear-state mechanism's update (model/mechanisms: taylor, slay, dark):
// one state row += a scalar times the value vector, with or without Neumaier compensation. SIMD
// (Highway, dispatched at run time) with the scalar reference beside it; the two agree bit for bit
// (each lane does KahanAdd's operations in KahanAdd's order, products rounded before the add, no
// fused multiply-add), tests/cpu_kernels_test.cc checks it.
#ifndef STEADY_KERNELS_CPU_STATE_UPDATE_H_
#define STEADY_KERNELS_CPU_STATE_UPDATE_H_

namespace steady::cpu {

// KahanAdd(row[d], comp[d], x * v[d]) for d in [0, n) (kernels/host_device.h).
void KahanAxpy(float x, const float* v, float* row, float* comp, int n);
void KahanAxpyReference(float x, const float* v, float* row, float* comp, int n);

// row[d] += x * v[d] for d in [0, n).
void Axpy(float x, const float* v, float* row, int n);
void AxpyReference(float x, const float* v, float* row, int n);

}  // namespace steady::cpu

#endif  // STEADY_KERNELS_CPU_STATE_UPDATE_H_
