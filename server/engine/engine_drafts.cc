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

namespace {

// A lane continues a session's turns while its context stays below this many tokens (a softmax
// draft's KV cache grows with it); beyond, the next turn starts over from its own tokens.
constexpr size_t kMaxCarriedDraftContext = 8192;

}  // namespace

int Engine::Impl::TakeDraftLane(EngineJob& job) {
  if (job.draft_lane >= 0 && draft_lanes[size_t(job.draft_lane)].job == job.id) {
    draft_lanes[size_t(job.draft_lane)].last_step = step;
    return job.draft_lane;
  }
  const auto is_free = [&](const DraftLane& lane) { return lane.job == 0 || !jobs.contains(lane.job); };
  // The session's previous turn's lane: its state holds a prefix of that turn's context, which this
  // job's continues.
  for (size_t i = 0; i < draft_lanes.size(); ++i) {
    DraftLane& lane = draft_lanes[i];
    if (!is_free(lane) || lane.carried.empty() || lane.session != job.session_id ||
        lane.carried.size() + job.context.size() > kMaxCarriedDraftContext) {
      continue;
    }
    job.draft_context = std::move(lane.carried);
    job.draft_context.insert(job.draft_context.end(), job.context.begin(), job.context.end());
    lane = {job.id, step, {}, {}};
    job.draft_lane = int(i);
    return job.draft_lane;
  }
  // Else a free lane that keeps no session's turn, a free one, or the least recently used one not
  // drafting this step.
  int clean = -1, free = -1, used = -1;
  for (size_t i = 0; i < draft_lanes.size(); ++i) {
    const DraftLane& lane = draft_lanes[i];
    if (is_free(lane)) {
      if (lane.carried.empty() && clean < 0) clean = int(i);
      if (free < 0) free = int(i);
    } else if (lane.last_step < step && (used < 0 || lane.last_step < draft_lanes[size_t(used)].last_step)) {
      used = int(i);
    }
  }
  const int best = clean >= 0 ? clean : free >= 0 ? free : used;
  // A step has at most max_batch decode rows, one per lane.
  STEADY_CHECK(best >= 0);
  draft_lanes[size_t(best)] = {job.id, step, {}, {}};
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
      const int lane = TakeDraftLane(job);  // may set draft_context
      calls.push_back({lane, job.draft_context.empty() ? job.context : job.draft_context, k[d]});
      by_model.push_back(d);
    } else {
      drafts[d] = NgramDraft(job.draft_context.empty() ? job.context : job.draft_context, k[d]);
    }
  }
  if (!calls.empty()) {
    std::vector<std::vector<int32_t>> proposed = draft->Draft(calls);
    for (size_t c = 0; c < calls.size(); ++c) drafts[by_model[c]] = std::move(proposed[c]);
  }
  return drafts;
}

}  // namespace steady
