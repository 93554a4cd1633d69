#include "model/mechanisms/sliced_tree.h"

#include <algorithm>
#include <limits>

#include "base/check.h"

namespace steady {
namespace {

// One kv head's tree inside the shared node buffer. Field offsets follow the layout in the header.
template <typename T>
struct TreeView {
  const SlicedTreeLayout& layout;
  int head;
  T* base;  // nodes->data()

  int dv() const { return layout.value_dim; }
  int moments() const { return SlicedMomentCount(layout.value_dim); }
  T* Node(int64_t link) const {
    return base + ((link - 1) * layout.kv_heads + head) * int64_t(layout.NodeFloats());
  }
  int64_t Left(const T* n) const { return int64_t(n[1 + dv()]); }
  int64_t Right(const T* n) const { return int64_t(n[2 + dv()]); }
  void SetLeft(T* n, int64_t link) const { n[1 + dv()] = T(link); }
  void SetRight(T* n, int64_t link) const { n[2 + dv()] = T(link); }
  int Height(int64_t link) const { return link ? int(Node(link)[3 + dv()]) : 0; }
  T* Sums(T* n) const { return n + 4 + dv(); }
  T* Comps(T* n) const { return layout.compensated ? n + 4 + dv() + moments() : nullptr; }
  double Sum(T* n, int i) const {
    T* c = Comps(n);
    return ReadSum(Sums(n) + i, c ? c + i : nullptr);
  }

  // Height and subtree moments of `link` from its children (after a rotation).
  void Recompute(int64_t link) const {
    T* n = Node(link);
    const int64_t l = Left(n), r = Right(n);
    n[3 + dv()] = T(1 + std::max(Height(l), Height(r)));
    std::vector<double> self(moments());
    KeyMoments(double(n[0]), n + 1, dv(), self.data());
    T* comps = Comps(n);
    for (int i = 0; i < moments(); ++i) {
      double hi = 0, lo = 0;
      KahanAdd(hi, lo, self[i]);
      if (l) KahanAdd(hi, lo, Sum(Node(l), i));
      if (r) KahanAdd(hi, lo, Sum(Node(r), i));
      StoreSum(hi, lo, Sums(n) + i, comps ? comps + i : nullptr);
    }
  }

  int64_t RotateRight(int64_t y) const {
    T* ny = Node(y);
    const int64_t x = Left(ny);
    T* nx = Node(x);
    SetLeft(ny, Right(nx));
    SetRight(nx, y);
    Recompute(y);
    Recompute(x);
    return x;
  }

  int64_t RotateLeft(int64_t y) const {
    T* ny = Node(y);
    const int64_t x = Right(ny);
    T* nx = Node(x);
    SetRight(ny, Left(nx));
    SetLeft(nx, y);
    Recompute(y);
    Recompute(x);
    return x;
  }

  // Restores the AVL invariant at `link` after one insert below it; returns the subtree's root.
  int64_t Rebalance(int64_t link) const {
    T* n = Node(link);
    const int64_t l = Left(n), r = Right(n);
    n[3 + dv()] = T(1 + std::max(Height(l), Height(r)));
    const int balance = Height(l) - Height(r);
    if (balance > 1) {
      if (Height(Left(Node(l))) < Height(Right(Node(l)))) SetLeft(n, RotateLeft(l));
      return RotateRight(link);
    }
    if (balance < -1) {
      if (Height(Right(Node(r))) < Height(Left(Node(r)))) SetRight(n, RotateRight(r));
      return RotateLeft(link);
    }
    return link;
  }

  // Inserts node `fresh` (key z, moments `self`) into the subtree at `link`; returns its new root.
  // Ties go right. Recursion depth is the tree height, at most ~1.44 log2(t).
  int64_t Insert(int64_t link, int64_t fresh, double z, const double* self, int64_t* visits) const {
    if (link == 0) return fresh;
    if (visits) ++*visits;
    T* n = Node(link);
    T* comps = Comps(n);
    for (int i = 0; i < moments(); ++i) AddToSum(self[i], Sums(n) + i, comps ? comps + i : nullptr);
    if (z < double(n[0])) {
      SetLeft(n, Insert(Left(n), fresh, z, self, visits));
    } else {
      SetRight(n, Insert(Right(n), fresh, z, self, visits));
    }
    return Rebalance(link);
  }
};

}  // namespace

template <typename T>
int64_t TreeTokens(const SlicedTreeLayout& layout, const std::vector<T>& nodes) {
  return int64_t(nodes.size()) / (int64_t(layout.kv_heads) * layout.NodeFloats());
}

template <typename T>
void TreeReserveTokens(const SlicedTreeLayout& layout, int count, std::vector<T>* nodes) {
  const int64_t token = TreeTokens(layout, *nodes) + count - 1;  // the last token's index
  // Links are token + 1 stored in T: exact while below 2^digits (2^24 for float).
  STEADY_CHECK(token + 1 < (int64_t(1) << std::numeric_limits<T>::digits));
  nodes->resize(nodes->size() + size_t(count) * layout.kv_heads * layout.NodeFloats(), T(0));
}

template <typename T>
void TreeInsertKey(const SlicedTreeLayout& layout, int g, int64_t token, double zk, const T* v, T* roots,
                   std::vector<T>* nodes, int64_t* visits) {
  const int dv = layout.value_dim, m = SlicedMomentCount(dv);
  std::vector<double> self(m);
  TreeView<T> tree{layout, g, nodes->data()};
  const int64_t fresh = token + 1;
  T* n = tree.Node(fresh);
  n[0] = T(zk);
  const double z = double(n[0]);  // the key as stored: comparisons and moments agree
  std::copy(v, v + dv, n + 1);
  n[3 + dv] = T(1);
  KeyMoments(z, n + 1, dv, self.data());
  T* comps = tree.Comps(n);
  for (int i = 0; i < m; ++i) StoreSum(self[i], 0.0, tree.Sums(n) + i, comps ? comps + i : nullptr);
  roots[g] = T(tree.Insert(int64_t(roots[g]), fresh, z, self.data(), visits));
}

template <typename T>
void TreeAppendToken(const SlicedTreeLayout& layout, const double* zk, const T* v, T* roots,
                     std::vector<T>* nodes, int64_t* visits) {
  const int64_t token = TreeTokens(layout, *nodes);
  TreeReserveTokens(layout, 1, nodes);
  for (int g = 0; g < layout.kv_heads; ++g) {
    TreeInsertKey(layout, g, token, zk[g], v + g * layout.value_dim, roots, nodes, visits);
  }
}

template <typename T>
void TreeTotals(const SlicedTreeLayout& layout, int head, const T* roots, const std::vector<T>& nodes,
                SlicedTotals* out) {
  const int dv = layout.value_dim;
  out->count = 0;
  out->sum_z = 0;
  out->sum_v.assign(dv, 0.0);
  const int64_t root = int64_t(roots[head]);
  if (root == 0) return;
  TreeView<T> tree{layout, head, const_cast<T*>(nodes.data())};
  T* n = tree.Node(root);
  out->count = tree.Sum(n, 0);
  out->sum_z = tree.Sum(n, 1);
  for (int d = 0; d < dv; ++d) out->sum_v[d] = tree.Sum(n, 2 + d);
}

template <typename T>
void TreeReluMoments(const SlicedTreeLayout& layout, int head, double x, const T* roots,
                     const std::vector<T>& nodes, SlicedReluMoments* out, int64_t* visits) {
  const int dv = layout.value_dim, m = SlicedMomentCount(dv);
  TreeView<T> tree{layout, head, const_cast<T*>(nodes.data())};
  // Moments of the keys with z < x: whole left subtrees plus the nodes themselves on the way down.
  std::vector<double> below(m, 0.0), self(m);
  for (int64_t link = int64_t(roots[head]); link != 0;) {
    if (visits) ++*visits;
    T* n = tree.Node(link);
    if (double(n[0]) < x) {
      KeyMoments(double(n[0]), n + 1, dv, self.data());
      const int64_t l = tree.Left(n);
      for (int i = 0; i < m; ++i) below[i] += self[i] + (l ? tree.Sum(tree.Node(l), i) : 0.0);
      link = tree.Right(n);
    } else {
      link = tree.Left(n);
    }
  }
  // sum_{z_j < x} (x - z_j) u_j = x * sum u_j - sum z_j u_j, for u = 1 and u = v.
  out->r1 = x * below[0] - below[1];
  out->rv.resize(dv);
  for (int d = 0; d < dv; ++d) out->rv[d] = x * below[2 + d] - below[2 + dv + d];
}

#define STEADY_INSTANTIATE_TREE(T)                                                                   \
  template int64_t TreeTokens<T>(const SlicedTreeLayout&, const std::vector<T>&);                    \
  template void TreeAppendToken<T>(const SlicedTreeLayout&, const double*, const T*, T*,             \
                                   std::vector<T>*, int64_t*);                                       \
  template void TreeReserveTokens<T>(const SlicedTreeLayout&, int, std::vector<T>*);                 \
  template void TreeInsertKey<T>(const SlicedTreeLayout&, int, int64_t, double, const T*, T*,        \
                                 std::vector<T>*, int64_t*);                                         \
  template void TreeTotals<T>(const SlicedTreeLayout&, int, const T*, const std::vector<T>&,         \
                              SlicedTotals*);                                                        \
  template void TreeReluMoments<T>(const SlicedTreeLayout&, int, double, const T*,                   \
                                   const std::vector<T>&, SlicedReluMoments*, int64_t*);
STEADY_INSTANTIATE_TREE(float)
STEADY_INSTANTIATE_TREE(double)
#undef STEADY_INSTANTIATE_TREE

}  // namespace steady
