// Draft tokens for speculative decoding (docs/speculative.md). Drafts are only proposals: the
// target model verifies them in one step and keeps what it would have generated anyway, so a bad
// draft costs speed, never correctness. This folder proposes; model/decoder verifies and rolls back.
// May include base/ and absl only.
#ifndef STEADY_MODEL_SPECULATE_NGRAM_H_
#define STEADY_MODEL_SPECULATE_NGRAM_H_

#include <cstdint>
#include <span>
#include <vector>

namespace steady {

struct NgramOptions {
  int max_ngram = 3;  // the longest tail of the context looked up
  int min_ngram = 1;  // the shortest
};

// Prompt lookup: up to `k` tokens proposed to follow `context` (the session's prompt and generated
// tokens): the tokens that followed the most recent earlier occurrence of the context's last n
// tokens, for the largest n in [min_ngram, max_ngram] that occurs. Empty when none does (or k < 1).
// Strong wherever the output repeats its input: edits, summaries, code, retrieval-augmented answers.
// One scan of the context per n: O(len * max_ngram).
std::vector<int32_t> NgramDraft(std::span<const int32_t> context, int k, const NgramOptions& options = {});

}  // namespace steady

#endif  // STEADY_MODEL_SPECULATE_NGRAM_H_
