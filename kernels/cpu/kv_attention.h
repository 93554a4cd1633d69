// Softmax attention of one query row against a KV cache, in SIMD (kernels/cpu/kv_attention.cc): the
// decode step of the softmax mechanism (model/mechanisms/softmax.cc), whose cost grows with the
// context, and of sliding-window attention over its ring buffer. The plain loop beside them
// (model/mechanisms/kv_rows.h) stays the reference, and the fp64 path.
#ifndef STEADY_KERNELS_CPU_KV_ATTENTION_H_
#define STEADY_KERNELS_CPU_KV_ATTENTION_H_

#include <cstdint>

namespace steady::cpu {

// Cached rows as up to three spans in sequence order: len[i] rows at rows[i] (a ring buffer's older
// and newer parts, then rows not yet in it: sliding-window verification, model/mechanisms/sliding_window.cc).
struct KvSpans {
  const float* rows[3];
  int64_t len[3];
};

// The cache's row j holds, for each of `kv_heads` heads, dk key values then dv value values. q holds
// kv_heads * group query heads of dk values (the `group` heads of kv head g at g * group); y gets
// dv values per query head: y_h = sum_j softmax_j(scale * q_h . k_j) v_j over the first `len` rows,
// max-shifted. Each cached row is read once per kv head for its whole group.
void AttendKvCache(int kv_heads, int group, int dk, int dv, float scale, const float* q, const float* cache,
                   int64_t len, float* y);

// The same over rows held as two spans, `first_len` rows at `first` then `second_len` at `second` (a
// ring buffer's older and newer parts: sliding-window attention, model/mechanisms/sliding_window.cc).
// The rows are taken in that order and chunked as one sequence, so the result is the same bits as
// AttendKvCache over the rows copied into one span.
void AttendKvRows(int kv_heads, int group, int dk, int dv, float scale, const float* q, const float* first,
                  int64_t first_len, const float* second, int64_t second_len, float* y);

// n query rows q [n, kv_heads * group, dk] over the same rows, causally: query t over the first
// len - n + 1 + t rows (len = first_len + second_len: the n queries' own rows are the last n), y
// [n, heads, dv]. Speculative verification's rows and softmax's prefill chunk: each cached row is
// read once for all the queries that see it, and query t's y is the same bits as AttendKvRows over
// its rows alone, whatever n and the thread count.
void AttendKvRowsCausal(int kv_heads, int group, int dk, int dv, float scale, int n, const float* q,
                        const float* first, int64_t first_len, const float* second, int64_t second_len, float* y);

// The same with each query over a window: query t over the last `window` of the first len - n + 1 + t
// rows (all of them while there are fewer; len = the spans' rows). Sliding-window verification:
// query t's y is the same bits as AttendKvRows over its window's rows alone (chunked from the
// window's first row), whatever n and the thread count; each cached row is read once for all the
// queries of a block whose windows hold it. AttendKvRowsCausal is this with window = len. With
// `top` and `den` ([n, heads] each, or null) it also gives each query head's largest logit and its
// sum of exp(logit - top), what y was divided by: window_dark weighs its window against its dark
// part with them.
void AttendKvRowsWindowed(int kv_heads, int group, int dk, int dv, float scale, int n, const float* q,
                          const KvSpans& rows, int64_t window, float* y, float* top = nullptr,
                          float* den = nullptr);

}  // namespace steady::cpu

#endif  // STEADY_KERNELS_CPU_KV_ATTENTION_H_
