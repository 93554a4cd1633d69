#include "base/status.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
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
  absl::Status out(s.code(), absl::StrCat(context, ": ", std::string(s.message())));
  s.ForEachPayload([&out](absl::string_view type, const absl::Cord& payload) { out.SetPayload(type, payload); });
  return out;
}

namespace {
constexpr char kRetryAfterMsPayload[] = "type.steady.dev/retry-after-ms";
}  // namespace

absl::Status WithRetryAfterMs(absl::Status s, int64_t ms) {
  if (!s.ok()) s.SetPayload(kRetryAfterMsPayload, absl::Cord(std::to_string(ms)));
  return s;
}

std::optional<int64_t> RetryAfterMs(const absl::Status& s) {
  const auto payload = s.GetPayload(kRetryAfterMsPayload);
  int64_t ms = 0;
  if (!payload || !absl::SimpleAtoi(std::string(*payload), &ms)) return std::nullopt;
  return ms;
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
