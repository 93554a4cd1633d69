// Subcommands of build/bin/steady. Each takes the arguments after its name and returns an exit code.
#ifndef STEADY_TOOLS_STEADY_COMMANDS_H_
#define STEADY_TOOLS_STEADY_COMMANDS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/model.h"
#include "model/model_flags.h"

namespace steady {

absl::Status RunGenerate(int argc, char** argv);
absl::Status RunEval(int argc, char** argv);
absl::Status RunAttn(int argc, char** argv);
absl::Status RunInit(int argc, char** argv);
absl::Status RunInfo(int argc, char** argv);
absl::Status RunBench(int argc, char** argv);

// Loads --model DIR with the mechanism flags applied.
absl::StatusOr<Model> LoadModelFromFlags(const Flags& flags);
// The shape --config FILE or --preset tiny|llama1b names (default tiny), with the mechanism flags
// applied; no weights (tools/steady/cmd_init.cc). NOT_FOUND for a missing file.
absl::StatusOr<ModelConfig> ConfigFromFlags(const Flags& flags);

}  // namespace steady

#endif  // STEADY_TOOLS_STEADY_COMMANDS_H_
