// Minimal `--name value` / `--name=value` / `--switch` command-line parsing for the steady tool.
#ifndef STEADY_TOOLS_STEADY_FLAGS_H_
#define STEADY_TOOLS_STEADY_FLAGS_H_

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/backend.h"
#include "model/model.h"
#include "model/sampling.h"

namespace steady {

class Flags {
 public:
  // `switches` take no value; every other flag takes one. Repeated flags keep all values.
  static absl::StatusOr<Flags> Parse(int argc, char** argv, const std::set<std::string>& known,
                                     const std::set<std::string>& switches);

  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  std::string Get(const std::string& name, const std::string& def = "") const;
  std::vector<std::string> GetAll(const std::string& name) const;
  absl::StatusOr<std::string> Require(const std::string& name) const;
  absl::StatusOr<int64_t> GetInt(const std::string& name, int64_t def, int64_t lo, int64_t hi) const;
  absl::StatusOr<double> GetDouble(const std::string& name, double def) const;

 private:
  std::map<std::string, std::vector<std::string>> values_;
};

// Flags shared by the subcommands that load a model.
extern const std::set<std::string> kMechanismFlags;  // --mechanism --order --param --scale
// --mechanism NAME [--order P] [--scale S] [--param key=value ...] -> an override (nullopt if absent).
absl::StatusOr<std::optional<MechanismOverride>> MechanismOverrideFromFlags(const Flags& flags);
extern const std::set<std::string> kSamplingFlags;  // --temperature --top-k --top-p --repetition-penalty --seed
absl::StatusOr<SamplingParams> SamplingFromFlags(const Flags& flags);
extern const std::set<std::string> kDeviceFlags;  // --device cpu|cuda|auto (default auto)
// The backend --device names for `model` (model/backend.h).
absl::StatusOr<std::unique_ptr<Backend>> BackendFromFlags(const Flags& flags, const Model& model,
                                                          const BackendOptions& options = {});

}  // namespace steady

#endif  // STEADY_TOOLS_STEADY_FLAGS_H_
