#include "kernels/cpu/ops.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/parallel.h"

namespace steady::cpu {

void MatMulNT(const float* x, int rows, int in, const float* w, int out, float* y) {
  // OpenBLAS packs the whole weight matrix on every sgemm call, a second pass over memory that a
  // decode step of a few rows cannot amortize (docs/cpu.md): those go through our kernel.
  if (rows <= kSmallRowsMax && SmallRowKernelInUse()) {
    MatMulNTSmallRows(x, rows, in, w, out, y);
    return;
  }
  if (rows == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, out, in, 1.0f, w, in, x, 1, 0.0f, y, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
}

double SumOfSquares(const float* x, int n) {
  // Four running sums (every fourth element each), added pairwise at the end: a sum is then not one
  // chain of n dependent additions (a decode step's norms were 1.2-1.5% of a 16-session q8 step on
  // that chain's latency). Each square is exact in double.
  double s[4] = {0, 0, 0, 0};
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int j = 0; j < 4; ++j) s[j] += double(x[i + j]) * x[i + j];
  }
  for (; i < n; ++i) s[i % 4] += double(x[i]) * x[i];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

void RmsNorm(const float* x, const float* weight, int rows, int dim, float eps, float* out) {
  ParallelRange(rows, std::max<int64_t>(1, kElementGrain / std::max(dim, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * dim;
      float* o = out + r * dim;
      const float inv = float(1.0 / std::sqrt(SumOfSquares(xr, dim) / dim + eps));
      for (int i = 0; i < dim; ++i) o[i] = xr[i] * inv * weight[i];
    }
  });
}

void Rope(float* x, int rows, int heads, int dim, const int64_t* positions, const float* inv_freq) {
  const int half = dim / 2;
  // Rows side by side on the compute threads (each row on its own: the same bits).
  ParallelRange(rows, std::max<int64_t>(1, kElementGrain / std::max(heads * dim, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int i = 0; i < half; ++i) {
        // Angle in double: positions reach 1e6+ and fp32 products lose the phase there.
        const double angle = double(positions[r]) * inv_freq[i];
        const float c = float(std::cos(angle)), s = float(std::sin(angle));
        for (int h = 0; h < heads; ++h) {
          float* v = x + (int64_t(r) * heads + h) * dim;
          const float a = v[i], b = v[i + half];
          v[i] = a * c - b * s;
          v[i + half] = b * c + a * s;
        }
      }
    }
  });
}

void AddInPlace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void GatherRows(const float* table, int dim, const int32_t* ids, int rows, float* out) {
  for (int r = 0; r < rows; ++r) std::memcpy(out + int64_t(r) * dim, table + int64_t(ids[r]) * dim, sizeof(float) * dim);
}

}  // namespace steady::cpu
