// The engine's per-step decision, as a pure function of the queue: which waiting jobs get a state
// slot, which decoding jobs advance by one token, and how many prompt tokens each prefilling job
// feeds. No model, no sessions, no clocks: tests/server/engine/scheduler_test.cc drives it with plain structs.
//
// Policy:
//   - Groups: every job belongs to a fair-share group (a tenant). Each resource below is shared
//     equally among the groups that want it, so a group with 64 jobs cannot starve a group with one;
//     with a single group the policy is plain FIFO / round robin as described.
//   - Admission: waiting jobs (no slot yet) get one while slots are available, the groups taking
//     turns (a job each, in order of their earliest waiting job), each group in arrival order.
//   - Decode: every decoding job advances one token per step, up to max_batch rows; beyond that the
//     groups take turns, each offering its job that advanced least recently (round robin), ties in
//     arrival order.
//   - Speculation: the rows of max_batch the decode jobs leave go to speculating jobs' verify rows
//     (decode_rows - 1 each at most), in the same turn order; a verify row never takes a job's one
//     row of a step.
//   - Prefill: prefilling jobs (admitted ones included) share prefill_budget tokens: a max-min fair
//     split over the groups, and inside a group in arrival order (FIFO): the first takes what it still
//     needs up to the group's share, the next the rest, and so on. A prompt longer than the budget is
//     fed in chunks over several steps, so it never stalls decoding jobs for more than one chunk.
#ifndef STEADY_SERVER_ENGINE_SCHEDULER_H_
#define STEADY_SERVER_ENGINE_SCHEDULER_H_

#include <cstdint>
#include <vector>

namespace steady {

enum class JobPhase {
  kWaiting,  // accepted, its session has no state slot yet
  kPrefill,  // feeding its prompt
  kDecode,   // generating, one token per step
};

struct ScheduledJob {
  int64_t id = 0;
  JobPhase phase = JobPhase::kWaiting;
  int64_t prompt_tokens_left = 0;  // kWaiting / kPrefill: prompt tokens not yet in the state (> 0)
  int64_t arrival = 0;             // lower: earlier
  int64_t last_advanced = -1;      // kDecode: step at which the job last got a row (-1: never)
  int64_t group = 0;               // fair-share group
  // kDecode: rows the job could use this step: 1, or 1 + its draft tokens when it speculates
  // (a verify step, docs/speculative.md).
  int64_t decode_rows = 1;
};

struct SchedulerInput {
  std::vector<ScheduledJob> jobs;
  int max_batch = 1;           // decode rows per step
  int64_t prefill_budget = 1;  // prompt tokens per step
  int64_t slots_available = 0; // free slots plus slots the engine may free by offloading idle sessions
};

struct PrefillChunk {
  int64_t id = 0;
  int64_t tokens = 0;
};

struct StepPlan {
  std::vector<int64_t> admit;          // waiting jobs to give a slot, in arrival order
  std::vector<int64_t> decode;         // one row each, in arrival order
  std::vector<int64_t> decode_rows;    // rows granted to each of `decode` (1 plus verify rows)
  std::vector<PrefillChunk> prefill;   // in arrival order
  bool empty() const { return admit.empty() && decode.empty() && prefill.empty(); }
};

StepPlan Schedule(const SchedulerInput& input);

}  // namespace steady

#endif  // STEADY_SERVER_ENGINE_SCHEDULER_H_
