#include "server/engine/scheduler.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace steady {

namespace {

bool ByArrival(const ScheduledJob* a, const ScheduledJob* b) { return std::tie(a->arrival, a->id) < std::tie(b->arrival, b->id); }

// Jobs per group, each group's jobs in the order given; the groups in order of their first job.
std::vector<std::vector<const ScheduledJob*>> ByGroup(const std::vector<const ScheduledJob*>& ordered) {
  std::map<int64_t, size_t> index;
  std::vector<std::vector<const ScheduledJob*>> groups;
  for (const ScheduledJob* j : ordered) {
    auto [it, fresh] = index.try_emplace(j->group, groups.size());
    if (fresh) groups.emplace_back();
    groups[it->second].push_back(j);
  }
  return groups;
}

// Up to `limit` jobs, the groups taking turns: each group's first, then each group's second, ...
std::vector<const ScheduledJob*> TakeTurns(const std::vector<std::vector<const ScheduledJob*>>& groups, int64_t limit) {
  std::vector<const ScheduledJob*> out;
  for (size_t round = 0; int64_t(out.size()) < limit; ++round) {
    bool any = false;
    for (const auto& g : groups) {
      if (round < g.size() && int64_t(out.size()) < limit) {
        out.push_back(g[round]);
        any = true;
      }
    }
    if (!any) break;
  }
  return out;
}

// A max-min fair split of `budget` over `demand`: every group gets what it needs or an equal share of
// what is left, whichever is less.
std::vector<int64_t> FairSplit(const std::vector<int64_t>& demand, int64_t budget) {
  std::vector<int64_t> given(demand.size(), 0);
  while (budget > 0) {
    int64_t wanting = 0;
    for (size_t i = 0; i < demand.size(); ++i) wanting += given[i] < demand[i];
    if (wanting == 0) break;
    const int64_t share = std::max<int64_t>(1, budget / wanting);
    for (size_t i = 0; i < demand.size() && budget > 0; ++i) {
      const int64_t g = std::min({share, demand[i] - given[i], budget});
      given[i] += g;
      budget -= g;
    }
  }
  return given;
}

}  // namespace

StepPlan Schedule(const SchedulerInput& input) {
  std::vector<const ScheduledJob*> by_arrival;
  by_arrival.reserve(input.jobs.size());
  for (const ScheduledJob& j : input.jobs) by_arrival.push_back(&j);
  std::sort(by_arrival.begin(), by_arrival.end(), ByArrival);

  StepPlan plan;
  // Admission: the groups take turns at the free slots.
  std::vector<const ScheduledJob*> waiting;
  for (const ScheduledJob* j : by_arrival) {
    if (j->phase == JobPhase::kWaiting) waiting.push_back(j);
  }
  std::vector<const ScheduledJob*> admitted = TakeTurns(ByGroup(waiting), std::max<int64_t>(0, input.slots_available));
  std::sort(admitted.begin(), admitted.end(), ByArrival);
  for (const ScheduledJob* j : admitted) plan.admit.push_back(j->id);

  // Prefill over admitted and already prefilling jobs: a fair split over the groups, FIFO inside each.
  std::vector<const ScheduledJob*> prefilling;
  for (const ScheduledJob* j : by_arrival) {
    const bool admitted_now = std::binary_search(admitted.begin(), admitted.end(), j, ByArrival);
    if ((j->phase == JobPhase::kPrefill || admitted_now) && j->prompt_tokens_left > 0) prefilling.push_back(j);
  }
  const auto prefill_groups = ByGroup(prefilling);
  std::vector<int64_t> demand;
  for (const auto& g : prefill_groups) {
    int64_t need = 0;
    for (const ScheduledJob* j : g) need += j->prompt_tokens_left;
    demand.push_back(need);
  }
  const std::vector<int64_t> share = FairSplit(demand, input.prefill_budget);
  std::map<int64_t, int64_t> chunk;  // job id -> tokens
  for (size_t g = 0; g < prefill_groups.size(); ++g) {
    int64_t budget = share[g];
    for (const ScheduledJob* j : prefill_groups[g]) {
      if (budget <= 0) break;
      const int64_t n = std::min(budget, j->prompt_tokens_left);
      chunk[j->id] = n;
      budget -= n;
    }
  }
  for (const ScheduledJob* j : prefilling) {
    if (auto it = chunk.find(j->id); it != chunk.end()) plan.prefill.push_back({j->id, it->second});
  }

  // Decode: up to max_batch rows, the groups taking turns, each offering its least recently advanced
  // job first; reported in arrival order.
  std::vector<const ScheduledJob*> decoding;
  for (const ScheduledJob* j : by_arrival) {
    if (j->phase == JobPhase::kDecode) decoding.push_back(j);
  }
  std::stable_sort(decoding.begin(), decoding.end(), [](const ScheduledJob* a, const ScheduledJob* b) {
    return a->last_advanced < b->last_advanced;
  });
  std::vector<const ScheduledJob*> rows = TakeTurns(ByGroup(decoding), std::max(0, input.max_batch));
  // The rows left over go to verify rows, in the same turn order.
  int64_t spare = std::max<int64_t>(0, input.max_batch - int64_t(rows.size()));
  std::vector<std::pair<const ScheduledJob*, int64_t>> granted;  // each job's rows
  granted.reserve(rows.size());
  for (const ScheduledJob* j : rows) {
    const int64_t extra = std::min(spare, std::max<int64_t>(0, j->decode_rows - 1));
    granted.push_back({j, 1 + extra});
    spare -= extra;
  }
  std::sort(granted.begin(), granted.end(), [](const auto& a, const auto& b) { return ByArrival(a.first, b.first); });
  for (const auto& [j, n] : granted) {
    plan.decode.push_back(j->id);
    plan.decode_rows.push_back(n);
  }
  return plan;
}

}  // namespace steady
