// Speculative decoding's drafts in the engine (docs/speculative.md): prompt lookup per job, or the
// draft model batched over the step's drafting jobs, each on a lane of its own.
#include <algorithm>

#include "base/check.h"
#include "model/speculate/ngram.h"
#include "server/engine/engine_impl.h"

namespace steady {

int Engine::Impl::DraftTokens(const EngineJob& job) const {
  if (!pool->Verifies()) return 0;
  const Speculation mode = job.request.speculative.value_or(options.speculative);
  if (mode == Speculation::kOff || (mode == Speculation::kDraft && !draft)) return 0;
  return job.request.draft_tokens.value_or(options.draft_tokens);
}

int Engine::Impl::TakeDraftLane(EngineJob& job) {
  if (job.draft_lane >= 0 && draft_lanes[size_t(job.draft_lane)].job == job.id) {
    draft_lanes[size_t(job.draft_lane)].last_step = step;
    return job.draft_lane;
  }
  int best = -1;  // a free lane, else the least recently used one not drafting this step
  for (size_t i = 0; i < draft_lanes.size(); ++i) {
    const DraftLane& lane = draft_lanes[i];
    const bool free = lane.job == 0 || !jobs.contains(lane.job);
    if (free) {
      best = int(i);
      break;
    }
    if (lane.last_step < step && (best < 0 || lane.last_step < draft_lanes[size_t(best)].last_step)) best = int(i);
  }
  // A step has at most max_batch decode rows, one per lane.
  STEADY_CHECK(best >= 0);
  draft_lanes[size_t(best)] = {job.id, step};
  job.draft_lane = best;
  draft->Reset(best);
  return best;
}

std::vector<std::vector<int32_t>> Engine::Impl::ProposeDrafts(const std::vector<EngineJob*>& decoding,
                                                              const std::vector<int>& k) {
  std::vector<std::vector<int32_t>> drafts(decoding.size());
  std::vector<DraftModel::Call> calls;
  std::vector<size_t> by_model;  // the decode rows of `calls`
  for (size_t d = 0; d < decoding.size(); ++d) {
    if (k[d] <= 0) continue;
    EngineJob& job = *decoding[d];
    if (job.request.speculative.value_or(options.speculative) == Speculation::kDraft) {
      calls.push_back({TakeDraftLane(job), job.context, k[d]});
      by_model.push_back(d);
    } else {
      drafts[d] = NgramDraft(job.lookup.empty() ? job.context : job.lookup, k[d]);
    }
  }
  if (!calls.empty()) {
    std::vector<std::vector<int32_t>> proposed = draft->Draft(calls);
    for (size_t c = 0; c < calls.size(); ++c) drafts[by_model[c]] = std::move(proposed[c]);
  }
  return drafts;
}

}  // namespace steady
