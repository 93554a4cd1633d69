// Command-line parsing for steady-cli: `--name value`, `--name=value`, `--switch`, and positional
// words in any order. (The same pattern as tools/steady/flags.h, without its model/ dependencies:
// clients speak the API only.)
#ifndef STEADY_CLIENTS_CLI_ARGS_H_
#define STEADY_CLIENTS_CLI_ARGS_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace steady::cli {

class Args {
 public:
  // `with_value` flags take a value, `switches` none; repeated flags keep every value.
  static absl::StatusOr<Args> Parse(const std::vector<std::string>& argv, const std::set<std::string>& with_value,
                                    const std::set<std::string>& switches);

  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  std::string Get(const std::string& name, const std::string& def = "") const;
  std::vector<std::string> GetAll(const std::string& name) const;
  absl::StatusOr<int64_t> GetInt(const std::string& name, int64_t def, int64_t lo, int64_t hi) const;
  absl::StatusOr<uint64_t> GetUint(const std::string& name, uint64_t def) const;
  absl::StatusOr<double> GetDouble(const std::string& name, double def) const;
  const std::vector<std::string>& positional() const { return positional_; }
  // Removes the first `n` positional words (a command's own name).
  void DropPositional(size_t n) { positional_.erase(positional_.begin(), positional_.begin() + std::min(n, positional_.size())); }
  // INVALID_ARGUMENT unless there are exactly `names.size()` positional words (named in the message).
  absl::Status ExpectPositional(const std::vector<std::string>& names) const;

 private:
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> positional_;
};

}  // namespace steady::cli

#endif  // STEADY_CLIENTS_CLI_ARGS_H_
