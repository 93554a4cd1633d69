// The inner loops of every linear-state mechanism (model/mechanisms: taylor, slay, dark): the update,
// one state row += a scalar times the value vector, with or without Neumaier compensation, and the
// read, a query's weight times a state row (its sums plus their compensations) into the output. SIMD
// (Highway, dispatched at run time) with the scalar reference beside it; the two agree bit for bit
// (each lane does KahanAdd's operations in KahanAdd's order, products rounded before the add, no
// fused multiply-add), tests/kernels/cpu_kernels_test.cc checks it.
#ifndef STEADY_KERNELS_CPU_STATE_UPDATE_H_
#define STEADY_KERNELS_CPU_STATE_UPDATE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/host_device.h"
#include "kernels/sliced_bins_math.h"

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

// The read of one state row: out[d] += w * (row[d] + comp[d]) for d in [0, n), or out[d] += w * row[d]
// where comp is null (slay, dark: ReadRows below reads a state's rows this way).
template <typename T>
void ReadRowReference(T w, const T* row, const T* comp, T* out, int n) {
  if (comp != nullptr) {
    for (int i = 0; i < n; ++i) out[i] += w * (row[i] + comp[i]);
  } else {
    for (int i = 0; i < n; ++i) out[i] += w * row[i];
  }
}

// ReadRowReference of rows [0, m) of a state (sums [m, n], comp the same or null) for `group`
// queries at once, row by row in order (slay, dark): out[i * n + d] += (w[i * w_stride + f] *
// factor) * (sums[f * n + d] + comp[f * n + d]) for each row f, query i < group and d < n, each term
// rounded as ReadRowReference rounds it. The SIMD kernel keeps the queries' sums in registers over
// the rows: one call a state instead of one per row and query, and the same bits.
template <typename T>
void ReadRowsReference(int m, int n, int group, const T* w, int64_t w_stride, T factor, const T* sums, const T* comp,
                       T* out) {
  for (int f = 0; f < m; ++f) {
    for (int i = 0; i < group; ++i) {
      ReadRowReference<T>(w[i * w_stride + f] * factor, sums + int64_t(f) * n,
                          comp != nullptr ? comp + int64_t(f) * n : nullptr, out + int64_t(i) * n, n);
    }
  }
}
void ReadRows(int m, int n, int group, const float* w, int64_t w_stride, float factor, const float* sums,
              const float* comp, float* out);
inline void ReadRows(int m, int n, int group, const double* w, int64_t w_stride, double factor, const double* sums,
                     const double* comp, double* out) {
  ReadRowsReference(m, n, group, w, w_stride, factor, sums, comp, out);
}

// The same read in double for `group` queries at once (taylor): with r[d] = double(row[d]) +
// double(comp[d]) (comp may be null), out[i * n + d] += double(w[i * w_stride]) * r[d] for each
// query i < group and d in [0, n).
template <typename T>
void ReadRowGroupReference(const T* w, int64_t w_stride, int group, const T* row, const T* comp, double* out, int n) {
  for (int d = 0; d < n; ++d) {
    double r = double(row[d]);
    if (comp != nullptr) r += double(comp[d]);
    for (int i = 0; i < group; ++i) out[i * n + d] += double(w[i * w_stride]) * r;
  }
}
void ReadRowGroup(const float* w, int64_t w_stride, int group, const float* row, const float* comp, double* out, int n);
inline void ReadRowGroup(const double* w, int64_t w_stride, int group, const double* row, const double* comp,
                         double* out, int n) {
  ReadRowGroupReference(w, w_stride, group, row, comp, out, n);
}

// Positive random features (dark): x[i] = exp(x[i] - shift) * scale for i in [0, n), shift >= every
// x[i]. fp32 in SIMD with Highway's Exp (within a few ulps of std::exp), fp64 through std::exp.
void ExpFeatures(float* x, int n, float shift, float scale);
inline void ExpFeatures(double* x, int n, double shift, double scale) {
  for (int i = 0; i < n; ++i) x[i] = std::exp(x[i] - shift) * scale;
}

// The largest of x[0], ..., x[n - 1] (n >= 1; x without NaN): exact, so the SIMD lanes' order gives
// std::max_element's value (the features' shifts).
float MaxOf(const float* x, int n);
inline double MaxOf(const double* x, int n) { return *std::max_element(x, x + n); }

// sliced_relu's bucketed state (model/mechanisms/sliced_bins.cc) keeps running sums as an fp32 pair
// (sum, compensation) read and updated in double (kernels/sliced_bins_math.h ReadSum, AddToSum).
// WidenSums: out[i] = ReadSum(sums + i, comps + i) (comps may be null); AddRowToSums: AddToSum(x[i],
// sums + i, comps + i) for i in [0, n). SIMD for fp32 sums, bit for bit the scalar reference.
template <typename T>
void WidenSumsReference(const T* sums, const T* comps, double* out, int n) {
  for (int i = 0; i < n; ++i) out[i] = ReadSum(sums + i, comps ? comps + i : nullptr);
}
void WidenSums(const float* sums, const float* comps, double* out, int n);
inline void WidenSums(const double* sums, const double* comps, double* out, int n) {
  WidenSumsReference(sums, comps, out, n);
}
// AddWidenedSums: running[i] = running[i] + ReadSum(sums + i, comps + i) for i in [0, n) (a
// histogram's bins summed in z order without keeping each widened row). SIMD for fp32 sums, bit for
// bit the scalar reference.
template <typename T>
void AddWidenedSumsReference(const T* sums, const T* comps, double* running, int n) {
  for (int i = 0; i < n; ++i) running[i] = running[i] + ReadSum(sums + i, comps ? comps + i : nullptr);
}
void AddWidenedSums(const float* sums, const float* comps, double* running, int n);
inline void AddWidenedSums(const double* sums, const double* comps, double* running, int n) {
  AddWidenedSumsReference(sums, comps, running, n);
}
template <typename T>
void AddRowToSumsReference(const double* x, T* sums, T* comps, int n) {
  for (int i = 0; i < n; ++i) AddToSum(x[i], sums + i, comps ? comps + i : nullptr);
}
void AddRowToSums(const double* x, float* sums, float* comps, int n);
inline void AddRowToSums(const double* x, double* sums, double* comps, int n) {
  AddRowToSumsReference(x, sums, comps, n);
}

}  // namespace steady::cpu

#endif  // STEADY_KERNELS_CPU_STATE_UPDATE_H_
