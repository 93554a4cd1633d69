// Command-line flags for every Steady binary: `--name value`, `--name=value`, `--switch`, positional
// words where a command takes them, and `--help` / `-h` everywhere. A binary turns its Flags into an
// options struct once, at its edge (main or a subcommand's Run); nothing below it sees flags.
#ifndef STEADY_BASE_FLAGS_H_
#define STEADY_BASE_FLAGS_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace steady {

// What a command accepts.
struct FlagSpec {
  // (Default member initializers: g++ 12 warns about designated initializers that skip a member.)
  std::set<std::string> with_value = {};  // --name VALUE or --name=VALUE; repeated flags keep every value
  std::set<std::string> switches = {};    // --name, no value
  bool positional = false;                // plain words allowed (else "unexpected argument")
};

class Flags {
 public:
  // INVALID_ARGUMENT naming the flag for an unknown flag, a missing value, a value given to a
  // switch or an unexpected word. `--help` or `-h` in flag position makes help() true and wins over
  // any such error, so `CMD --bad --help` still prints the usage.
  static absl::StatusOr<Flags> Parse(const std::vector<std::string>& args, const FlagSpec& spec);
  static absl::StatusOr<Flags> Parse(int argc, char** argv, const FlagSpec& spec) {
    return Parse(std::vector<std::string>(argv, argv + argc), spec);
  }

  // The caller prints its usage to stdout and exits 0.
  bool help() const { return help_; }

  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  // The last value given, or `def`.
  std::string Get(const std::string& name, const std::string& def = "") const;
  std::vector<std::string> GetAll(const std::string& name) const;
  absl::StatusOr<std::string> Require(const std::string& name) const;
  // Typed values, `def` when absent; errors name the flag, the expected form and the text given.
  absl::StatusOr<int64_t> GetInt(const std::string& name, int64_t def, int64_t lo, int64_t hi) const;
  absl::StatusOr<uint64_t> GetUint(const std::string& name, uint64_t def) const;
  // Finite unless allow_nonfinite (a client passes NaN on for the server to name the field it refuses).
  absl::StatusOr<double> GetDouble(const std::string& name, double def, bool allow_nonfinite = false) const;
  // Bytes: "1073741824", or with a K, M or G suffix (powers of 1024): "64K", "512M", "1G". Positive.
  absl::StatusOr<int64_t> GetBytes(const std::string& name, const std::string& def) const;

  const std::vector<std::string>& positional() const { return positional_; }
  // Removes the first `n` positional words (a command's own name).
  void DropPositional(size_t n) {
    positional_.erase(positional_.begin(), positional_.begin() + std::min(n, positional_.size()));
  }
  // INVALID_ARGUMENT unless there are exactly `names.size()` positional words (named in the message).
  absl::Status ExpectPositional(const std::vector<std::string>& names) const;

 private:
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> positional_;
  bool help_ = false;
};

// For the main() of a small program: parses argv[1..]. `--help` prints `usage` to stdout and exits
// 0; a usage error is handled as ExitOnUsageError does.
Flags ParseFlagsOrExit(int argc, char** argv, const FlagSpec& spec, const std::string& usage);
// When `s` is an error: prints "PROGRAM: message" and `usage` to stderr and exits 2.
void ExitOnUsageError(const char* argv0, const absl::Status& s, const std::string& usage);

}  // namespace steady

#endif  // STEADY_BASE_FLAGS_H_
