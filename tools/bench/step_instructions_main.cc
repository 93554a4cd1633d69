// Instructions of N decode steps at a given context length, counted by valgrind's callgrind (a count
// does not depend on what else the machine is doing, unlike a time). Run through
// tools/bench/step_instructions.sh, which starts this under callgrind with instrumentation off and
// prints the table; only the N steps are instrumented.
//   step_instructions MECHANISM_INDEX CONTEXT STEPS
#include <valgrind/callgrind.h>

#include <cstdio>
#include <cstdlib>

#include "tools/bench/bench_setup.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: step_instructions MECHANISM_INDEX CONTEXT STEPS\n");
    return 2;
  }
  const int spec = std::atoi(argv[1]);
  const long long context = std::atoll(argv[2]);
  const int steps = std::atoi(argv[3]);
  if (spec < 0 || spec >= int(steady::Specs().size()) || context < 1 || steps < 1) return 2;
  const steady::Model& m = steady::GetModel(spec);
  steady::StatePool pool(m, 1);
  // 64 real tokens (not decode_bench's 1,024): under valgrind the prefill dominates the run time,
  // and the step's instructions do not depend on how many tokens the fixed state has absorbed.
  steady::FillContext(m, pool, context, 64);
  steady::ForwardWorkspace ws;
  std::vector<float> logits;
  m.Forward({steady::Segment{0, {5}, false}}, pool, ws, &logits);  // warm the workspace
  CALLGRIND_START_INSTRUMENTATION;
  for (int i = 0; i < steps; ++i) m.Forward({steady::Segment{0, {int32_t(5 + i)}, false}}, pool, ws, &logits);
  CALLGRIND_STOP_INSTRUMENTATION;
  std::printf("%s\n", steady::Specs()[spec].name);
  return 0;
}
