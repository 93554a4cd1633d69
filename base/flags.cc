#include "base/flags.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace steady {
namespace {

bool IsHelp(const std::string& arg) { return arg == "--help" || arg == "-h"; }

}  // namespace

absl::StatusOr<Flags> Flags::Parse(const std::vector<std::string>& args, const FlagSpec& spec) {
  Flags f;
  // A usage error is forgiven when --help comes anywhere: the user asked for the usage.
  auto fail = [&](size_t i, std::string message) -> absl::StatusOr<Flags> {
    if (f.help_) return f;
    for (size_t j = i; j < args.size(); ++j) {
      if (IsHelp(args[j])) {
        f.help_ = true;
        return f;
      }
    }
    return absl::InvalidArgumentError(message);
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (IsHelp(arg)) {
      f.help_ = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0 || arg == "--") {
      if (!spec.positional) return fail(i, absl::StrCat("unexpected argument \"", arg, "\""));
      f.positional_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2), value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (spec.switches.count(name)) {
      if (inline_value) return fail(i, absl::StrCat("--", name, " takes no value"));
      value = "true";
    } else if (spec.with_value.count(name)) {
      if (!inline_value) {
        if (i + 1 >= args.size()) return fail(i, absl::StrCat("--", name, " needs a value"));
        value = args[++i];
      }
    } else {
      return fail(i, absl::StrCat("unknown flag --", name));
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
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, ": expected an integer in [", lo, ", ", hi, "], got \"", s, "\""));
  }
  return int64_t(v);
}

absl::StatusOr<uint64_t> Flags::GetUint(const std::string& name, uint64_t def) const {
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

absl::StatusOr<double> Flags::GetDouble(const std::string& name, double def, bool allow_nonfinite) const {
  if (!Has(name)) return def;
  const std::string s = Get(name);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || (!allow_nonfinite && !std::isfinite(v))) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, ": expected a ", allow_nonfinite ? "" : "finite ",
                                                   "number, got \"", s, "\""));
  }
  return v;
}

absl::StatusOr<int64_t> Flags::GetBytes(const std::string& name, const std::string& def) const {
  const std::string text = Get(name, def);
  const auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, ": expected bytes like 1073741824 or 1G, got \"", text, "\""));
  };
  if (text.empty()) return bad();
  int shift = 0;
  std::string digits = text;
  switch (text.back()) {
    case 'K': case 'k': shift = 10; break;
    case 'M': case 'm': shift = 20; break;
    case 'G': case 'g': shift = 30; break;
    default: break;
  }
  if (shift > 0) digits.pop_back();
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 15) {
    return bad();
  }
  const int64_t value = std::stoll(digits);
  if (value <= 0 || value > (int64_t(1) << (62 - shift))) return bad();
  return value << shift;
}

absl::Status Flags::ExpectPositional(const std::vector<std::string>& names) const {
  if (positional_.size() == names.size()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("expected ", names.empty() ? "no arguments" : absl::StrJoin(names, " "),
                                                 ", got ", positional_.size(), " argument(s)"));
}

Flags ParseFlagsOrExit(int argc, char** argv, const FlagSpec& spec, const std::string& usage) {
  absl::StatusOr<Flags> flags = Flags::Parse(argc - 1, argv + 1, spec);
  ExitOnUsageError(argv[0], flags.status(), usage);
  if (flags->help()) {
    std::fputs(usage.c_str(), stdout);
    std::exit(0);
  }
  return *std::move(flags);
}

void ExitOnUsageError(const char* argv0, const absl::Status& s, const std::string& usage) {
  if (s.ok()) return;
  std::string program = argv0;
  if (const size_t slash = program.rfind('/'); slash != std::string::npos) program = program.substr(slash + 1);
  std::fprintf(stderr, "%s: %s\n\n%s", program.c_str(), std::string(s.message()).c_str(), usage.c_str());
  std::exit(2);
}

}  // namespace steady
