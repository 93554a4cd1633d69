#include "base/status.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace steady {

absl::Status FirstError(std::initializer_list<absl::Status> statuses) {
  for (const absl::Status& s : statuses) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status WithContext(const absl::Status& s, const std::string& context) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(context, ": ", std::string(s.message())));
}

absl::Status ErrnoError(const std::string& what, const std::string& path) {
  const int err = errno;
  const std::string message = absl::StrCat(path, ": ", what, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(message);
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace steady
