// Instructions of N decode steps at a given context length, counted by valgrind's callgrind (a count
// does not depend on what else the machine is doing, unlike a time). Run through
// tools/bench/step_instructions.sh, which starts this under callgrind with instrumentation off and
// prints the table; only the N steps are instrumented.
//   step_instructions MECHANISM_INDEX CONTEXT STEPS
#include <valgrind/callgrind.h>

#include <cstdio>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/flags.h"
#include "tools/bench/bench_setup.h"

int main(int argc, char** argv) {
  const char* usage = "usage: step_instructions MECHANISM_INDEX CONTEXT STEPS\n\n"
                      "Runs STEPS decode steps at CONTEXT tokens for decode_bench's mechanism MECHANISM_INDEX;\n"
                      "under callgrind (tools/bench/step_instructions.sh) only those steps are instrumented.\n";
  const steady::Flags flags = steady::ParseFlagsOrExit(argc, argv, {.positional = true}, usage);
  steady::ExitOnUsageError(argv[0], flags.ExpectPositional({"MECHANISM_INDEX", "CONTEXT", "STEPS"}), usage);
  int spec = 0, steps = 0;
  long long context = 0;
  if (!absl::SimpleAtoi(flags.positional()[0], &spec) || !absl::SimpleAtoi(flags.positional()[1], &context) ||
      !absl::SimpleAtoi(flags.positional()[2], &steps) || spec < 0 || spec >= int(steady::Specs().size()) ||
      context < 1 || steps < 1) {
    steady::ExitOnUsageError(argv[0], absl::InvalidArgumentError(absl::StrCat(
        "expected MECHANISM_INDEX in [0, ", steady::Specs().size(), "), CONTEXT >= 1 and STEPS >= 1")), usage);
  }
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
