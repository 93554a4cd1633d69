// Highway compiles this file once per x86 instruction set (foreach_target.h) and HWY_DYNAMIC_DISPATCH
// picks the best one the CPU supports at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/kv_attention.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/cache_control.h>
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/kv_attention.h"

HWY_BEFORE_NAMESPACE();
namespace steady::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// a . b over n values: lane by lane, then the lanes, then the tail.
HWY_INLINE float Dot(const float* HWY_RESTRICT a, const float* HWY_RESTRICT b, int n) {
  const hn::ScalableTag<float> d;
  const int lanes = int(hn::Lanes(d));
  auto acc = hn::Zero(d);
  int i = 0;
  for (; i + lanes <= n; i += lanes) acc = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), acc);
  float s = hn::GetLane(hn::SumOfLanes(d, acc));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// The sums of lanes of a0..a3 (each over its own lanes alone), reduced together.
template <class D>
HWY_INLINE void SumLanes4(D d, hn::Vec<D> a0, hn::Vec<D> a1, hn::Vec<D> a2, hn::Vec<D> a3, float* HWY_RESTRICT sum) {
#if HWY_TARGET == HWY_SCALAR
  sum[0] = hn::GetLane(a0), sum[1] = hn::GetLane(a1), sum[2] = hn::GetLane(a2), sum[3] = hn::GetLane(a3);
#else
  const int lanes = int(hn::Lanes(d));
  // In each 128-bit block: [a0, a1, a2, a3]'s sums over the block's four lanes; then the blocks added.
  const hn::Repartition<uint64_t, decltype(d)> d64;
  const auto s01 = hn::Add(hn::InterleaveLower(d, a0, a1), hn::InterleaveUpper(d, a0, a1));
  const auto s23 = hn::Add(hn::InterleaveLower(d, a2, a3), hn::InterleaveUpper(d, a2, a3));
  const auto sums = hn::Add(hn::BitCast(d, hn::InterleaveLower(d64, hn::BitCast(d64, s01), hn::BitCast(d64, s23))),
                            hn::BitCast(d, hn::InterleaveUpper(d64, hn::BitCast(d64, s01), hn::BitCast(d64, s23))));
  HWY_ALIGN float blocks[hn::MaxLanes(d)];
  hn::Store(sums, d, blocks);
  const hn::Full128<float> d4;
  auto sum4 = hn::Load(d4, blocks);
  for (int b = 4; b < lanes; b += 4) sum4 = hn::Add(sum4, hn::Load(d4, blocks + b));
  hn::StoreU(sum4, d4, sum);
#endif
}

// For the four queries q_r = q + r * n: out[r] = scale * (q_r . k) over n values and
// top[r] = max(top[r], out[r]). k's vectors are loaded once for the four, and the four sums of lanes
// are reduced together; each query's value depends on its own inputs alone.
HWY_INLINE void ScaledDot4(const float* HWY_RESTRICT q, const float* HWY_RESTRICT k, int n, float scale,
                           float* HWY_RESTRICT out, float* HWY_RESTRICT top) {
  const hn::ScalableTag<float> d;
  const int lanes = int(hn::Lanes(d));
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  int x = 0;
  for (; x + lanes <= n; x += lanes) {
    const auto kv = hn::LoadU(d, k + x);
    a0 = hn::MulAdd(hn::LoadU(d, q + x), kv, a0);
    a1 = hn::MulAdd(hn::LoadU(d, q + n + x), kv, a1);
    a2 = hn::MulAdd(hn::LoadU(d, q + 2 * n + x), kv, a2);
    a3 = hn::MulAdd(hn::LoadU(d, q + 3 * n + x), kv, a3);
  }
  HWY_ALIGN float sum[4];
  SumLanes4(d, a0, a1, a2, a3, sum);
  for (; x < n; ++x) {
    for (int r = 0; r < 4; ++r) sum[r] += q[r * n + x] * k[x];
  }
  for (int r = 0; r < 4; ++r) {
    out[r] = scale * sum[r];
    top[r] = std::max(top[r], out[r]);
  }
}

// ScaledDot4 for four heads h[0..3] each against its own kv head's key (heads of different kv heads:
// the heads a group of fewer than four leaves, which a head at a time would each reduce its lanes
// alone): out[h] = scale * (q_h . k_h) over n values, q_h at q + h * n, k_h at k[r], top[h] updated.
HWY_INLINE void ScaledDot4Heads(const float* HWY_RESTRICT q, const float* const* k, const int* h, int n, float scale,
                                float* HWY_RESTRICT out, float* HWY_RESTRICT top) {
  const hn::ScalableTag<float> d;
  const int lanes = int(hn::Lanes(d));
  const float* q0 = q + int64_t(h[0]) * n;
  const float* q1 = q + int64_t(h[1]) * n;
  const float* q2 = q + int64_t(h[2]) * n;
  const float* q3 = q + int64_t(h[3]) * n;
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  int x = 0;
  for (; x + lanes <= n; x += lanes) {
    a0 = hn::MulAdd(hn::LoadU(d, q0 + x), hn::LoadU(d, k[0] + x), a0);
    a1 = hn::MulAdd(hn::LoadU(d, q1 + x), hn::LoadU(d, k[1] + x), a1);
    a2 = hn::MulAdd(hn::LoadU(d, q2 + x), hn::LoadU(d, k[2] + x), a2);
    a3 = hn::MulAdd(hn::LoadU(d, q3 + x), hn::LoadU(d, k[3] + x), a3);
  }
  HWY_ALIGN float sum[4];
  SumLanes4(d, a0, a1, a2, a3, sum);
  const float* qs[4] = {q0, q1, q2, q3};
  for (; x < n; ++x) {
    for (int r = 0; r < 4; ++r) sum[r] += qs[r][x] * k[r][x];
  }
  for (int r = 0; r < 4; ++r) {
    out[h[r]] = scale * sum[r];
    top[h[r]] = std::max(top[h[r]], out[h[r]]);
  }
}

// Heads h0..h0+NH-1's weighted values, NV vectors of them from value e: for each head r and vector c,
// acc[r * dv + e + c * lanes + x] = sum over rows j in [j0, j1), in order, of w[(j - j0) * w_stride + r]
// times the head's value e + c * lanes + x of row j (at row_at(j) + offset[r]: the head's kv head's
// values). The NH x NV sums stay in registers as independent chains of multiply-adds, each row's
// values loaded once for the heads that share them: a head's sum is the same operations whatever
// the tile holds it (one chain alone waits on each multiply-add's latency; a small model's few
// heads of one vector each took most of its decode step that way).
template <int NH, int NV, class D, class RowAt>
HWY_INLINE void WeightValuesTile(D d, const float* HWY_RESTRICT w, int64_t w_stride, const RowAt& row_at, int64_t j0,
                                 int64_t j1, const int64_t* offset, int e, int dv, float* HWY_RESTRICT acc) {
  const int lanes = int(hn::Lanes(d));
  hn::Vec<D> a[NH][NV];
#pragma GCC unroll 16
  for (int k = 0; k < NH * NV; ++k) a[k / NV][k % NV] = hn::Zero(d);
  for (int64_t j = j0; j < j1; ++j) {
    const float* rj = row_at(j);
    const float* wj = w + (j - j0) * w_stride;
#pragma GCC unroll 8
    for (int r = 0; r < NH; ++r) {
      const auto wv = hn::Set(d, wj[r]);
      const float* vj = rj + offset[r] + e;
#pragma GCC unroll 4
      for (int c = 0; c < NV; ++c) a[r][c] = hn::MulAdd(wv, hn::LoadU(d, vj + c * lanes), a[r][c]);
    }
  }
#pragma GCC unroll 16
  for (int k = 0; k < NH * NV; ++k) hn::StoreU(a[k / NV][k % NV], d, acc + int64_t(k / NV) * dv + e + (k % NV) * lanes);
}

// Every head's weighted values (acc [heads, dv], written whole): tiles of up to 16 chains, NV of a
// head's full vectors at a time times NH = 16 / NV heads (4 x 4 at llama1b's 64 values, 16 x 1 at a
// small model's 16), then each head's tail of fewer than a vector's values one by one.
template <class D, class RowAt>
HWY_INLINE void WeightAllValues(D d, const float* HWY_RESTRICT w, int heads, const RowAt& row_at, int64_t j0, int64_t j1,
                                const int64_t* offset, int dv, float* HWY_RESTRICT acc) {
  const int lanes = int(hn::Lanes(d));
  int e = 0;
  for (; e + lanes <= dv;) {
    const int nv = std::min(4, (dv - e) / lanes);
    int h = 0;
    const auto tiles = [&]<int NV>() {
      constexpr int kNH = 16 / NV;
      for (; h + kNH <= heads; h += kNH) {
        WeightValuesTile<kNH, NV>(d, w + h, heads, row_at, j0, j1, offset + h, e, dv, acc + int64_t(h) * dv);
      }
      for (; h + 4 <= heads; h += 4) {
        WeightValuesTile<4, NV>(d, w + h, heads, row_at, j0, j1, offset + h, e, dv, acc + int64_t(h) * dv);
      }
      for (; h < heads; ++h) WeightValuesTile<1, NV>(d, w + h, heads, row_at, j0, j1, offset + h, e, dv, acc + int64_t(h) * dv);
    };
    switch (nv) {
      case 4: tiles.template operator()<4>(); break;
      case 3: tiles.template operator()<3>(); break;
      case 2: tiles.template operator()<2>(); break;
      default: tiles.template operator()<1>(); break;
    }
    e += nv * lanes;
  }
  for (int h = 0; h < heads; ++h) {
    for (int x = e; x < dv; ++x) {
      float sum = 0;
      for (int64_t j = j0; j < j1; ++j) sum += w[(j - j0) * heads + h] * row_at(j)[offset[h] + x];
      acc[int64_t(h) * dv + x] = sum;
    }
  }
}

// A query's logits over fewer heads than lanes (a small model), taken as one flat run of `total`
// values: flat[x] = exp(flat[x] - top[x % heads]), each vector spanning lanes / heads rows against the
// maxima repeated as often; den[h] += the sum of head h's values, kept in the same pattern and folded
// per head at the end. The last values, fewer than a vector's worth, are padded with the maxima.
template <class D>
HWY_INLINE void ExpFlat(D d, float* HWY_RESTRICT flat, int64_t total, int heads, const float* HWY_RESTRICT top,
                        float* HWY_RESTRICT den) {
  const int lanes = int(hn::Lanes(d));
  HWY_ALIGN float pattern[hn::MaxLanes(d)];
  for (int x = 0; x < lanes; ++x) pattern[x] = top[x % heads];
  const auto top_v = hn::Load(d, pattern);
  auto den_v = hn::Zero(d);
  int64_t x = 0;
  for (; x + lanes <= total; x += lanes) {
    const auto e = hn::Exp(d, hn::Sub(hn::LoadU(d, flat + x), top_v));
    hn::StoreU(e, d, flat + x);
    den_v = hn::Add(den_v, e);
  }
  if (x < total) {
    const int valid = int(total - x);
    HWY_ALIGN float last[hn::MaxLanes(d)];
    hn::Store(top_v, d, last);
    std::copy(flat + x, flat + total, last);
    const auto e = hn::IfThenElseZero(hn::FirstN(d, size_t(valid)), hn::Exp(d, hn::Sub(hn::Load(d, last), top_v)));
    hn::Store(e, d, last);
    std::copy(last, last + valid, flat + x);
    den_v = hn::Add(den_v, e);
  }
  hn::Store(den_v, d, pattern);
  for (int k = 0; k < lanes; ++k) den[k % heads] += pattern[k];
}

// Rows [begins[t], ends[t]) of the cache for each query t < nq of a block (q_t at q + t * heads * dk; a
// query with ends[t] <= begins[t] is skipped), in three passes, each over the rows in order so that the
// cache streams from memory and each row is read once for the whole block: the logits of every query
// head for row j (in w, [nq, rows, heads], j-major per query), then exp(logit - the head's max over its
// rows) and their sums, then the weighted values. Leaves each query's unnormalized acc [heads, dv], its
// max top [heads] and sums den [heads] at acc + t * heads * dv, top + t * heads, den + t * heads. Row j
// is in the first of the three spans of `rows` that reaches past it (a ring buffer's two spans, then
// rows not yet in it). A query's values are the same operations in the same order whatever the other
// queries of its block and wherever its rows begin.
void AttendChunkQueries(int kv_heads, int group, int dk, int dv, float scale, int nq, const float* HWY_RESTRICT q,
                        const int64_t* begins, const int64_t* ends, const KvSpans& rows, float* HWY_RESTRICT acc,
                        float* HWY_RESTRICT top, float* HWY_RESTRICT den) {
  const hn::ScalableTag<float> d;
  const int lanes = int(hn::Lanes(d));
  const int heads = kv_heads * group;
  const int64_t row = int64_t(kv_heads) * (dk + dv);
  const int64_t end0 = rows.len[0], end1 = end0 + rows.len[1];
  const auto row_at = [&](int64_t j) {
    return j < end0 ? rows.rows[0] + j * row : j < end1 ? rows.rows[1] + (j - end0) * row : rows.rows[2] + (j - end1) * row;
  };
  std::fill(top, top + int64_t(nq) * heads, -INFINITY);
  std::fill(den, den + int64_t(nq) * heads, 0.0f);
  std::fill(acc, acc + int64_t(nq) * heads * dv, 0.0f);
  int64_t j0 = INT64_MAX, j1 = 0;  // the block's rows: the union of the queries' [begins[t], ends[t])
  for (int t = 0; t < nq; ++t) {
    if (ends[t] > begins[t]) j0 = std::min(j0, begins[t]), j1 = std::max(j1, ends[t]);
  }
  if (j1 <= j0) return;
  thread_local std::vector<float> w;
  w.resize(size_t(nq) * (j1 - j0) * heads);
  const auto w_at = [&](int t, int64_t j) { return w.data() + (int64_t(t) * (j1 - j0) + (j - j0)) * heads; };
  // The rows stream from memory in order, but a row of a large model is a page of its own (4 KB at
  // the llama1b shape), where the hardware's stream prefetch stops: each row a few ahead is asked for
  // by hand, a cache line at a time.
  constexpr int64_t kPrefetchRows = 4;
  // The heads past each group's fours (all of them when a group has fewer than four heads: a small
  // model's), their logits four at a time across kv heads (ScaledDot4Heads), the last few alone.
  thread_local std::vector<int> rest;
  rest.clear();
  for (int g = 0; g < kv_heads; ++g) {
    for (int i = group / 4 * 4; i < group; ++i) rest.push_back(g * group + i);
  }
  const int64_t row_bytes = row * int64_t(sizeof(float));
  for (int64_t j = j0; j < j1; ++j) {
    if (j + kPrefetchRows < j1) {
      const char* ahead = reinterpret_cast<const char*>(row_at(j + kPrefetchRows));
      for (int64_t b = 0; b < row_bytes; b += 64) hwy::Prefetch(ahead + b);
    }
    const float* rj = row_at(j);
    const float* kh[4];  // the keys of four of the heads a group of fewer than four leaves
    for (int t = 0; t < nq; ++t) {
      if (j < begins[t] || j >= ends[t]) continue;
      float* wj = w_at(t, j);
      const float* qt = q + int64_t(t) * heads * dk;
      float* top_t = top + int64_t(t) * heads;
      for (int g = 0; g < kv_heads; ++g) {
        for (int i = 0; i + 4 <= group; i += 4) {
          const int h = g * group + i;
          ScaledDot4(qt + int64_t(h) * dk, rj + int64_t(g) * (dk + dv), dk, scale, wj + h, top_t + h);
        }
      }
      int r = 0;
      for (; r + 4 <= int(rest.size()); r += 4) {
        for (int u = 0; u < 4; ++u) kh[u] = rj + int64_t(rest[size_t(r + u)] / group) * (dk + dv);
        ScaledDot4Heads(qt, kh, rest.data() + r, dk, scale, wj, top_t);
      }
      for (; r < int(rest.size()); ++r) {
        const int h = rest[size_t(r)];
        wj[h] = scale * Dot(qt + int64_t(h) * dk, rj + int64_t(h / group) * (dk + dv), dk);
        top_t[h] = std::max(top_t[h], wj[h]);
      }
    }
  }
  for (int t = 0; t < nq; ++t) {
    if (ends[t] <= begins[t]) continue;
    const float* top_t = top + int64_t(t) * heads;
    float* den_t = den + int64_t(t) * heads;
    if (heads < lanes && lanes % heads == 0) {
      ExpFlat(d, w_at(t, begins[t]), (ends[t] - begins[t]) * heads, heads, top_t, den_t);
      continue;
    }
    for (int64_t j = begins[t]; j < ends[t]; ++j) {
      float* wj = w_at(t, j);
      int h = 0;
      for (; h + lanes <= heads; h += lanes) {
        const auto e = hn::Exp(d, hn::Sub(hn::LoadU(d, wj + h), hn::LoadU(d, top_t + h)));
        hn::StoreU(e, d, wj + h);
        hn::StoreU(hn::Add(hn::LoadU(d, den_t + h), e), d, den_t + h);
      }
      for (; h < heads; ++h) den_t[h] += wj[h] = std::exp(wj[h] - top_t[h]);
    }
  }
  // The weighted values: each head's sums over the rows in order, held in registers across the rows
  // instead of loaded and stored at every row, up to 16 independent chains at a time (WeightAllValues).
  thread_local std::vector<int64_t> offsets;  // head h's values: row_at(j) + offsets[h]
  offsets.resize(size_t(heads));
  for (int h = 0; h < heads; ++h) offsets[size_t(h)] = int64_t(h / group) * (dk + dv) + dk;
  for (int t = 0; t < nq; ++t) {
    const int64_t begin = begins[t], end = ends[t];
    if (end <= begin) continue;
    WeightAllValues(d, w_at(t, begin), heads, row_at, begin, end, offsets.data(), dv, acc + int64_t(t) * heads * dv);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace steady::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/cpu/kv_attention.h"
#include "kernels/cpu/parallel.h"

namespace steady::cpu {

HWY_EXPORT(AttendChunkQueries);

// Rows per chunk: a power of two, at least 128, and the fewest that make a chunk 256 KB of cache or
// more (128 rows of 4 KB at the llama1b shape stay in L2 from the logits pass to the values pass;
// a small model's rows come 512 at a time, so that its chunks pay for their merge). It depends on
// the shape alone, never on the thread count: each chunk's partial sums are formed the same way and
// combined in chunk order, so y does not depend on the thread count.
int64_t ChunkRows(int kv_heads, int dk, int dv) {
  const int64_t row_bytes = int64_t(kv_heads) * (dk + dv) * int64_t(sizeof(float));
  int64_t rows = 128;
  while (rows * row_bytes < (int64_t(256) << 10)) rows *= 2;
  return rows;
}

// At most this many queries a task keeps their logits and sums in the nearer caches.
constexpr int kBlockQueries = 4;

void AttendKvCache(int kv_heads, int group, int dk, int dv, float scale, const float* q, const float* cache,
                   int64_t len, float* y) {
  AttendKvRows(kv_heads, group, dk, dv, scale, q, cache, len, nullptr, 0, y);
}

void AttendKvRows(int kv_heads, int group, int dk, int dv, float scale, const float* q, const float* first,
                  int64_t first_len, const float* second, int64_t second_len, float* y) {
  AttendKvRowsCausal(kv_heads, group, dk, dv, scale, 1, q, first, first_len, second, second_len, y);
}

void AttendKvRowsCausal(int kv_heads, int group, int dk, int dv, float scale, int n, const float* q,
                        const float* first, int64_t first_len, const float* second, int64_t second_len, float* y) {
  AttendKvRowsWindowed(kv_heads, group, dk, dv, scale, n, q, KvSpans{{first, second, nullptr}, {first_len, second_len, 0}},
                       first_len + second_len, y);
}

void AttendKvRowsWindowed(int kv_heads, int group, int dk, int dv, float scale, int n, const float* q,
                          const KvSpans& rows, int64_t window, float* y, float* top_out, float* den_out) {
  const int64_t len = rows.len[0] + rows.len[1] + rows.len[2];
  const int heads = kv_heads * group;
  // Query t's rows: [begin_of(t), end_of(t)), chunked from its own first row as a call for it alone
  // (n = 1 over just those rows) chunks them.
  const auto end_of = [&](int t) { return len - n + 1 + t; };
  const auto begin_of = [&](int t) { return std::max<int64_t>(0, end_of(t) - window); };
  const int64_t chunk_rows = ChunkRows(kv_heads, dk, dv);
  const int64_t most_rows = std::min(window, len);  // the last query's rows, the most any query has
  const int chunks = int(std::max<int64_t>(1, (most_rows + chunk_rows - 1) / chunk_rows));
  // Tasks: a chunk of rows times a block of queries, enough of them to keep the compute threads busy
  // when the rows are few. How the queries are split does not change any query's values.
  const int blocks = std::min(n, std::max((n + kBlockQueries - 1) / kBlockQueries, (ComputeThreads() + chunks - 1) / chunks));
  const int per_block = (n + blocks - 1) / blocks;
  thread_local std::vector<float> acc, top, den;  // per chunk and query: [heads, dv], [heads], [heads]
  thread_local std::vector<int64_t> begins, ends;  // per chunk and query: its rows in the chunk
  const size_t parts = size_t(chunks) * n;
  acc.resize(parts * heads * dv);
  top.resize(parts * heads);
  den.resize(parts * heads);
  begins.resize(parts);
  ends.resize(parts);
  for (int c = 0; c < chunks; ++c) {
    for (int t = 0; t < n; ++t) {
      const int64_t begin = std::min(end_of(t), begin_of(t) + c * chunk_rows);
      begins[size_t(c) * n + t] = begin;
      ends[size_t(c) * n + t] = std::min(end_of(t), begin + chunk_rows);
    }
  }
  float* acc_p = acc.data();  // a task names this thread's buffers, not its own thread's
  float* top_p = top.data();
  float* den_p = den.data();
  const int64_t* begins_p = begins.data();
  const int64_t* ends_p = ends.data();
  const auto task = [&](int task) {
    const int c = task / blocks, t0 = (task % blocks) * per_block, nq = std::min(n, t0 + per_block) - t0;
    if (nq <= 0) return;
    const size_t part = size_t(c) * n + t0;
    HWY_DYNAMIC_DISPATCH(AttendChunkQueries)(kv_heads, group, dk, dv, scale, nq, q + int64_t(t0) * heads * dk,
                                             begins_p + part, ends_p + part, rows, acc_p + part * heads * dv,
                                             top_p + part * heads, den_p + part * heads);
  };
  // A lone session's verify rows or long context spread over the compute threads; beside other
  // sessions (inside a task of the step's attention), or when there is too little work to hand out,
  // the tasks run on this thread.
  if (most_rows * heads * (dk + dv) * n < kMinParallelWork) {
    for (int t = 0; t < chunks * blocks; ++t) task(t);
  } else {
    ParallelFor(chunks * blocks, task);
  }
  for (int t = 0; t < n; ++t) {
    const int t_chunks = int(std::max<int64_t>(1, (end_of(t) - begin_of(t) + chunk_rows - 1) / chunk_rows));
    for (int h = 0; h < heads; ++h) {
      const auto part = [&](int c) { return size_t(c) * n + t; };
      float m = -INFINITY;
      for (int c = 0; c < t_chunks; ++c) m = std::max(m, top_p[part(c) * heads + h]);
      float* yh = y + (int64_t(t) * heads + h) * dv;
      std::fill(yh, yh + dv, 0.0f);
      float sum = 0.0f;
      for (int c = 0; c < t_chunks; ++c) {
        const float f = std::exp(top_p[part(c) * heads + h] - m);  // 1 for the chunk holding the max
        sum += f * den_p[part(c) * heads + h];
        const float* a = acc_p + (part(c) * heads + h) * dv;
        for (int e = 0; e < dv; ++e) yh[e] += f * a[e];
      }
      for (int e = 0; e < dv; ++e) yh[e] /= sum;
      if (top_out != nullptr) top_out[int64_t(t) * heads + h] = m;
      if (den_out != nullptr) den_out[int64_t(t) * heads + h] = sum;
    }
  }
}

}  // namespace steady::cpu
#endif  // HWY_ONCE
