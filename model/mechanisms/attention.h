// The attention mechanisms behind one table. Each mechanism lives in its own files
// (softmax, taylor, slay, dark, sliced_relu, sliding_window, window_dark) and provides, for its params struct P:
//
//   absl::Status ParseParams(const nlohmann::json& j, const AttnShape& s, P* p);
//       config keys (defaults per ../shared/MECHANISMS.md); INVALID_ARGUMENT naming the key.
//   absl::Status LoadTensors(const SafeTensors& st, const std::string& prefix, const AttnShape& s, P* p);
//       fixed tensors under `prefix` (e.g. "model.layers.3.self_attn."); shapes checked.
//   void RandomInitTensors(uint64_t seed, const AttnShape& s, P* p);
//   void AppendTensors(const P& p, const std::string& prefix, const AttnShape& s,
//                      std::vector<TensorToWrite>* out);
//   nlohmann::json Describe(const P& p);           // parameters, as config.json would hold them
//   size_t StateFloats(const LayerAttention& a, const P& p);   // fixed state, whole layer
//   template <typename T> void InitState(const LayerAttention& a, const P& p, StateView<T> st);
//   template <typename T> void Step(const LayerAttention& a, const P& p, const T* q, const T* k,
//                                   const T* v, StateView<T> st, T* y);          // one token
//   template <typename T> void Steps(const LayerAttention& a, const P& p, int n, const T* q,
//                                    const T* k, const T* v, StateView<T> st, T* y);
//       n tokens, bit for bit what n Steps in turn give and leave (speculative verification and its
//       rollback, model/decoder/verify.cc), each state row or cached row read once for the n where
//       the mechanism can.
//   template <typename T> void Chunked(const LayerAttention& a, const P& p, int n, const T* q,
//                                      const T* k, const T* v, StateView<T> st, T* y);
//       n tokens in chunks of a.chunk_size: intra-chunk masked quadratic + carried state.
//   template <typename T> void Parallel(const LayerAttention& a, const P& p, int n, const T* q,
//                                       const T* k, const T* v, T* y);
//       the causal quadratic reference from an empty state.
//
// Step, Steps, Chunked and Parallel compute the same function (tests/model/mechanisms/mechanisms_test.cc checks it).
// Templates are instantiated for float (serving) and double (references, drift study).
#ifndef STEADY_MODEL_MECHANISMS_ATTENTION_H_
#define STEADY_MODEL_MECHANISMS_ATTENTION_H_

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "model/checkpoint/config.h"
#include "model/checkpoint/safetensors.h"
#include "model/mechanisms/common.h"
#include "model/mechanisms/dark.h"
#include "model/mechanisms/slay.h"
#include "model/mechanisms/sliced_relu.h"
#include "model/mechanisms/sliding_window.h"
#include "model/mechanisms/softmax.h"
#include "model/mechanisms/taylor.h"
#include "model/mechanisms/window_dark.h"

namespace steady {

using MechanismParams =
    std::variant<SoftmaxParams, TaylorParams, SlayParams, DarkParams, SlicedParams, SlidingWindowParams,
                 WindowDarkParams>;

// One layer's attention: geometry, mechanism parameters and fixed tensors. Const after load.
struct LayerAttention {
  AttnShape shape;
  std::string mechanism;  // the config name: "softmax", "taylor", "slay", "dark", "sliced_relu", "sliding_window", "window_dark", ...
  MechanismParams params;
  Accumulation accumulation = Accumulation::kKahan;
  int chunk_size = 64;  // prefill chunk length for Chunked
};

// Names accepted in config.json and on command lines.
const std::vector<std::string>& MechanismNames();

// Builds a layer's attention from its config entry ("accumulation" and "chunk_size" are common keys).
absl::StatusOr<LayerAttention> ParseLayerAttention(const AttentionConfig& config, const AttnShape& shape);
absl::Status LoadAttentionTensors(const SafeTensors& st, const std::string& prefix, LayerAttention* a);
void RandomInitAttentionTensors(uint64_t seed, LayerAttention* a);
void AppendAttentionTensors(const LayerAttention& a, const std::string& prefix,
                            std::vector<TensorToWrite>* out);
nlohmann::json DescribeAttention(const LayerAttention& a);  // {"mechanism": ..., params...}

size_t StateFloats(const LayerAttention& a);  // fixed part, all kv heads of the layer
template <typename T> void InitState(const LayerAttention& a, StateView<T> st);
// Values a layer computes from a token's q and k alone, before it touches any state: sliced_relu's
// scores (SlicedTokenScores), AttentionTokenValueCount(a) doubles a token; 0 for every other
// mechanism. AttentionTokenValues computes them for n tokens at once, q [n, heads, head_dim] and
// k [n, kv_heads, head_dim] -> values [n, count], reading the projection weights once for the n: a
// decode step over several sessions does so for all its rows and hands each segment its rows'
// values (`token_values` below), the same bits as the segment computing them itself.
//
// AttentionTokenMatrices: the fixed matrices those values multiply q or k by (sliced_relu's "mlp"
// hidden layers; none for the others), which a backend may convert as it does the model's
// projections; given a `product` over its copies (float only), AttentionTokenValues reads them
// instead of the layer's fp32 weights.
int AttentionTokenValueCount(const LayerAttention& a);
std::vector<TokenMatrix> AttentionTokenMatrices(const LayerAttention& a);
template <typename T> void AttentionTokenValues(const LayerAttention& a, int n, const T* q, const T* k,
                                                double* values, const TokenMatrixProduct* product = nullptr);
// n == 1: the recurrent step; n > 1: chunked prefill. Continues from `st`. `token_values`: the n
// tokens' AttentionTokenValues when the caller has them (nullptr: computed here).
template <typename T> void AttentionForward(const LayerAttention& a, int n, const T* q, const T* k,
                                            const T* v, StateView<T> st, T* y,
                                            const double* token_values = nullptr);
// Token by token through Step (the decode path), for tests and `steady attn --form recurrent`.
template <typename T> void AttentionRecurrent(const LayerAttention& a, int n, const T* q, const T* k,
                                              const T* v, StateView<T> st, T* y);
// n tokens through the mechanism's Steps: bit for bit AttentionRecurrent, the state read once.
template <typename T> void AttentionSteps(const LayerAttention& a, int n, const T* q, const T* k,
                                          const T* v, StateView<T> st, T* y,
                                          const double* token_values = nullptr);
template <typename T> void AttentionChunked(const LayerAttention& a, int n, const T* q, const T* k,
                                            const T* v, StateView<T> st, T* y);
template <typename T> void AttentionParallel(const LayerAttention& a, int n, const T* q, const T* k,
                                             const T* v, T* y);

}  // namespace steady

#endif  // STEADY_MODEL_MECHANISMS_ATTENTION_H_
