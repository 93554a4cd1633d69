// sliced_relu and sliced_relu_bump: each token's heads are projected to one scalar score per head
// (z^q for queries, z^k for keys), and the kernel is a ReLU (or hat) of score differences. Because the
// kernel only sees scalars, a readout needs moments of the keys ordered by z: all of them (the "exact"
// decoder, growing state) or a fixed histogram of them (the "bucketed" decoder, constant state).
// Math, tensor names, state layout and measured error: docs/mechanisms/sliced_relu.md.
#ifndef STEADY_MODEL_MECHANISMS_SLICED_RELU_H_
#define STEADY_MODEL_MECHANISMS_SLICED_RELU_H_

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "model/checkpoint/safetensors.h"
#include "model/mechanisms/common.h"

namespace steady {

// Config "projection": how a token's concatenated heads become one score per head.
enum class SlicedProjection {
  kMlp,     // "mlp": Linear(HD->HD) + GELU (erf form) + Linear(HD->H), with biases
  kLinear,  // "linear": Linear(HD->H) with bias
  kNone,    // "none": head_dim must be 1; q and k are the scores (`steady attn` with zq, zk given)
};

// Config "decoder": how the recurrent state answers readouts.
enum class SlicedDecoder {
  kExact,     // "exact": every (z_j, v_j) in an order-statistics tree in StateView::growing
  kBucketed,  // "bucketed": fixed histogram over z (bins + two tails) in StateView::fixed
};

// One side's projection (queries: groups = heads; keys: groups = kv_heads), width = groups * head_dim.
struct SlicedProjectionWeights {
  std::vector<float> fc1_weight;  // [width, width]  mlp only
  std::vector<float> fc1_bias;    // [width]         mlp only
  std::vector<float> out_weight;  // [groups, width] fc2 (mlp) or proj (linear)
  std::vector<float> out_bias;    // [groups]
};

struct SlicedParams {
  bool bump = false;  // sliced_relu_bump (set by the dispatcher before ParseParams)
  SlicedProjection projection = SlicedProjection::kMlp;  // default: mlp; linear for bump
  SlicedDecoder decoder = SlicedDecoder::kBucketed;
  // Bucketed decoder: `bins` uniform bins over [z_min, z_max) plus a tail bin on each side.
  int bins = 64;
  double z_min = -4.0;
  double z_max = 4.0;

  // Fixed tensors (self_attn.sliced.*), const after load.
  SlicedProjectionWeights q;    // q_fc1/q_fc2 (mlp) or q_proj (linear)
  SlicedProjectionWeights k;    // k_fc1/k_fc2 or k_proj
  std::vector<float> bandwidth;  // [heads] bump only: b_h > 0 (trainer exports softplus(theta)+1e-4)
};

STEADY_DECLARE_MECHANISM(SlicedParams)

// A token's scores, which depend on its q and k alone (no state): zq [heads] then zk [kv_heads], the
// keys' rounded to T as the state holds them. SlicedTokenScores of n tokens, q [n, heads, head_dim]
// and k [n, kv_heads, head_dim] -> scores [n, SlicedScoresPerToken], reads each projection weight
// once for the n; SlicedStepsGiven goes on from them with Steps' arithmetic. A decode step over
// several sessions scores all its rows in one call (attention.h, AttentionTokenValues) instead of
// each session reading the weights again: each token's scores are the same bits either way.
inline int SlicedScoresPerToken(const AttnShape& s) { return s.heads + s.kv_heads; }
//
// The "mlp" projection's hidden layers (q_fc1 [heads * head_dim]^2, k_fc1 [kv_heads * head_dim]^2:
// at llama1b's shape 17.8 MB of fp32 a layer, read at every step) are SlicedTokenMatrices 0 and 1; with
// `product` (float only) SlicedTokenScores multiplies by them through it, in the caller's precision,
// instead of by the fp32 weights. The biases, the GELU and the output layer stay as they are.
std::vector<TokenMatrix> SlicedTokenMatrices(const SlicedParams& p, const AttnShape& s);
template <typename T>
void SlicedTokenScores(const LayerAttention& a, const SlicedParams& p, int n, const T* q, const T* k,
                       double* scores, const TokenMatrixProduct* product = nullptr);
template <typename T>
void SlicedStepsGiven(const LayerAttention& a, const SlicedParams& p, int n, const double* scores, const T* v,
                      StateView<T> st, T* y);

}  // namespace steady

#endif  // STEADY_MODEL_MECHANISMS_SLICED_RELU_H_
