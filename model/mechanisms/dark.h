// dark (DARKFormer): positive random features with a learned covariance; performer is M = I.
// Math in ../shared/MECHANISMS.md ("dark"); implementation notes in docs/mechanisms/dark.md.
#ifndef STEADY_MODEL_MECHANISMS_DARK_H_
#define STEADY_MODEL_MECHANISMS_DARK_H_

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "model/checkpoint/safetensors.h"
#include "model/mechanisms/common.h"

namespace steady {

struct DarkParams {
  double scale = 0;
  int features = 256;  // m
  int rank = 0;        // r (default head_dim)
  double delta = 1e-6;
  std::vector<float> M;  // [kv_heads, r, head_dim]  (self_attn.dark.M), identity for performer
  std::vector<float> G;  // [kv_heads, m, r]         (self_attn.dark.G), fixed Gaussian draws
  std::vector<float> W;  // [kv_heads, m, head_dim] = G M, derived at load
  // W and M transposed, [kv_heads, head_dim, m] and [kv_heads, head_dim, r], derived with W: the
  // CPU's projections read them (cpu::MatMulNN: fp32 along the vector lanes, fp64 in a plain loop);
  // W itself is the CUDA kernels' layout.
  std::vector<float> Wt, Mt;
};

STEADY_DECLARE_MECHANISM(DarkParams)

// W = G M per kv head (computed in double, stored float), and Wt, Mt. LoadTensors and
// RandomInitTensors call it.
void DeriveDarkW(const AttnShape& s, DarkParams* p);

// Feature logits of `rows` keys or queries of one kv head, x [rows, head_dim] -> logits [rows, m]:
// l_f = w_f.x' - |M x'|^2 / 2 with x' = sqrt(scale) x, f < m. The features are
// phi_f(x) = exp(l_f) / sqrt(m). In fp32 the projections of all the rows take one cpu::MatMulNN
// each (W and M read once per 4 rows, not once per row), and a row's logits are the same bits
// whatever rows come with it; in fp64 they are plain loops (the reference).
template <typename T>
void DarkLogits(const DarkParams& p, const AttnShape& s, int kv_head, int rows, const T* x, T* logits);

// Query features shifted by their own max over features: phi_f = exp(l_f - max_l) / sqrt(m).
// Returns max_l, the log of the factor taken out (it cancels in num / den).
template <typename T>
T DarkQueryFeatures(const DarkParams& p, const AttnShape& s, int kv_head, const T* q, T* phi);
// The same for n queries q [n, head_dim] (a GQA group's heads, adjacent in a row of q): features phi
// [n, m], maxima top [n], each query's the same bits as its own call; W and M are read once for the n.
template <typename T>
void DarkQueryFeatures(const DarkParams& p, const AttnShape& s, int kv_head, int n, const T* q, T* phi, T* top);

// Key features relative to the running max: logits into `phi`, the running max c updated to
// c' = max(c, max_f l_f), then phi_f = exp(l_f - c') / sqrt(m) <= 1 / sqrt(m).
template <typename T>
void DarkKeyFeatures(const DarkParams& p, const AttnShape& s, int kv_head, const T* k, T* c, T* phi);

// exp(from - to) for to >= from; an empty reference (-inf) contributes nothing.
template <typename T>
T DarkShiftFactor(T from, T to) {
  return std::isinf(from) ? T(0) : std::exp(from - to);
}

}  // namespace steady

#endif  // STEADY_MODEL_MECHANISMS_DARK_H_
