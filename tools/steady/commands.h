// Subcommands of build/bin/steady: each file's XCommand() says its name, usage and flags; main.cc
// parses the arguments after the name, answers --help, and runs it.
#ifndef STEADY_TOOLS_STEADY_COMMANDS_H_
#define STEADY_TOOLS_STEADY_COMMANDS_H_

#include <initializer_list>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/decoder/model.h"
#include "model/load.h"
#include "model/model_flags.h"

namespace steady {

struct Command {
  std::string name;
  std::string usage;  // `steady NAME --help` prints it; `steady --help` prints every command's
  FlagSpec flags;
  absl::Status (*run)(const Flags& flags);
};

Command GenerateCommand();  // cmd_generate.cc
Command EvalCommand();      // cmd_eval.cc
Command AttnCommand();      // cmd_attn.cc
Command InitCommand();      // cmd_init.cc
Command InfoCommand();      // cmd_init.cc
Command BenchCommand();     // cmd_bench.cc
Command LogitsCommand();    // cmd_logits.cc
Command TokenizeCommand();  // cmd_tokenize.cc
Command ChatTemplateCommand();  // cmd_chat_template.cc
Command GgufInfoCommand();  // cmd_gguf.cc

// The union of flag names: a command's own and the shared sets of model/model_flags.h.
std::set<std::string> FlagUnion(std::initializer_list<std::set<std::string>> sets);

// Loads --model DIR with the mechanism flags applied.
absl::StatusOr<Model> LoadModelFromFlags(const Flags& flags);
// The shape --config FILE or --preset tiny|llama1b names (default tiny), with the mechanism flags
// applied; no weights (tools/steady/cmd_init.cc). NOT_FOUND for a missing file.
absl::StatusOr<ModelConfig> ConfigFromFlags(const Flags& flags);

}  // namespace steady

#endif  // STEADY_TOOLS_STEADY_COMMANDS_H_
