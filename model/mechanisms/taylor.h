// taylor (SATA): symmetry-aware Taylor expansion of exp(s q.k) with P terms; constant-size state.
// Math in ../shared/MECHANISMS.md ("taylor"); implementation notes in docs/mechanisms/taylor.md.
#ifndef STEADY_MODEL_MECHANISMS_TAYLOR_H_
#define STEADY_MODEL_MECHANISMS_TAYLOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "model/checkpoint/safetensors.h"
#include "model/mechanisms/common.h"

namespace steady {

// The degree-p monomials of a dk-vector: every non-decreasing index tuple i_1 <= ... <= i_p over
// 0..dk-1, in lexicographic order (the reference code's order, so state dumps compare directly).
struct TaylorMonomials {
  int degree = 0;                 // p
  int rows = 0;                   // m_p = C(dk+p-1, p)
  int offset = 0;                 // first feature row of this degree in the concatenated feature list
  std::vector<int> index;         // [rows, p] the tuples
  std::vector<int> parent;        // [rows] row of index[row, 0..p-2] among degree p-1 (0 for p <= 1)
  std::vector<double> multiplicity;  // [rows] C_p = p! / prod_v (count of v in the tuple)!
};

struct TaylorParams {
  double scale = 0;  // logit scale s
  int order = 4;     // P: number of Taylor terms (top degree P-1)
  // Derived at ParseParams from order and head_dim:
  int head_dim = 0;                       // dk the tables were built for
  int features = 0;                       // sum_p m_p = C(dk+P-1, P-1): feature rows per kv head
  std::vector<TaylorMonomials> degrees;   // [order], degrees[p] for p = 0..P-1
  std::vector<double> alpha;              // [order] s^p / p!
};

// Most feature rows per kv head ParseParams accepts (bounds the tables and the state: with dv = 64
// that is already 260 MB of fp32 state per kv head).
inline constexpr int kTaylorMaxFeatures = 1 << 20;

// Fixed state, whole layer, T elements:
//   sums [kv_heads, features, dv + 1]   row r: H[r, 0..dv-1] then z[r] (degrees concatenated)
//   comp [kv_heads, features, dv + 1]   Kahan compensation, only with Accumulation::kKahan
STEADY_DECLARE_MECHANISM(TaylorParams)

// Phi(x) for every degree, concatenated: phi[degrees[p].offset + row] = prod_j x[index[row, j]]
// (phi[0] = 1), built degree by degree from the parent rows. x [head_dim], phi [features].
template <typename T>
void TaylorFeatures(const TaylorParams& p, const T* x, T* phi);

// T_P(x) = sum_{p<P} x^p / p!, the kernel the features reproduce.
double TaylorKernel(int order, double x);

}  // namespace steady

#endif  // STEADY_MODEL_MECHANISMS_TAYLOR_H_
