#include "model/speculate/ngram.h"

#include <algorithm>

namespace steady {

std::vector<int32_t> NgramDraft(std::span<const int32_t> context, int k, const NgramOptions& options) {
  const int64_t len = int64_t(context.size());
  if (k < 1) return {};
  for (int n = std::min<int64_t>(options.max_ngram, len - 1); n >= std::max(1, options.min_ngram); --n) {
    const std::span<const int32_t> tail = context.subspan(size_t(len - n));
    // The most recent match that has a token after it and is not the tail itself: start <= len - n - 1.
    for (int64_t start = len - n - 1; start >= 0; --start) {
      if (!std::equal(tail.begin(), tail.end(), context.begin() + start)) continue;
      const int64_t from = start + n, to = std::min(len, from + k);
      return std::vector<int32_t>(context.begin() + from, context.begin() + to);
    }
  }
  return {};
}

}  // namespace steady
