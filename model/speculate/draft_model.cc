#include "model/speculate/draft_model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace steady {

absl::Status CheckSameTokenizer(const Tokenizer& target, const Tokenizer& draft) {
  auto refuse = [](const std::string& what) {
    return absl::FailedPreconditionError(
        absl::StrCat("--draft-model: its tokenizer differs from the target's (", what,
                     "); a draft model must share the target's tokenizer"));
  };
  if (target.vocab_size() != draft.vocab_size()) {
    return refuse(absl::StrCat(draft.vocab_size(), " tokens against ", target.vocab_size()));
  }
  if (target.bos_id() != draft.bos_id() || target.eos_id() != draft.eos_id()) {
    return refuse(absl::StrCat("BOS/EOS ids ", draft.bos_id(), "/", draft.eos_id(), " against ", target.bos_id(), "/",
                               target.eos_id()));
  }
  for (int id = 0; id < target.vocab_size(); ++id) {
    auto a = target.Decode({id}), b = draft.Decode({id});
    if (a.ok() != b.ok() || (a.ok() && *a != *b)) {
      return refuse(absl::StrCat("token ", id, " is \"", b.ok() ? *b : "?", "\" against \"", a.ok() ? *a : "?", "\""));
    }
  }
  return absl::OkStatus();
}

DraftModel::DraftModel(const Model& model, int lanes, int target_vocab, BackendOptions options)
    : model_(model),
      vocab_(std::min(model.vocab_size(), target_vocab)),
      fed_(size_t(lanes), 0),
      stepped_(size_t(lanes)),
      marked_(size_t(lanes), false) {
  options.slots = lanes;
  backend_ = MakeCpuBackend(model, options);
}

void DraftModel::Settle(int lane, int keep) {
  if (!marked_[size_t(lane)]) return;
  backend_->RollBack(lane, keep);
  fed_[size_t(lane)] += keep;
  stepped_[size_t(lane)].clear();
  marked_[size_t(lane)] = false;
}

void DraftModel::Reset(int lane) {
  Settle(lane, 0);
  backend_->Reset(lane);
  fed_[size_t(lane)] = 0;
}

int DraftModel::Argmax(const float* logits) const {
  return int(std::max_element(logits, logits + vocab_) - logits);  // ties: the lowest id, as greedy sampling
}

std::vector<std::vector<int32_t>> DraftModel::Draft(const std::vector<Call>& calls) {
  constexpr size_t kChunk = 512;  // tokens per Forward when a lane catches up on a long context
  const size_t vocab = size_t(model_.vocab_size());
  std::vector<std::vector<int32_t>> drafts(calls.size());
  std::vector<Segment> segments;
  for (const Call& c : calls) {
    STEADY_CHECK(c.k >= 1 && c.lane >= 0 && c.lane < lanes());
    // The stepped proposals the context took (those the target accepted) stay in the state.
    const std::vector<int32_t>& stepped = stepped_[size_t(c.lane)];
    const int64_t before = fed_[size_t(c.lane)];
    STEADY_CHECK(before <= int64_t(c.context.size()));
    const size_t room = c.context.size() - size_t(before);
    const size_t took = size_t(std::mismatch(stepped.begin(), stepped.begin() + std::min(stepped.size(), room),
                                             c.context.begin() + before).first - stepped.begin());
    Settle(c.lane, int(took));
    int64_t& fed = fed_[size_t(c.lane)];
    if (fed == int64_t(c.context.size())) Reset(c.lane);  // nothing new: its last logits are not kept
    // A long catch-up (a new prompt) in chunks of its own; the last chunk goes in the batched step.
    std::vector<float> ignored;
    while (c.context.size() - size_t(fed) > kChunk) {
      backend_->Forward({{c.lane, {c.context.begin() + fed, c.context.begin() + fed + kChunk}, false}}, &ignored);
      fed += kChunk;
    }
    segments.push_back({c.lane, {c.context.begin() + fed, c.context.end()}, false});
    fed = int64_t(c.context.size());
  }
  std::vector<float> logits;
  backend_->Forward(segments, &logits);
  for (size_t i = 0; i < calls.size(); ++i) {
    drafts[i].push_back(Argmax(logits.data() + i * vocab));
    if (calls[i].k > 1) {
      backend_->MarkRollback(calls[i].lane);
      marked_[size_t(calls[i].lane)] = true;
    }
  }
  // Further positions in the lanes themselves, after the mark: each call's last proposal in, its
  // next out.
  for (int j = 1;; ++j) {
    std::vector<size_t> open;
    segments.clear();
    for (size_t i = 0; i < calls.size(); ++i) {
      if (calls[i].k <= j) continue;
      open.push_back(i);
      segments.push_back({calls[i].lane, {drafts[i].back()}, false});
      stepped_[size_t(calls[i].lane)].push_back(drafts[i].back());
    }
    if (open.empty()) break;
    backend_->Forward(segments, &logits);
    for (size_t r = 0; r < open.size(); ++r) drafts[open[r]].push_back(Argmax(logits.data() + r * vocab));
  }
  return drafts;
}

}  // namespace steady
