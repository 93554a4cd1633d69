// API keys and tenants (docs/security.md): `--api-keys FILE` names each tenant, the SHA-256 of each
// of its keys (never a key itself) and its quotas:
//
//   {"tenants": {"alice": {"keys_sha256": ["<64 hex digits>", ...],
//                          "max_sessions": 100, "max_state_bytes": 0,
//                          "max_concurrent_generates": 8, "tokens_per_minute": 0}}}
//
// (0 or absent: unlimited). A client sends `authorization: Bearer KEY`; the key's SHA-256 is compared
// with every listed hash in constant time. The file reloads on SIGHUP: calls already running keep
// going, every later call sees the new file (a removed key fails at once).
#ifndef STEADY_SERVER_AUTH_API_KEYS_H_
#define STEADY_SERVER_AUTH_API_KEYS_H_

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace steady {

struct TenantQuotas {
  int64_t max_sessions = 0;              // named sessions (resident or offloaded)
  int64_t max_state_bytes = 0;           // state bytes of those sessions
  int64_t max_concurrent_generates = 0;  // Generate calls running at once
  int64_t tokens_per_minute = 0;         // prompt + completion tokens, a token bucket of this size
};

using KeyHash = std::array<uint8_t, 32>;  // SHA-256

struct Tenant {
  std::string name;  // [A-Za-z0-9_-], 1..64 bytes: the prefix of its sessions' ids
  TenantQuotas quotas;
  std::vector<KeyHash> keys;
};
inline constexpr size_t kMaxTenantNameBytes = 64;

struct ApiKeys {
  std::vector<std::shared_ptr<const Tenant>> tenants;
};

// The file's contents; INVALID_ARGUMENT naming the tenant and field (unknown fields, a hash that is
// not 64 hex digits, a key listed twice, a negative quota, a bad tenant name).
absl::StatusOr<ApiKeys> ParseApiKeys(std::string_view json);
absl::StatusOr<ApiKeys> LoadApiKeys(const std::string& path);
// SHA-256 (OpenSSL's libcrypto).
KeyHash Sha256(std::string_view data);
std::string HexDigest(const KeyHash& hash);

// Thread-safe: Authenticate runs on RPC threads while Reload swaps the keys.
class Authenticator {
 public:
  // Loads `path`; the error names the file.
  static absl::StatusOr<std::unique_ptr<Authenticator>> Load(std::string path);
  // Reads the file again; on an error the previous keys stay in force.
  absl::Status Reload();
  // The tenant whose key `authorization` carries ("Bearer KEY", the gRPC metadata's value).
  // UNAUTHENTICATED when it is missing, malformed or unknown.
  absl::StatusOr<std::shared_ptr<const Tenant>> Authenticate(std::string_view authorization) const;
  // Tenant names, for labelling metrics (bounded by the file).
  std::vector<std::string> TenantNames() const;
  const std::string& path() const { return path_; }

 private:
  Authenticator(std::string path, std::shared_ptr<const ApiKeys> keys) : path_(std::move(path)), keys_(std::move(keys)) {}
  std::shared_ptr<const ApiKeys> Current() const;

  const std::string path_;
  mutable std::mutex mu_;
  std::shared_ptr<const ApiKeys> keys_;  // guarded by mu_ (the pointer; the keys are immutable)
};

}  // namespace steady

#endif  // STEADY_SERVER_AUTH_API_KEYS_H_
