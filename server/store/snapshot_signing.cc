#include "server/store/snapshot_signing.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/core_names.h>
#include <openssl/params.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/file_io.h"

namespace steady {

namespace {

constexpr std::string_view kDomain{"steady-snapshot-v1\0", 19};

std::string Mac(std::string_view key, std::string_view tenant, std::string_view snapshot) {
  const uint32_t n = uint32_t(tenant.size());
  const unsigned char len[4] = {uint8_t(n), uint8_t(n >> 8), uint8_t(n >> 16), uint8_t(n >> 24)};
  unsigned char out[EVP_MAX_MD_SIZE];
  size_t out_len = 0;
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                               OSSL_PARAM_construct_end()};
  EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  EVP_MAC_CTX* ctx = mac ? EVP_MAC_CTX_new(mac) : nullptr;
  const auto* k = reinterpret_cast<const unsigned char*>(key.data());
  const bool ok = ctx && EVP_MAC_init(ctx, k, key.size(), params) &&
                  EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(kDomain.data()), kDomain.size()) &&
                  EVP_MAC_update(ctx, len, sizeof len) &&
                  EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(tenant.data()), tenant.size()) &&
                  EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(snapshot.data()), snapshot.size()) &&
                  EVP_MAC_final(ctx, out, &out_len, sizeof out);
  EVP_MAC_CTX_free(ctx);
  EVP_MAC_free(mac);
  // libcrypto's HMAC-SHA-256 fails only when the library itself is broken.
  STEADY_CHECK(ok && out_len == 32);
  return std::string(reinterpret_cast<const char*>(out), out_len);
}

}  // namespace

absl::StatusOr<std::string> LoadSnapshotKey(const std::string& path) {
  auto key = ReadWholeFile(path);
  if (!key.ok()) return key.status();
  if (key->size() < kMinSnapshotKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": a snapshot key needs at least ", kMinSnapshotKeyBytes,
                                                   " bytes (e.g. head -c 32 /dev/urandom), got ", key->size()));
  }
  return key;
}

std::string SignSnapshot(std::string_view key, std::string_view tenant, std::string_view snapshot) {
  std::string out;
  out.reserve(kSignedSnapshotHeaderBytes + snapshot.size());
  out.append(kSignedSnapshotMagic).append(Mac(key, tenant, snapshot)).append(snapshot);
  return out;
}

bool IsSignedSnapshot(std::string_view blob) { return blob.substr(0, kSignedSnapshotMagic.size()) == kSignedSnapshotMagic; }

absl::StatusOr<std::string_view> VerifySignedSnapshot(std::string_view key, std::string_view tenant,
                                                      std::string_view blob) {
  if (!IsSignedSnapshot(blob)) {
    return absl::InvalidArgumentError(absl::StrCat("snapshot: not a signed snapshot (", blob.size(), " bytes)"));
  }
  const absl::Status does_not_verify = absl::PermissionDeniedError(
      "snapshot: the signature does not verify (modified, forged, truncated, exported by another tenant, or "
      "signed with another --snapshot-key-file)");
  // Cut inside its MAC: truncated like any other (docs/security.md), not a different kind of input.
  if (blob.size() < kSignedSnapshotHeaderBytes) return does_not_verify;
  const std::string_view snapshot = blob.substr(kSignedSnapshotHeaderBytes);
  const std::string mac = Mac(key, tenant, snapshot);
  if (CRYPTO_memcmp(mac.data(), blob.data() + kSignedSnapshotMagic.size(), mac.size()) != 0) return does_not_verify;
  return snapshot;
}

}  // namespace steady
