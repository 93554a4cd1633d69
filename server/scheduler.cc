#include "server/scheduler.h"

#include <algorithm>
#include <tuple>

namespace steady {

StepPlan Schedule(const SchedulerInput& input) {
  std::vector<const ScheduledJob*> by_arrival;
  by_arrival.reserve(input.jobs.size());
  for (const ScheduledJob& j : input.jobs) by_arrival.push_back(&j);
  std::sort(by_arrival.begin(), by_arrival.end(),
            [](const ScheduledJob* a, const ScheduledJob* b) { return std::tie(a->arrival, a->id) < std::tie(b->arrival, b->id); });

  StepPlan plan;
  // Admission, then prefill over admitted and already prefilling jobs in one FIFO pass.
  int64_t slots = input.slots_available;
  int64_t budget = input.prefill_budget;
  for (const ScheduledJob* j : by_arrival) {
    bool prefilling = j->phase == JobPhase::kPrefill;
    if (j->phase == JobPhase::kWaiting && slots > 0) {
      --slots;
      plan.admit.push_back(j->id);
      prefilling = true;
    }
    if (prefilling && budget > 0 && j->prompt_tokens_left > 0) {
      const int64_t n = std::min(budget, j->prompt_tokens_left);
      plan.prefill.push_back({j->id, n});
      budget -= n;
    }
  }

  // Decode: least recently advanced first, up to max_batch rows; reported in arrival order.
  std::vector<const ScheduledJob*> decoding;
  for (const ScheduledJob* j : by_arrival) {
    if (j->phase == JobPhase::kDecode) decoding.push_back(j);
  }
  std::stable_sort(decoding.begin(), decoding.end(), [](const ScheduledJob* a, const ScheduledJob* b) {
    return a->last_advanced < b->last_advanced;
  });
  if (decoding.size() > size_t(std::max(0, input.max_batch))) decoding.resize(std::max(0, input.max_batch));
  std::sort(decoding.begin(), decoding.end(),
            [](const ScheduledJob* a, const ScheduledJob* b) { return std::tie(a->arrival, a->id) < std::tie(b->arrival, b->id); });
  for (const ScheduledJob* j : decoding) plan.decode.push_back(j->id);
  return plan;
}

}  // namespace steady
