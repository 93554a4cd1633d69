#include "model/mechanisms/softmax.h"

#include "model/mechanisms/attention.h"
#include "model/mechanisms/kv_rows.h"
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

template <typename T>
void AppendToCache(const AttnShape& s, const T* k, const T* v, std::vector<T>* cache) {
  cache->resize(cache->size() + KvRowFloats(s));
  WriteKvRow(s, k, v, cache->data() + cache->size() - KvRowFloats(s));
}

}  // namespace

template <typename T>
void Step(const LayerAttention& a, const SoftmaxParams& p, const T* q, const T* k, const T* v,
          StateView<T> st, T* y) {
  const AttnShape& s = a.shape;
  AppendToCache(s, k, v, st.growing);
  const int64_t len = int64_t(st.growing->size()) / KvRowFloats(s);
  // The decode read: fp32 in SIMD (kernels/cpu/kv_attention.h), fp64 through the plain loop.
  AttendKvRows(s, p.scale, q, KvRows<T>{st.growing->data(), len}, y);
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
    AttendKvRowsReference(a.shape, p.scale, q + int64_t(t) * a.shape.heads * a.shape.head_dim,
                          KvRows<T>{cache.data(), t + 1}, y + int64_t(t) * a.shape.heads * a.shape.value_dim);
  }
}

STEADY_INSTANTIATE_MECHANISM(SoftmaxParams)

}  // namespace steady
