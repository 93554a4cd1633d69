// build/bin/steady: the engine without a server. Generate text, measure perplexity, run one
// attention mechanism on raw tensors, create random checkpoints, benchmark a backend, print a prompt's
// logits.
#include <cstdio>
#include <string>
#include <vector>

#include "tools/steady/commands.h"

namespace steady {

std::set<std::string> FlagUnion(std::initializer_list<std::set<std::string>> sets) {
  std::set<std::string> out;
  for (const std::set<std::string>& s : sets) out.insert(s.begin(), s.end());
  return out;
}

namespace {

std::vector<Command> Commands() {
  return {GenerateCommand(), EvalCommand(), AttnCommand(), InitCommand(), InfoCommand(), BenchCommand(), LogitsCommand(),
          TokenizeCommand(), ChatTemplateCommand(), GgufInfoCommand()};
}

std::string Usage() {
  std::string out = "usage: steady COMMAND [flags]     (steady COMMAND --help: one command)\n\ncommands:\n";
  for (const Command& c : Commands()) out += "\n" + c.usage;
  return out;
}

int Run(int argc, char** argv) {
  const std::string name = argc >= 2 ? argv[1] : "";
  if (name == "--help" || name == "-h" || name == "help") {
    std::fputs(Usage().c_str(), stdout);
    return 0;
  }
  for (const Command& c : Commands()) {
    if (c.name != name) continue;
    auto flags = Flags::Parse(argc - 2, argv + 2, c.flags);
    absl::Status s = flags.status();
    if (flags.ok() && flags->help()) {
      std::fputs(c.usage.c_str(), stdout);
      return 0;
    }
    if (s.ok()) s = c.run(*flags);
    if (s.ok()) return 0;
    std::fprintf(stderr, "steady %s: %s\n", c.name.c_str(), std::string(s.message()).c_str());
    if (s.code() != absl::StatusCode::kInvalidArgument) return 1;
    std::fprintf(stderr, "(steady %s --help shows its usage)\n", c.name.c_str());
    return 2;
  }
  std::fprintf(stderr, "%s\n%s", name.empty() ? "steady: no command" : ("steady: unknown command \"" + name + "\"").c_str(),
               Usage().c_str());
  return 2;
}

}  // namespace
}  // namespace steady

int main(int argc, char** argv) { return steady::Run(argc, argv); }
