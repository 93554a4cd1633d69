// Signed session snapshots (docs/security.md, "Signed snapshots"). With `--snapshot-key-file`,
// ExportSession sends
//
//   "STEADYSG" (8 bytes) | HMAC-SHA-256 (32 bytes) | the snapshot (docs/session-snapshot.md)
//
// where the MAC covers "steady-snapshot-v1\0" | u32 LE length of the tenant | the tenant | the
// snapshot, under the server's key (OpenSSL's libcrypto). ImportSession checks the MAC before it
// parses anything else, so a modified or forged blob, or one exported by another tenant, never reaches
// the snapshot parser.
#ifndef STEADY_SERVER_STORE_SNAPSHOT_SIGNING_H_
#define STEADY_SERVER_STORE_SNAPSHOT_SIGNING_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace steady {

inline constexpr std::string_view kSignedSnapshotMagic = "STEADYSG";
inline constexpr size_t kSignedSnapshotHeaderBytes = 8 + 32;
inline constexpr size_t kMinSnapshotKeyBytes = 32;

// The key file's bytes (at least 32; the file is read whole, a trailing newline kept as key bytes).
// INVALID_ARGUMENT naming the file when it is shorter.
absl::StatusOr<std::string> LoadSnapshotKey(const std::string& path);

std::string SignSnapshot(std::string_view key, std::string_view tenant, std::string_view snapshot);

// Whether `blob` starts like a signed snapshot (the magic).
bool IsSignedSnapshot(std::string_view blob);

// The snapshot inside a signed blob: PERMISSION_DENIED when the MAC does not verify under `key` for
// `tenant` (modified, forged, truncated, even inside the header, or another tenant's),
// INVALID_ARGUMENT when it does not begin with the magic. A view into `blob`.
absl::StatusOr<std::string_view> VerifySignedSnapshot(std::string_view key, std::string_view tenant,
                                                      std::string_view blob);

}  // namespace steady

#endif  // STEADY_SERVER_STORE_SNAPSHOT_SIGNING_H_
