// What a session id may be: the key a session is stored under, checked by the engine before it
// reaches a store and by the snapshot reader before it trusts one.
#ifndef STEADY_SERVER_STORE_SESSION_ID_H_
#define STEADY_SERVER_STORE_SESSION_ID_H_

#include <cstddef>
#include <string_view>

#include "absl/status/status.h"

namespace steady {

inline constexpr size_t kMaxSessionIdChars = 128;
inline constexpr size_t kMaxTenantChars = 64;
// The longest id with its tenant's prefix "TENANT~".
inline constexpr size_t kMaxSessionKeyBytes = kMaxTenantChars + 1 + kMaxSessionIdChars;

// 1..128 characters of [A-Za-z0-9_.-], optionally behind a tenant's prefix "TENANT~" (TENANT: 1..64
// of [A-Za-z0-9_-]; server/engine/engine.h, SessionQuota). INVALID_ARGUMENT naming `field`.
absl::Status CheckSessionId(std::string_view id, std::string_view field);

}  // namespace steady

#endif  // STEADY_SERVER_STORE_SESSION_ID_H_
