#include "tools/steady/flags.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace steady {

const std::set<std::string> kMechanismFlags = {"mechanism", "order", "param", "scale"};
const std::set<std::string> kSamplingFlags = {"temperature", "top-k", "top-p", "repetition-penalty", "seed"};
const std::set<std::string> kDeviceFlags = {"device"};

absl::StatusOr<Flags> Flags::Parse(int argc, char** argv, const std::set<std::string>& known,
                                   const std::set<std::string>& switches) {
  Flags f;
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) return absl::InvalidArgumentError(absl::StrCat("unexpected argument \"", arg, "\""));
    std::string name = arg.substr(2), value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (!known.count(name) && !switches.count(name)) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
    if (switches.count(name)) {
      if (inline_value) return absl::InvalidArgumentError(absl::StrCat("--", name, " takes no value"));
      value = "true";
    } else if (!inline_value) {
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      value = argv[++i];
    }
    f.values_[name].push_back(value);
  }
  return f;
}

std::string Flags::Get(const std::string& name, const std::string& def) const {
  auto it = values_.find(name);
  return it == values_.end() ? def : it->second.back();
}

std::vector<std::string> Flags::GetAll(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

absl::StatusOr<std::string> Flags::Require(const std::string& name) const {
  if (!Has(name)) return absl::InvalidArgumentError(absl::StrCat("missing required flag --", name));
  return Get(name);
}

absl::StatusOr<int64_t> Flags::GetInt(const std::string& name, int64_t def, int64_t lo, int64_t hi) const {
  if (!Has(name)) return def;
  const std::string s = Get(name);
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno != 0 || v < lo || v > hi) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, ": expected an integer in [", lo, ", ", hi, "], got \"", s, "\""));
  }
  return int64_t(v);
}

absl::StatusOr<double> Flags::GetDouble(const std::string& name, double def) const {
  if (!Has(name)) return def;
  const std::string s = Get(name);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || !std::isfinite(v)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, ": expected a finite number, got \"", s, "\""));
  }
  return v;
}

absl::StatusOr<std::optional<MechanismOverride>> MechanismOverrideFromFlags(const Flags& flags) {
  if (!flags.Has("mechanism")) {
    for (const char* f : {"order", "param", "scale"}) {
      if (flags.Has(f)) return absl::InvalidArgumentError(absl::StrCat("--", f, " needs --mechanism"));
    }
    return std::optional<MechanismOverride>();
  }
  MechanismOverride o;
  o.mechanism = flags.Get("mechanism");
  if (flags.Has("order")) {
    auto order = flags.GetInt("order", 0, -1000000, 1000000);
    if (!order.ok()) return order.status();
    o.params["order"] = *order;
  }
  if (flags.Has("scale")) {
    auto scale = flags.GetDouble("scale", 0);
    if (!scale.ok()) return scale.status();
    o.params["scale"] = *scale;
  }
  for (const std::string& kv : flags.GetAll("param")) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(absl::StrCat("--param: expected key=value, got \"", kv, "\""));
    }
    // JSON values (numbers, true/false, quoted strings); anything else is taken as a plain string.
    nlohmann::json v = nlohmann::json::parse(kv.substr(eq + 1), nullptr, false);
    o.params[kv.substr(0, eq)] = v.is_discarded() ? nlohmann::json(kv.substr(eq + 1)) : v;
  }
  return std::optional<MechanismOverride>(o);
}

absl::StatusOr<SamplingParams> SamplingFromFlags(const Flags& flags) {
  SamplingParams p;
  auto temperature = flags.GetDouble("temperature", 0.0);
  auto top_k = flags.GetInt("top-k", 0, 0, 1 << 30);
  auto top_p = flags.GetDouble("top-p", 1.0);
  auto penalty = flags.GetDouble("repetition-penalty", 1.0);
  auto seed = flags.GetInt("seed", 0, 0, INT64_MAX);
  for (const absl::Status& s : {temperature.status(), top_k.status(), top_p.status(), penalty.status(), seed.status()}) {
    if (!s.ok()) return s;
  }
  p.temperature = float(*temperature);
  p.top_k = int(*top_k);
  p.top_p = float(*top_p);
  p.repetition_penalty = float(*penalty);
  p.seed = uint64_t(*seed);
  if (absl::Status s = ValidateSamplingParams(p); !s.ok()) return s;
  return p;
}

absl::StatusOr<std::unique_ptr<Backend>> BackendFromFlags(const Flags& flags, const Model& model,
                                                          const BackendOptions& options) {
  return MakeBackend(model, flags.Get("device", "auto"), options);
}

}  // namespace steady
