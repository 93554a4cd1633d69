// Softmax attention of one query row over cached key/value rows: softmax's KV cache and
// sliding_window's ring buffer read their rows through this. A row holds, for each kv head, head_dim
// key values then value_dim value values: [kv_heads, head_dim + value_dim].
#ifndef STEADY_MODEL_MECHANISMS_KV_ROWS_H_
#define STEADY_MODEL_MECHANISMS_KV_ROWS_H_

#include <cstdint>

#include "model/mechanisms/common.h"

namespace steady {

// The rows in sequence order as up to two spans: `first_len` rows at `first`, then `second_len` at
// `second` (a ring buffer's older part, then its newer part; a plain cache is one span).
template <typename T>
struct KvRows {
  const T* first = nullptr;
  int64_t first_len = 0;
  const T* second = nullptr;
  int64_t second_len = 0;

  int64_t size() const { return first_len + second_len; }
  // The first `len` rows.
  KvRows Prefix(int64_t len) const {
    return len <= first_len ? KvRows{first, len} : KvRows{first, first_len, second, len - first_len};
  }
  const T* Row(int64_t j, int64_t row_floats) const {
    return j < first_len ? first + j * row_floats : second + (j - first_len) * row_floats;
  }
};

// Floats of one cached row: [kv_heads, head_dim + value_dim].
inline int64_t KvRowFloats(const AttnShape& s) { return int64_t(s.kv_heads) * (s.head_dim + s.value_dim); }

// Writes one token's k [kv_heads, head_dim] and v [kv_heads, value_dim] as a cached row.
template <typename T>
void WriteKvRow(const AttnShape& s, const T* k, const T* v, T* row);

// y [heads, value_dim] = softmax(scale q.k_j) weighted v_j over the rows, max-shifted, each query
// head of a GQA group against its kv head. The plain loop: the reference of the SIMD kernel and the
// fp64 path. Logits and sums in T, over the rows in sequence order. With `top` and `den` ([heads]
// each, or null) also each head's largest logit and its sum of exp(logit - top), what y was divided by.
template <typename T>
void AttendKvRowsReference(const AttnShape& s, double scale, const T* q, const KvRows<T>& rows, T* y,
                           T* top = nullptr, T* den = nullptr);

// The decode read: fp32 through kernels/cpu/kv_attention.h (SIMD, each row read once for a GQA
// group, thread-count invariant), fp64 through the loop above.
void AttendKvRows(const AttnShape& s, double scale, const float* q, const KvRows<float>& rows, float* y);
void AttendKvRows(const AttnShape& s, double scale, const double* q, const KvRows<double>& rows, double* y);

// n query rows q [n, heads, head_dim] over the rows causally: query t over the first
// rows.size() - n + 1 + t (the n queries' own rows are the last n), y [n, heads, value_dim]. Each y
// row is the same bits as AttendKvRows over its prefix: fp32 reads each row once for the n queries
// (kernels/cpu/kv_attention.h), fp64 calls the loop above per query.
void AttendKvRowsCausal(const AttnShape& s, double scale, int n, const float* q, const KvRows<float>& rows,
                        float* y);
void AttendKvRowsCausal(const AttnShape& s, double scale, int n, const double* q, const KvRows<double>& rows,
                        double* y);

// n query rows q [n, heads, head_dim], each over a window: the rows are `cached` then the n queries' own
// `fresh` [n, KvRowFloats], and query t reads the last `window` of them through its own row (all of
// them while there are fewer), y [n, heads, value_dim]. Each y row is the same bits as AttendKvRows
// over its window's rows alone: fp32 reads each row once for the n queries, the cached rows where they
// lie (kernels/cpu/kv_attention.h); fp64 copies the rows any query reads into one span and calls the
// loop above per query. `top` and `den` ([n, heads] each, or null) as AttendKvRowsReference's.
void AttendKvRowsWindowed(const AttnShape& s, double scale, int n, const float* q, const KvRows<float>& cached,
                          const float* fresh, int64_t window, float* y, float* top = nullptr, float* den = nullptr);
void AttendKvRowsWindowed(const AttnShape& s, double scale, int n, const double* q, const KvRows<double>& cached,
                          const double* fresh, int64_t window, double* y, double* top = nullptr,
                          double* den = nullptr);

}  // namespace steady

#endif  // STEADY_MODEL_MECHANISMS_KV_ROWS_H_
