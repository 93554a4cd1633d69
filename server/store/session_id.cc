#include "server/store/session_id.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace steady {

absl::Status CheckSessionId(std::string_view id, std::string_view field) {
  if (const size_t tilde = id.find('~'); tilde != std::string_view::npos) {
    const std::string_view tenant = id.substr(0, tilde);
    bool ok = !tenant.empty() && tenant.size() <= kMaxTenantChars;
    for (char c : tenant) {
      ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-');
    }
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat(std::string(field), ": a tenant prefix must be 1..", kMaxTenantChars, " of [A-Za-z0-9_-]"));
    }
    id.remove_prefix(tilde + 1);
  }
  if (id.empty() || id.size() > kMaxSessionIdChars) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(field), ": must be 1..", kMaxSessionIdChars, " characters, got ", id.size()));
  }
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '.' || c == '-';
    if (!ok) return absl::InvalidArgumentError(absl::StrCat(std::string(field), ": only [A-Za-z0-9_.-] are allowed"));
  }
  return absl::OkStatus();
}

}  // namespace steady
