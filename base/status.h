// Small absl::Status helpers shared by every layer (the error style: docs/architecture.md, "Errors").
#ifndef STEADY_BASE_STATUS_H_
#define STEADY_BASE_STATUS_H_

#include <initializer_list>
#include <string>

#include "absl/status/status.h"

namespace steady {

// The first error of `statuses`, or OK: checks several already computed results in one line,
//   if (absl::Status s = FirstError({a.status(), b.status()}); !s.ok()) return s;
absl::Status FirstError(std::initializer_list<absl::Status> statuses);

// `s` with "context: " before its message and the same code (OK stays OK), for errors that travel
// up through a layer that knows the file, tensor or layer they concern.
absl::Status WithContext(const absl::Status& s, const std::string& context);

// An error for the failed system call that set errno: "PATH: WHAT: strerror(errno)", NOT_FOUND for
// ENOENT, RESOURCE_EXHAUSTED for a full disk (ENOSPC, EDQUOT), INTERNAL otherwise.
absl::Status ErrnoError(const std::string& what, const std::string& path);

}  // namespace steady

#endif  // STEADY_BASE_STATUS_H_
