// The sliced mechanisms' exact decoder: per kv head, an AVL tree over every key seen so far, ordered
// by its score z, each node carrying the moments (count, sum z, sum v, sum z v) of its subtree.
// Inserting a key and reading the ReLU moments at a point each visit one root-to-leaf path:
// O(log t) nodes (at most 1.44 log2(t + 2)), O(dv) work per node, worst case (AVL, not amortized).
//
// Storage (a session's state, plain T values so it copies and forks like any other state):
//   StateView::fixed   [kv_heads]  root link of each kv head's tree
//   StateView::growing [t, kv_heads, NodeFloats()]  node of token j, kv head g at row j * kv_heads + g
//   node: [z, v[dv], left, right, height, moments[2dv+2], compensation[2dv+2] (when compensated)]
// A link is (token index + 1) held in T, 0 meaning none; T = float represents it exactly up to 2^24,
// so the float exact decoder refuses (CHECK) a session past 16,777,215 tokens. The growing part costs
// NodeFloats() = 3dv + 6 floats per token per kv head (5dv + 8 compensated).
#ifndef STEADY_MODEL_MECHANISMS_SLICED_TREE_H_
#define STEADY_MODEL_MECHANISMS_SLICED_TREE_H_

#include <cstdint>
#include <vector>

#include "model/mechanisms/sliced_moments.h"

namespace steady {

struct SlicedTreeLayout {
  int kv_heads = 0;
  int value_dim = 0;
  bool compensated = false;  // a compensation term beside every subtree moment (Accumulation::kKahan)

  int NodeFloats() const { return 4 + value_dim + SlicedMomentCount(value_dim) * (compensated ? 2 : 1); }
};

// Appends one token's keys: zk [kv_heads] scores (rounded to T as stored), v [kv_heads, dv].
// `visits` (optional) is incremented once per existing node the inserts pass through.
template <typename T>
void TreeAppendToken(const SlicedTreeLayout& layout, const double* zk, const T* v, T* roots,
                     std::vector<T>* nodes, int64_t* visits = nullptr);

// TreeAppendToken in parts, for each kv head's tree on its own (speculative verification's rows, one
// kv head per compute thread): room for `count` more tokens' nodes (zeros, linked nowhere yet), then
// kv head g's key of token `token` (zk as stored, v [dv]) into its tree. Reserving then inserting
// every kv head's key of each token in turn leaves the same nodes as TreeAppendToken for each.
template <typename T>
void TreeReserveTokens(const SlicedTreeLayout& layout, int count, std::vector<T>* nodes);
template <typename T>
void TreeInsertKey(const SlicedTreeLayout& layout, int g, int64_t token, double zk, const T* v, T* roots,
                   std::vector<T>* nodes, int64_t* visits = nullptr);

// Number of tokens held.
template <typename T>
int64_t TreeTokens(const SlicedTreeLayout& layout, const std::vector<T>& nodes);

// Totals over all keys of kv head `head`.
template <typename T>
void TreeTotals(const SlicedTreeLayout& layout, int head, const T* roots, const std::vector<T>& nodes,
                SlicedTotals* out);

// r1(x), rv(x) over all keys of kv head `head` (out->rv is resized to dv). `visits` as above.
template <typename T>
void TreeReluMoments(const SlicedTreeLayout& layout, int head, double x, const T* roots,
                     const std::vector<T>& nodes, SlicedReluMoments* out, int64_t* visits = nullptr);

}  // namespace steady

#endif  // STEADY_MODEL_MECHANISMS_SLICED_TREE_H_
