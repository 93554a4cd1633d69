// The ring buffer of the last W keys and values that sliding_window keeps as its whole state and
// window_dark as its exact part. Layout (T elements, at the start of the layer's fixed state):
//   rows   [window, kv_heads, head_dim + value_dim]   row r: the keys then values of every kv head of
//          the last token whose position p has p mod W == r (the softmax KV cache's row layout)
//   cursor [2]   next: the ring row the next token goes to, in [0, W); filled: rows holding tokens,
//                in [0, W] (next == filled until the ring is full, then next runs round)
#ifndef STEADY_MODEL_MECHANISMS_WINDOW_RING_H_
#define STEADY_MODEL_MECHANISMS_WINDOW_RING_H_

#include <algorithm>
#include <cstdint>

#include "model/mechanisms/common.h"
#include "model/mechanisms/kv_rows.h"

namespace steady {

// The largest W a window mechanism accepts: the ring's cursor is stored in the state's own floats,
// which hold integers exactly up to 2^24.
inline constexpr int kSlidingWindowMax = 1 << 24;

// Floats of a ring of `window` rows and its cursor.
inline size_t WindowRingFloats(const AttnShape& s, int window) { return size_t(window) * size_t(KvRowFloats(s)) + 2; }

// A cursor value read back from the state's floats, clamped into [0, hi]. The state comes back from
// snapshots and imports as floats checked only for being finite: whatever they hold, the ring is
// never indexed outside itself.
template <typename T>
int CursorValue(T x, int hi) {
  if (!(x > T(0))) return 0;  // also NaN
  if (x >= T(hi)) return hi;
  return int(x);
}

template <typename T>
struct Ring {
  T* rows;     // [window, kv_heads, head_dim + value_dim]
  T* cursor;   // [next, filled]
  int window;
  int64_t row_floats;
  int next;    // ring row of the next token
  int filled;  // rows holding tokens

  bool Full() const { return filled == window; }
  // The rows holding tokens, oldest first: [next, filled) then [0, next). Until the ring is full
  // next == filled, so that is [0, filled), the same rows and order as softmax's KV cache.
  KvRows<T> Window() const {
    return {rows + int64_t(next) * row_floats, filled - next, rows, next};
  }
  // The oldest row: the one the next Append overwrites once the ring is full.
  const T* Oldest() const { return rows + int64_t(next) * row_floats; }
  // Appends `count` rows (oldest first, [count, row_floats]); only the last W stay. Rows already in
  // the ring are not read, so `src` may be a copy of them.
  // The ring rows and cursor are those `count` Appends of one row each leave (the rows that would be
  // overwritten within the call are skipped, the cursor still passes them).
  void Append(const T* src, int64_t count) {
    const int64_t skipped = std::max<int64_t>(0, count - window);
    next = int((next + skipped) % window);
    filled = int(std::min<int64_t>(filled + skipped, window));
    for (int64_t i = skipped; i < count; ++i) {
      std::copy(src + i * row_floats, src + (i + 1) * row_floats, rows + int64_t(next) * row_floats);
      next = next + 1 == window ? 0 : next + 1;
      filled = std::min(filled + 1, window);
    }
    cursor[0] = T(next);
    cursor[1] = T(filled);
  }
};

// The ring of `window` rows at `base` (the layout above).
template <typename T>
Ring<T> RingAt(const AttnShape& s, int window, T* base) {
  const int64_t row = KvRowFloats(s);
  Ring<T> r{base, base + int64_t(window) * row, window, row, 0, 0};
  r.filled = CursorValue(r.cursor[1], window);
  // Before the ring is full the next row is the first empty one; after, the cursor says.
  r.next = r.filled < window ? r.filled : CursorValue(r.cursor[0], window - 1);
  return r;
}

}  // namespace steady

#endif  // STEADY_MODEL_MECHANISMS_WINDOW_RING_H_
