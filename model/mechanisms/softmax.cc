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
void Steps(const LayerAttention& a, const SoftmaxParams& p, int n, const T* q, const T* k, const T* v,
           StateView<T> st, T* y) {
  // Step for each token appends its row, then attends over the cache. A row never changes an earlier
  // one, so all n rows are appended first, and each token then attends over its own prefix of the
  // cache, the n side by side: each cached row is read once for them all, and each token's y is the
  // same bits as its Step's.
  const AttnShape& s = a.shape;
  const int64_t row = KvRowFloats(s), before = int64_t(st.growing->size()) / row;
  st.growing->resize(size_t(before + n) * row);
  for (int t = 0; t < n; ++t) {
    WriteKvRow(s, k + int64_t(t) * s.kv_heads * s.head_dim, v + int64_t(t) * s.kv_heads * s.value_dim,
               st.growing->data() + (before + t) * row);
  }
  AttendKvRowsCausal(s, p.scale, n, q, KvRows<T>{st.growing->data(), before + n}, y);
}

template <typename T>
void Chunked(const LayerAttention& a, const SoftmaxParams& p, int n, const T* q, const T* k,
             const T* v, StateView<T> st, T* y) {
  // The KV cache makes every token's attention independent given the cache: prefill is Steps.
  Steps(a, p, n, q, k, v, st, y);
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
