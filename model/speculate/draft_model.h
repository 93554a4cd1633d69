// A draft model for speculative decoding (docs/speculative.md): a smaller checkpoint with the
// target's tokenizer, any mechanism, on a CPU backend of its own. Drafts are only proposals: the
// target verifies them, so the draft's arithmetic never changes the output, only the speed.
#ifndef STEADY_MODEL_SPECULATE_DRAFT_MODEL_H_
#define STEADY_MODEL_SPECULATE_DRAFT_MODEL_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "model/backend/backend.h"
#include "model/decoder/model.h"
#include "model/text/tokenizer.h"

namespace steady {

// OK when `draft` is `target`'s tokenizer: the same vocabulary size, BOS and EOS ids, and the same
// text for every id. Else FAILED_PRECONDITION naming the first difference (a draft proposing ids
// in another vocabulary would have every draft rejected).
absl::Status CheckSameTokenizer(const Tokenizer& target, const Tokenizer& draft);

// The draft model's states, one *lane* per target session that speculates (the engine: one per
// target slot; steady generate: lane 0). A lane's state holds the first `fed` tokens of its
// context, which grows only by the target's accepted tokens, then the proposals it stepped through
// after a rollback mark (Backend::MarkRollback). The next Draft keeps the proposals the context
// took (the target accepted them) and rolls the rest back: a KV cache is cut back, a fixed-size
// state restored from its copy and the kept proposals' attention replayed; then it feeds the tokens
// the lane lacks and proposes k tokens greedily in the lane itself. No copy of a KV cache, and no
// Forward of an accepted proposal a second time.
class DraftModel {
 public:
  // `model` outlives this. `options`: the draft backend's (CPU threads and weights; slots are set
  // here: one per lane). Drafts are ids below `target_vocab` (the target's logits rows).
  DraftModel(const Model& model, int lanes, int target_vocab, BackendOptions options = {});
  int lanes() const { return int(fed_.size()); }
  const Model& model() const { return model_; }

  // The lane forgets its state: the next Draft feeds its whole context.
  void Reset(int lane);

  struct Call {
    int lane;
    // The lane's tokens: the first fed(lane) are those it was fed since its Reset (the caller's
    // contract: a context only grows).
    std::span<const int32_t> context;
    int k;  // tokens to propose (>= 1)
  };
  // Each call's up-to-k greedy proposals after its context. Batched: one Forward over every call's
  // new tokens, then one per further draft position over the calls' lanes.
  std::vector<std::vector<int32_t>> Draft(const std::vector<Call>& calls);

  int64_t fed(int lane) const { return fed_[size_t(lane)]; }
  // The lane's state: its first fed(lane) context tokens, then the proposals it stepped through
  // (all but the last of its last Draft's). For tests.
  SlotState ReadLane(int lane) { return backend_->ReadSlot(lane); }

 private:
  int Argmax(const float* logits) const;

  const Model& model_;
  const int vocab_;                   // argmax over [0, vocab_): min(draft, target) vocabulary
  // Drops the lane's stepped proposals beyond the first `keep` (its open mark settled).
  void Settle(int lane, int keep);

  std::unique_ptr<Backend> backend_;  // slot i: lane i
  std::vector<int64_t> fed_;          // per lane: context tokens its state holds
  // Per lane: the proposals its state holds after the first fed_ tokens, since its open rollback
  // mark (none open when `marked` is false).
  std::vector<std::vector<int32_t>> stepped_;
  std::vector<bool> marked_;
};

}  // namespace steady

#endif  // STEADY_MODEL_SPECULATE_DRAFT_MODEL_H_
