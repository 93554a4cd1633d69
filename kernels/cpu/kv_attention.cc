// Highway compiles this file once per x86 instruction set (foreach_target.h) and HWY_DYNAMIC_DISPATCH
// picks the best one the CPU supports at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/kv_attention.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

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

// acc[d] += w * v[d] for d < n.
HWY_INLINE void Accumulate(float w, const float* HWY_RESTRICT v, float* HWY_RESTRICT acc, int n) {
  const hn::ScalableTag<float> d;
  const int lanes = int(hn::Lanes(d));
  const auto wv = hn::Set(d, w);
  int i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(hn::MulAdd(wv, hn::LoadU(d, v + i), hn::LoadU(d, acc + i)), d, acc + i);
  for (; i < n; ++i) acc[i] += w * v[i];
}

// Rows [j0, j1) of the cache, in three passes, each over the rows in order so that the cache streams
// from memory: the logits of every query head for row j (in w, [rows, heads], j-major), then
// exp(logit - the head's max over these rows) and their sums, then the weighted values. Leaves the
// chunk's unnormalized acc [heads, dv], its max top [heads] and sums den [heads]. Row j is
// first[j] for j < first_len, else second[j - first_len] (a ring buffer's two spans).
void AttendChunkLanes(int kv_heads, int group, int dk, int dv, float scale, const float* HWY_RESTRICT q,
                      const float* first, int64_t first_len, const float* second, int64_t j0, int64_t j1,
                      float* HWY_RESTRICT acc, float* HWY_RESTRICT top, float* HWY_RESTRICT den) {
  const hn::ScalableTag<float> d;
  const int lanes = int(hn::Lanes(d));
  const int heads = kv_heads * group;
  const int64_t row = int64_t(kv_heads) * (dk + dv);
  const auto row_at = [&](int64_t j) { return j < first_len ? first + j * row : second + (j - first_len) * row; };
  thread_local std::vector<float> w;
  w.resize(size_t(j1 - j0) * heads);
  std::fill(top, top + heads, -INFINITY);
  std::fill(den, den + heads, 0.0f);
  std::fill(acc, acc + int64_t(heads) * dv, 0.0f);
  for (int64_t j = j0; j < j1; ++j) {
    float* wj = w.data() + (j - j0) * heads;
    for (int g = 0; g < kv_heads; ++g) {
      const float* kj = row_at(j) + int64_t(g) * (dk + dv);
      for (int i = 0; i < group; ++i) {
        const int h = g * group + i;
        wj[h] = scale * Dot(q + int64_t(h) * dk, kj, dk);
        top[h] = std::max(top[h], wj[h]);
      }
    }
  }
  for (int64_t j = j0; j < j1; ++j) {
    float* wj = w.data() + (j - j0) * heads;
    int h = 0;
    for (; h + lanes <= heads; h += lanes) {
      const auto e = hn::Exp(d, hn::Sub(hn::LoadU(d, wj + h), hn::LoadU(d, top + h)));
      hn::StoreU(e, d, wj + h);
      hn::StoreU(hn::Add(hn::LoadU(d, den + h), e), d, den + h);
    }
    for (; h < heads; ++h) den[h] += wj[h] = std::exp(wj[h] - top[h]);
  }
  for (int64_t j = j0; j < j1; ++j) {
    const float* wj = w.data() + (j - j0) * heads;
    for (int g = 0; g < kv_heads; ++g) {
      const float* vj = row_at(j) + int64_t(g) * (dk + dv) + dk;
      for (int i = 0; i < group; ++i) {
        const int h = g * group + i;
        Accumulate(wj[h], vj, acc + int64_t(h) * dv, dv);
      }
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace steady::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/cpu/kv_attention.h"
#include "kernels/cpu/parallel.h"

namespace steady::cpu {

HWY_EXPORT(AttendChunkLanes);

// Chunks of a fixed number of rows, however many threads: each chunk's partial sums are formed the
// same way and combined in chunk order, so y does not depend on the thread count.
constexpr int64_t kChunkRows = 512;

void AttendKvCache(int kv_heads, int group, int dk, int dv, float scale, const float* q, const float* cache,
                   int64_t len, float* y) {
  AttendKvRows(kv_heads, group, dk, dv, scale, q, cache, len, nullptr, 0, y);
}

void AttendKvRows(int kv_heads, int group, int dk, int dv, float scale, const float* q, const float* first,
                  int64_t first_len, const float* second, int64_t second_len, float* y) {
  const int64_t len = first_len + second_len;
  const int heads = kv_heads * group;
  const int chunks = int(std::max<int64_t>(1, (len + kChunkRows - 1) / kChunkRows));
  thread_local std::vector<float> acc, top, den;  // per chunk: [heads, dv], [heads], [heads]
  acc.resize(size_t(chunks) * heads * dv);
  top.resize(size_t(chunks) * heads);
  den.resize(size_t(chunks) * heads);
  float* acc_p = acc.data();  // a task names this thread's buffers, not its own thread's
  float* top_p = top.data();
  float* den_p = den.data();
  // A lone session's long context spreads over the compute threads; beside other sessions (inside a
  // task of the step's attention) the chunks run on this thread.
  ParallelFor(chunks, [&](int c) {
    const int64_t j0 = c * kChunkRows;
    HWY_DYNAMIC_DISPATCH(AttendChunkLanes)(kv_heads, group, dk, dv, scale, q, first, first_len, second, j0,
                                           std::min(len, j0 + kChunkRows),
                                           acc_p + int64_t(c) * heads * dv, top_p + int64_t(c) * heads,
                                           den_p + int64_t(c) * heads);
  });
  for (int h = 0; h < heads; ++h) {
    float m = -INFINITY;
    for (int c = 0; c < chunks; ++c) m = std::max(m, top_p[int64_t(c) * heads + h]);
    float* yh = y + int64_t(h) * dv;
    std::fill(yh, yh + dv, 0.0f);
    float sum = 0.0f;
    for (int c = 0; c < chunks; ++c) {
      const float f = std::exp(top_p[int64_t(c) * heads + h] - m);  // 1 for the chunk holding the max
      sum += f * den_p[int64_t(c) * heads + h];
      const float* a = acc_p + (int64_t(c) * heads + h) * dv;
      for (int e = 0; e < dv; ++e) yh[e] += f * a[e];
    }
    for (int e = 0; e < dv; ++e) yh[e] /= sum;
  }
}

}  // namespace steady::cpu
#endif  // HWY_ONCE
