// Small absl::Status helpers shared by every layer (the error style: docs/architecture.md, "Errors").
#ifndef STEADY_BASE_STATUS_H_
#define STEADY_BASE_STATUS_H_

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

#include "absl/status/status.h"

namespace steady {

// The first error of `statuses`, or OK: checks several already computed results in one line,
//   if (absl::Status s = FirstError({a.status(), b.status()}); !s.ok()) return s;
absl::Status FirstError(std::initializer_list<absl::Status> statuses);

// `s` with "context: " before its message and the same code and payloads (OK stays OK), for errors
// that travel up through a layer that knows the file, tensor or layer they concern.
absl::Status WithContext(const absl::Status& s, const std::string& context);

// An error for the failed system call that set errno: "PATH: WHAT: strerror(errno)", NOT_FOUND for
// ENOENT, RESOURCE_EXHAUSTED for a full disk (ENOSPC, EDQUOT), INTERNAL otherwise.
absl::Status ErrnoError(const std::string& what, const std::string& path);

// A refusal that knows when a retry may succeed (a peer's lease on a session runs out in `ms`): `s`
// with that hint as a payload, which RetryAfterMs reads back (nullopt: none). The RPC layer sends it
// as the trailing metadata "retry-after" (seconds, rounded up), which the gateway makes HTTP's
// Retry-After.
absl::Status WithRetryAfterMs(absl::Status s, int64_t ms);
std::optional<int64_t> RetryAfterMs(const absl::Status& s);

}  // namespace steady

#endif  // STEADY_BASE_STATUS_H_
