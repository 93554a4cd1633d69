#include "model/mechanisms/kv_rows.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/kv_attention.h"

namespace steady {

template <typename T>
void WriteKvRow(const AttnShape& s, const T* k, const T* v, T* row) {
  for (int g = 0; g < s.kv_heads; ++g) {
    T* out = row + int64_t(g) * (s.head_dim + s.value_dim);
    std::copy(k + int64_t(g) * s.head_dim, k + int64_t(g + 1) * s.head_dim, out);
    std::copy(v + int64_t(g) * s.value_dim, v + int64_t(g + 1) * s.value_dim, out + s.head_dim);
  }
}

// The query heads of a GQA group are handled together, so each cached row is read once per group.
template <typename T>
void AttendKvRowsReference(const AttnShape& s, double scale, const T* q, const KvRows<T>& rows, T* y, T* top,
                           T* den_out) {
  const int64_t row = KvRowFloats(s);
  const int64_t len = rows.size();
  const int group = s.group();
  thread_local std::vector<T> logits;  // [group, len]
  thread_local std::vector<T> acc;     // [group, dv]
  logits.resize(size_t(group) * len);
  acc.resize(size_t(group) * s.value_dim);
  for (int g = 0; g < s.kv_heads; ++g) {
    const T* qg = q + size_t(g) * group * s.head_dim;
    std::vector<T> max_logit(group, T(-INFINITY));
    for (int64_t j = 0; j < len; ++j) {
      const T* kj = rows.Row(j, row) + g * (s.head_dim + s.value_dim);
      for (int h = 0; h < group; ++h) {
        T dot = 0;
        for (int d = 0; d < s.head_dim; ++d) dot += qg[h * s.head_dim + d] * kj[d];
        const T x = T(scale) * dot;
        logits[h * len + j] = x;
        max_logit[h] = std::max(max_logit[h], x);
      }
    }
    std::fill(acc.begin(), acc.end(), T(0));
    for (int h = 0; h < group; ++h) {
      T den = 0;
      T* lh = logits.data() + h * len;
      for (int64_t j = 0; j < len; ++j) den += lh[j] = std::exp(lh[j] - max_logit[h]);
      T* ah = acc.data() + h * s.value_dim;
      for (int64_t j = 0; j < len; ++j) {
        const T* vj = rows.Row(j, row) + g * (s.head_dim + s.value_dim) + s.head_dim;
        const T w = lh[j];
        for (int d = 0; d < s.value_dim; ++d) ah[d] += w * vj[d];
      }
      T* yh = y + size_t(g * group + h) * s.value_dim;
      for (int d = 0; d < s.value_dim; ++d) yh[d] = ah[d] / den;
      if (top != nullptr) top[g * group + h] = max_logit[h];
      if (den_out != nullptr) den_out[g * group + h] = den;
    }
  }
}

void AttendKvRows(const AttnShape& s, double scale, const float* q, const KvRows<float>& rows, float* y) {
  cpu::AttendKvRows(s.kv_heads, s.group(), s.head_dim, s.value_dim, float(scale), q, rows.first, rows.first_len,
                    rows.second, rows.second_len, y);
}
void AttendKvRows(const AttnShape& s, double scale, const double* q, const KvRows<double>& rows, double* y) {
  AttendKvRowsReference(s, scale, q, rows, y);
}

void AttendKvRowsCausal(const AttnShape& s, double scale, int n, const float* q, const KvRows<float>& rows,
                        float* y) {
  cpu::AttendKvRowsCausal(s.kv_heads, s.group(), s.head_dim, s.value_dim, float(scale), n, q, rows.first,
                          rows.first_len, rows.second, rows.second_len, y);
}
void AttendKvRowsCausal(const AttnShape& s, double scale, int n, const double* q, const KvRows<double>& rows,
                        double* y) {
  for (int t = 0; t < n; ++t) {
    AttendKvRowsReference(s, scale, q + int64_t(t) * s.heads * s.head_dim, rows.Prefix(rows.size() - n + 1 + t),
                          y + int64_t(t) * s.heads * s.value_dim);
  }
}

void AttendKvRowsWindowed(const AttnShape& s, double scale, int n, const float* q, const KvRows<float>& cached,
                          const float* fresh, int64_t window, float* y, float* top, float* den) {
  const cpu::KvSpans rows{{cached.first, cached.second, fresh}, {cached.first_len, cached.second_len, n}};
  cpu::AttendKvRowsWindowed(s.kv_heads, s.group(), s.head_dim, s.value_dim, float(scale), n, q, rows, window, y,
                            top, den);
}
void AttendKvRowsWindowed(const AttnShape& s, double scale, int n, const double* q, const KvRows<double>& cached,
                          const double* fresh, int64_t window, double* y, double* top, double* den) {
  const int64_t row = KvRowFloats(s);
  const int64_t kept = std::min<int64_t>(cached.size(), std::max<int64_t>(0, window - 1));  // cached rows any query reads
  std::vector<double> rows(size_t(kept + n) * row);
  for (int64_t j = 0; j < kept; ++j) {
    const double* src = cached.Row(cached.size() - kept + j, row);
    std::copy(src, src + row, rows.data() + j * row);
  }
  std::copy(fresh, fresh + int64_t(n) * row, rows.data() + kept * row);
  for (int t = 0; t < n; ++t) {
    const int64_t end = kept + t + 1, begin = std::max<int64_t>(0, end - window);
    AttendKvRowsReference(s, scale, q + int64_t(t) * s.heads * s.head_dim,
                          KvRows<double>{rows.data() + begin * row, end - begin}, y + int64_t(t) * s.heads * s.value_dim,
                          top != nullptr ? top + int64_t(t) * s.heads : nullptr,
                          den != nullptr ? den + int64_t(t) * s.heads : nullptr);
  }
}

template void WriteKvRow<float>(const AttnShape&, const float*, const float*, float*);
template void WriteKvRow<double>(const AttnShape&, const double*, const double*, double*);
template void AttendKvRowsReference<float>(const AttnShape&, double, const float*, const KvRows<float>&, float*,
                                           float*, float*);
template void AttendKvRowsReference<double>(const AttnShape&, double, const double*, const KvRows<double>&, double*,
                                            double*, double*);

}  // namespace steady
