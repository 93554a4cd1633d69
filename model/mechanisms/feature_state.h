// The recurrent state of a linear-attention mechanism over m features, for one kv head:
// S [m, dv] and z [m] (sum of phi(k) v^T and of phi(k)), plus same-shaped compensations for
// Accumulation::kKahan. Layout: [S, z] then [S_comp, z_comp]. Shared by slay and dark.
#ifndef STEADY_MODEL_MECHANISMS_FEATURE_STATE_H_
#define STEADY_MODEL_MECHANISMS_FEATURE_STATE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/state_update.h"

#include "model/mechanisms/common.h"

namespace steady {

template <typename T>
struct FeatureState {
  T* S;
  T* z;
  T* S_comp;  // null for kPlain
  T* z_comp;
};

inline size_t FeatureStateFloats(size_t m, size_t dv, Accumulation acc) {
  const size_t sums = m * (dv + 1);
  return acc == Accumulation::kKahan ? 2 * sums : sums;
}

template <typename T>
FeatureState<T> FeatureStateAt(T* base, size_t m, size_t dv, Accumulation acc) {
  FeatureState<T> h{base, base + m * dv, nullptr, nullptr};
  if (acc == Accumulation::kKahan) {
    h.S_comp = base + m * (dv + 1);
    h.z_comp = h.S_comp + m * dv;
  }
  return h;
}

// Row f's part of a key's update: S[f] += x v, z[f] += x. fp32 rows go through the SIMD kernels,
// which equal their scalar reference (the fp64 path) bit for bit.
template <typename T>
void AddToRow(int f, int dv, T x, const T* v, FeatureState<T> h) {
  T* row = h.S + size_t(f) * dv;
  if (h.S_comp) {
    T* comp = h.S_comp + size_t(f) * dv;
    cpu::KahanAxpy(x, v, row, comp, dv);
    KahanAdd(h.z[f], h.z_comp[f], x);
  } else {
    cpu::Axpy(x, v, row, dv);
    h.z[f] += x;
  }
}

// S += w phi_k v^T, z += w phi_k for one key.
template <typename T>
void AddKey(int m, int dv, const T* phi_k, T w, const T* v, FeatureState<T> h) {
  for (int f = 0; f < m; ++f) AddToRow(f, dv, w * phi_k[f], v, h);
}

// den[i] += the weights of `group` queries phi_q [group, m] (each times `factor`) times z[f] for rows
// f in [f0, f1), in order (compensations included).
template <typename T>
void ReadNormalizers(int f0, int f1, int m, int group, const T* phi_q, T factor, FeatureState<T> h, T* den) {
  for (int f = f0; f < f1; ++f) {
    const T z = h.S_comp ? h.z[f] + h.z_comp[f] : h.z[f];
    for (int i = 0; i < group; ++i) den[i] += phi_q[size_t(i) * m + f] * factor * z;
  }
}

// Row f's part of a read by `group` queries phi_q [group, m] (each weight times `factor`):
// num [group, dv] += their weights times S[f], den[i] += their weights times z[f] (compensations
// included). SIMD for fp32 (cpu::ReadRows: ReadRow's bits, kernels/cpu/state_update.h).
template <typename T>
void ReadRowForGroup(int f, int m, int dv, int group, const T* phi_q, T factor, FeatureState<T> h, T* num, T* den) {
  cpu::ReadRows(1, dv, group, phi_q + f, m, factor, h.S + size_t(f) * dv,
                h.S_comp ? h.S_comp + size_t(f) * dv : static_cast<const T*>(nullptr), num);
  ReadNormalizers(f, f + 1, m, group, phi_q, factor, h, den);
}

// For `group` queries phi_q [group, m] (each weight times `factor`): num [group, dv] += their
// weights times S, and den[i] = their weights . z (compensations included). One call reads every
// row for the whole group, the group's sums in registers (cpu::ReadRows); each query's sums are the
// same operations in the same order as a read of its own.
template <typename T>
void ReadStateGroup(int m, int dv, int group, const T* phi_q, T factor, FeatureState<T> h, T* num, T* den) {
  std::fill(den, den + group, T(0));
  cpu::ReadRows(m, dv, group, phi_q, m, factor, h.S, h.S_comp, num);
  ReadNormalizers(0, m, m, group, phi_q, factor, h, den);
}

// One query: num [dv] += factor * phi_q^T S; returns factor * phi_q . z.
template <typename T>
T ReadState(int m, int dv, const T* phi_q, T factor, FeatureState<T> h, T* num) {
  T den;
  ReadStateGroup(m, dv, 1, phi_q, factor, h, num, &den);
  return den;
}

// a . b over m features (the chunked forms' intra-chunk kernel values).
template <typename T>
T Dot(int m, const T* a, const T* b) {
  T acc = 0;
  for (int f = 0; f < m; ++f) acc += a[f] * b[f];
  return acc;
}

// Multiplies the sums and their compensations by `factor` (S and z are contiguous, and so are the
// compensations).
template <typename T>
void ScaleState(int m, int dv, T factor, FeatureState<T> h) {
  const size_t sums = size_t(m) * (dv + 1);
  for (size_t i = 0; i < sums; ++i) h.S[i] *= factor;
  if (h.S_comp) {
    for (size_t i = 0; i < sums; ++i) h.S_comp[i] *= factor;
  }
}

// Row f's part of ScaleState (which is elementwise): S[f], z[f] and their compensations times `factor`.
template <typename T>
void ScaleRow(int f, int dv, T factor, FeatureState<T> h) {
  T* row = h.S + size_t(f) * dv;
  for (int d = 0; d < dv; ++d) row[d] *= factor;
  h.z[f] *= factor;
  if (h.S_comp) {
    T* comp = h.S_comp + size_t(f) * dv;
    for (int d = 0; d < dv; ++d) comp[d] *= factor;
    h.z_comp[f] *= factor;
  }
}

// n tokens' updates and reads as n Steps do them in turn (token t: ScaleState by rescale[t] where
// rescale is non-null, AddKey of phi_k[t] with weight 1, ReadStateGroup of its `group` queries with
// factor 1), but row by row: each state row is read from memory once for the n tokens, and token t
// finds every row exactly as its own Step would (the updates and the scaling are elementwise, so row
// f after token t's update does not depend on any other row), and sums its rows in the same order.
// phi_k [n, m]; token t's value at v + t * v_stride; rescale [n] (1: none: multiplying by 1 changes
// no bits, so it stands for Step's "c did not grow"); phi_q [n, group, m]; token t's outputs
// num [group, dv] at num + t * num_stride, zeroed by the caller; den [n, group].
template <typename T>
void AddKeysAndReadInTurn(int m, int dv, int n, const T* phi_k, const T* v, int64_t v_stride, const T* rescale,
                          int group, const T* phi_q, FeatureState<T> h, T* num, int64_t num_stride, T* den) {
  std::fill(den, den + size_t(n) * group, T(0));
  for (int f = 0; f < m; ++f) {
    for (int t = 0; t < n; ++t) {
      if (rescale != nullptr && rescale[t] != T(1)) ScaleRow(f, dv, rescale[t], h);
      AddToRow(f, dv, T(1) * phi_k[size_t(t) * m + f], v + t * v_stride, h);
      ReadRowForGroup(f, m, dv, group, phi_q + size_t(t) * group * m, T(1), h, num + t * num_stride,
                      den + size_t(t) * group);
    }
  }
}

// The chunked forms' reads of one kv head over a chunk of `len` tokens (dark's, slay's and
// window_dark's Chunked): query row r = t * group + i (token t, the group's head i) with features
// phi_q [len * group, m], against the sums carried into the chunk, weighed by carried[t], plus the
// first visible[t] of `keys` keys (visible null: keys == len and token t sees keys j <= t), key j with
// features phi_k [keys, m] and value at v + j * v_stride, its weight for token t times
// decay[t * keys + j] (null: 1). Writes num [len * group, dv] and den [len * group]. As matrix
// products (cpu::MatMulNN: SIMD in fp32, plain loops in fp64): the kernel values phi_q phi_k^T, masked, times the values; the carried sums
// (compensations added) read by phi_q in one product, their normalizer as its last column.
template <typename T>
void ChunkReads(int m, int dv, int len, int group, const T* phi_q, int keys, const T* phi_k, const T* v,
                int64_t v_stride, const int* visible, const T* carried, const T* decay, FeatureState<T> h, T* num,
                T* den) {
  const int rows = len * group;
  // phi_k^T [m, keys], the values [keys, dv], the kernel values [rows, keys], the carried sums
  // [m, dv + 1] and their read [rows, dv + 1].
  thread_local std::vector<T> kt, vc, w, sums, read;
  kt.resize(size_t(m) * keys);
  for (int j = 0; j < keys; ++j) {
    for (int f = 0; f < m; ++f) kt[size_t(f) * keys + j] = phi_k[size_t(j) * m + f];
  }
  vc.resize(size_t(keys) * dv);
  for (int j = 0; j < keys; ++j) std::copy(v + j * v_stride, v + j * v_stride + dv, vc.data() + size_t(j) * dv);
  w.resize(size_t(rows) * keys);
  if (keys > 0) cpu::MatMulNN(phi_q, rows, m, kt.data(), keys, w.data());
  for (int r = 0; r < rows; ++r) {
    const int t = r / group, seen = visible != nullptr ? visible[t] : t + 1;
    T* wr = w.data() + size_t(r) * keys;
    T sum = 0;
    for (int j = 0; j < keys; ++j) {
      if (j >= seen) {
        wr[j] = 0;
      } else {
        if (decay != nullptr) wr[j] *= decay[size_t(t) * keys + j];
        sum += wr[j];
      }
    }
    den[r] = sum;
  }
  if (keys > 0) {
    cpu::MatMulNN(w.data(), rows, keys, vc.data(), dv, num);
  } else {
    std::fill(num, num + size_t(rows) * dv, T(0));
  }
  sums.resize(size_t(m) * (dv + 1));
  for (int f = 0; f < m; ++f) {
    T* out = sums.data() + size_t(f) * (dv + 1);
    const T* s = h.S + size_t(f) * dv;
    for (int d = 0; d < dv; ++d) out[d] = h.S_comp ? s[d] + h.S_comp[size_t(f) * dv + d] : s[d];
    out[dv] = h.S_comp ? h.z[f] + h.z_comp[f] : h.z[f];
  }
  read.resize(size_t(rows) * (dv + 1));
  cpu::MatMulNN(phi_q, rows, m, sums.data(), dv + 1, read.data());
  for (int r = 0; r < rows; ++r) {
    const T c = carried[r / group];
    const T* rr = read.data() + size_t(r) * (dv + 1);
    T* nr = num + size_t(r) * dv;
    for (int d = 0; d < dv; ++d) nr[d] += c * rr[d];
    den[r] += c * rr[dv];
  }
}

}  // namespace steady

#endif  // STEADY_MODEL_MECHANISMS_FEATURE_STATE_H_
