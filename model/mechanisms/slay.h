// slay: spherical Yat kernel via Laplace quadrature, anchor features and positive random features.
// Math in ../shared/MECHANISMS.md ("slay"); implementation notes in docs/mechanisms/slay.md.
#ifndef STEADY_MODEL_MECHANISMS_SLAY_H_
#define STEADY_MODEL_MECHANISMS_SLAY_H_

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "model/checkpoint/safetensors.h"
#include "model/mechanisms/common.h"

namespace steady {

struct SlayParams {
  int nodes = 2;      // R: Gauss-Laguerre nodes
  int anchors = 8;    // P: anchor directions
  int features = 16;  // M: positive random features per node
  double eps = 1e-3;
  double delta = 1e-6;
  // Laplace quadrature of 1 / (C - 2x), C = 2 + eps: s_r = t_r / C, w_r = a_r / C. Set by ParseParams.
  std::vector<double> node_s;      // [R]
  std::vector<double> node_w;      // [R]
  std::vector<float> anchor_dirs;  // [P, head_dim], L2-normalized  (self_attn.slay.anchors)
  std::vector<float> omega;        // [R, kv_heads, head_dim, M]     (self_attn.slay.omega)

  int num_features() const { return nodes * anchors * features; }  // m = R * P * M
};

STEADY_DECLARE_MECHANISM(SlayParams)

// Gauss-Laguerre rule with n nodes for int_0^inf e^{-t} f(t) dt: nodes t (ascending), weights a.
void GaussLaguerre(int n, std::vector<double>* t, std::vector<double>* a);

// psi(u) of one kv head's key or query u [head_dim]: m = R*P*M values, layout [R, P, M].
template <typename T>
void SlayFeatures(const SlayParams& p, const AttnShape& s, int kv_head, const T* u, T* psi);

}  // namespace steady

#endif  // STEADY_MODEL_MECHANISMS_SLAY_H_
