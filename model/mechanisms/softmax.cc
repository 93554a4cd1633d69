#include "model/mechanisms/softmax.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/kv_attention.h"
#include "model/mechanisms/attention.h"
#include "model/mechanisms/params_util.h"

namespace steady {

absl::Status ParseParams(const nlohmann::json& j, const AttnShape& s, SoftmaxParams* p) {
  return ParseScale(j, s, &p->scale);
}

absl::Status LoadTensors(const SafeTensors&, const std::string&, const AttnShape&, SoftmaxParams*) {
  return absl::OkStatus();
}
void RandomInitTensors(uint64_t, const AttnShape&, SoftmaxParams*) {}
void AppendTensors(const SoftmaxParams&, const std::string&, const AttnShape&,
                   std::vector<TensorToWrite>*) {}

nlohmann::json Describe(const SoftmaxParams& p) { return {{"scale", p.scale}}; }

size_t StateFloats(const LayerAttention&, const SoftmaxParams&) { return 0; }

template <typename T>
void InitState(const LayerAttention&, const SoftmaxParams&, StateView<T> st) {
  st.growing->clear();
}

namespace {

// y[h] for one query row against the first `len` cached keys. Cache row: [kv_heads, dk + dv].
// The query heads of a GQA group are handled together, so each cached row is read once per group.
// Logits and weights in T (float for serving); the softmax is max-shifted so exp() never overflows.
template <typename T>
void AttendCache(const AttnShape& s, double scale, const T* q, const T* cache, int64_t len, T* y) {
  const int row = s.kv_heads * (s.head_dim + s.value_dim);
  const int group = s.group();
  thread_local std::vector<T> logits;  // [group, len]
  thread_local std::vector<T> acc;     // [group, dv]
  logits.resize(size_t(group) * len);
  acc.resize(size_t(group) * s.value_dim);
  for (int g = 0; g < s.kv_heads; ++g) {
    const T* qg = q + size_t(g) * group * s.head_dim;
    std::vector<T> max_logit(group, T(-INFINITY));
    for (int64_t j = 0; j < len; ++j) {
      const T* kj = cache + j * row + g * (s.head_dim + s.value_dim);
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
        const T* vj = cache + j * row + g * (s.head_dim + s.value_dim) + s.head_dim;
        const T w = lh[j];
        for (int d = 0; d < s.value_dim; ++d) ah[d] += w * vj[d];
      }
      T* yh = y + size_t(g * group + h) * s.value_dim;
      for (int d = 0; d < s.value_dim; ++d) yh[d] = ah[d] / den;
    }
  }
}

// The decode step's attention: fp32 in SIMD (kernels/cpu/kv_attention.h), fp64 through the loop above.
void Attend(const AttnShape& s, double scale, const float* q, const float* cache, int64_t len, float* y) {
  cpu::AttendKvCache(s.kv_heads, s.group(), s.head_dim, s.value_dim, float(scale), q, cache, len, y);
}
void Attend(const AttnShape& s, double scale, const double* q, const double* cache, int64_t len, double* y) {
  AttendCache(s, scale, q, cache, len, y);
}

template <typename T>
void AppendToCache(const AttnShape& s, const T* k, const T* v, std::vector<T>* cache) {
  for (int g = 0; g < s.kv_heads; ++g) {
    cache->insert(cache->end(), k + g * s.head_dim, k + (g + 1) * s.head_dim);
    cache->insert(cache->end(), v + g * s.value_dim, v + (g + 1) * s.value_dim);
  }
}

}  // namespace

template <typename T>
void Step(const LayerAttention& a, const SoftmaxParams& p, const T* q, const T* k, const T* v,
          StateView<T> st, T* y) {
  const AttnShape& s = a.shape;
  AppendToCache(s, k, v, st.growing);
  const int64_t len = st.growing->size() / (s.kv_heads * (s.head_dim + s.value_dim));
  Attend(s, p.scale, q, st.growing->data(), len, y);
}

template <typename T>
void Chunked(const LayerAttention& a, const SoftmaxParams& p, int n, const T* q, const T* k,
             const T* v, StateView<T> st, T* y) {
  // The KV cache makes every token's attention independent given the cache: append, then attend.
  for (int t = 0; t < n; ++t) {
    Step(a, p, q + int64_t(t) * a.shape.heads * a.shape.head_dim,
         k + int64_t(t) * a.shape.kv_heads * a.shape.head_dim,
         v + int64_t(t) * a.shape.kv_heads * a.shape.value_dim, st,
         y + int64_t(t) * a.shape.heads * a.shape.value_dim);
  }
}

template <typename T>
void Parallel(const LayerAttention& a, const SoftmaxParams& p, int n, const T* q, const T* k,
              const T* v, T* y) {
  std::vector<T> cache;
  for (int t = 0; t < n; ++t) {
    AppendToCache(a.shape, k + int64_t(t) * a.shape.kv_heads * a.shape.head_dim,
                  v + int64_t(t) * a.shape.kv_heads * a.shape.value_dim, &cache);
    AttendCache(a.shape, p.scale, q + int64_t(t) * a.shape.heads * a.shape.head_dim, cache.data(),
                t + 1, y + int64_t(t) * a.shape.heads * a.shape.value_dim);
  }
}

STEADY_INSTANTIATE_MECHANISM(SoftmaxParams)

}  // namespace steady
