#include "clients/cli/args.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace steady::cli {

absl::StatusOr<Args> Args::Parse(const std::vector<std::string>& argv, const std::set<std::string>& with_value,
                                 const std::set<std::string>& switches) {
  Args a;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (arg.rfind("--", 0) != 0 || arg == "--") {
      a.positional_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2), value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (switches.count(name)) {
      if (inline_value) return absl::InvalidArgumentError(absl::StrCat("--", name, " takes no value"));
      value = "true";
    } else if (with_value.count(name)) {
      if (!inline_value) {
        if (i + 1 >= argv.size()) return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
        value = argv[++i];
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
    a.values_[name].push_back(value);
  }
  return a;
}

std::string Args::Get(const std::string& name, const std::string& def) const {
  auto it = values_.find(name);
  return it == values_.end() ? def : it->second.back();
}

std::vector<std::string> Args::GetAll(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

absl::StatusOr<int64_t> Args::GetInt(const std::string& name, int64_t def, int64_t lo, int64_t hi) const {
  if (!Has(name)) return def;
  const std::string s = Get(name);
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno != 0 || v < lo || v > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, ": expected an integer in [", lo, ", ", hi, "], got \"", s, "\""));
  }
  return int64_t(v);
}

absl::StatusOr<uint64_t> Args::GetUint(const std::string& name, uint64_t def) const {
  if (!Has(name)) return def;
  const std::string s = Get(name);
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (s.empty() || s[0] == '-' || *end != '\0' || errno != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, ": expected an unsigned integer, got \"", s, "\""));
  }
  return uint64_t(v);
}

absl::StatusOr<double> Args::GetDouble(const std::string& name, double def) const {
  if (!Has(name)) return def;
  const std::string s = Get(name);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0') {
    return absl::InvalidArgumentError(absl::StrCat("--", name, ": expected a number, got \"", s, "\""));
  }
  return v;  // NaN and infinities go to the server, which names the field it refuses
}

absl::Status Args::ExpectPositional(const std::vector<std::string>& names) const {
  if (positional_.size() == names.size()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("expected ", names.empty() ? "no arguments" : absl::StrJoin(names, " "),
                                                 ", got ", positional_.size(), " argument(s)"));
}

}  // namespace steady::cli
