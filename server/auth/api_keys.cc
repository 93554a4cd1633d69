#include "server/auth/api_keys.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/file_io.h"
#include "base/status.h"

namespace steady {

KeyHash Sha256(std::string_view data) {
  KeyHash out{};
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), out.data(), &len, EVP_sha256(), nullptr);
  return out;
}

std::string HexDigest(const KeyHash& hash) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : hash) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

namespace {

bool ParseHex(std::string_view hex, KeyHash& out) {
  if (hex.size() != 64) return false;
  for (size_t i = 0; i < 32; ++i) {
    int v = 0;
    for (char c : hex.substr(2 * i, 2)) {
      c = absl::ascii_tolower(c);
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) return false;
      v = v * 16 + d;
    }
    out[i] = uint8_t(v);
  }
  return true;
}

absl::Status CheckTenantName(const std::string& name) {
  bool ok = !name.empty() && name.size() <= kMaxTenantNameBytes;
  for (char c : name) ok = ok && (absl::ascii_isalnum(c) || c == '_' || c == '-');
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("tenants: \"", name, "\" is not a tenant name (1..", kMaxTenantNameBytes, " of [A-Za-z0-9_-])"));
}

absl::StatusOr<std::shared_ptr<const Tenant>> ParseTenant(const std::string& name, const nlohmann::json& j,
                                                          std::set<KeyHash>& seen) {
  if (absl::Status s = CheckTenantName(name); !s.ok()) return s;
  const std::string where = absl::StrCat("tenants.", name);
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(where, ": must be an object"));
  auto tenant = std::make_shared<Tenant>();
  tenant->name = name;
  const std::pair<const char*, int64_t*> quotas[] = {
      {"max_sessions", &tenant->quotas.max_sessions},
      {"max_state_bytes", &tenant->quotas.max_state_bytes},
      {"max_concurrent_generates", &tenant->quotas.max_concurrent_generates},
      {"tokens_per_minute", &tenant->quotas.tokens_per_minute}};
  for (const auto& [key, value] : j.items()) {
    const std::string field = absl::StrCat(where, ".", key);
    if (key == "keys_sha256") {
      if (!value.is_array()) return absl::InvalidArgumentError(absl::StrCat(field, ": must be a list of hex SHA-256s"));
      for (size_t i = 0; i < value.size(); ++i) {
        KeyHash hash{};
        if (!value[i].is_string() || !ParseHex(value[i].get<std::string>(), hash)) {
          return absl::InvalidArgumentError(absl::StrCat(
              field, "[", i, "]: must be a key's SHA-256 as 64 hex digits (sha256sum of the key; never the key)"));
        }
        if (!seen.insert(hash).second) {
          return absl::InvalidArgumentError(absl::StrCat(field, "[", i, "]: this key is listed twice"));
        }
        tenant->keys.push_back(hash);
      }
      continue;
    }
    int64_t* target = nullptr;
    for (const auto& [quota, slot] : quotas) {
      if (key == quota) target = slot;
    }
    if (target == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": unknown field (known: keys_sha256, max_sessions, max_state_bytes, max_concurrent_generates, "
                 "tokens_per_minute)"));
    }
    if (!value.is_number_integer() || value.get<int64_t>() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": must be an integer >= 0 (0: unlimited)"));
    }
    *target = value.get<int64_t>();
  }
  return std::shared_ptr<const Tenant>(std::move(tenant));
}

}  // namespace

absl::StatusOr<ApiKeys> ParseApiKeys(std::string_view text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("not valid JSON");
  if (!j.is_object() || !j.contains("tenants") || !j["tenants"].is_object()) {
    return absl::InvalidArgumentError("must be an object with \"tenants\": {name: {keys_sha256: [...], quotas}}");
  }
  for (const auto& [key, value] : j.items()) {
    if (key != "tenants") return absl::InvalidArgumentError(absl::StrCat(key, ": unknown field (known: tenants)"));
  }
  ApiKeys keys;
  std::set<KeyHash> seen;
  for (const auto& [name, value] : j["tenants"].items()) {
    auto tenant = ParseTenant(name, value, seen);
    if (!tenant.ok()) return tenant.status();
    keys.tenants.push_back(*std::move(tenant));
  }
  return keys;
}

absl::StatusOr<ApiKeys> LoadApiKeys(const std::string& path) {
  auto text = ReadWholeFile(path);
  if (!text.ok()) return text.status();
  auto keys = ParseApiKeys(*text);
  if (!keys.ok()) return WithContext(keys.status(), path);
  return keys;
}

absl::StatusOr<std::unique_ptr<Authenticator>> Authenticator::Load(std::string path) {
  auto keys = LoadApiKeys(path);
  if (!keys.ok()) return keys.status();
  return std::unique_ptr<Authenticator>(
      new Authenticator(std::move(path), std::make_shared<const ApiKeys>(*std::move(keys))));
}

absl::Status Authenticator::Reload() {
  auto keys = LoadApiKeys(path_);
  if (!keys.ok()) return keys.status();
  auto fresh = std::make_shared<const ApiKeys>(*std::move(keys));
  std::lock_guard lock(mu_);
  keys_ = std::move(fresh);
  return absl::OkStatus();
}

std::shared_ptr<const ApiKeys> Authenticator::Current() const {
  std::lock_guard lock(mu_);
  return keys_;
}

absl::StatusOr<std::shared_ptr<const Tenant>> Authenticator::Authenticate(std::string_view authorization) const {
  if (authorization.empty()) {
    return absl::UnauthenticatedError("no API key: send metadata \"authorization: Bearer KEY\"");
  }
  absl::string_view key(authorization.data(), authorization.size());
  if (!absl::ConsumePrefix(&key, "Bearer ") && !absl::ConsumePrefix(&key, "bearer ")) {
    return absl::UnauthenticatedError("authorization: expected \"Bearer KEY\"");
  }
  key = absl::StripAsciiWhitespace(key);
  const KeyHash hash = Sha256(std::string_view(key.data(), key.size()));
  // Every hash is compared, each in constant time, so the time taken says nothing about which
  // (or whether one) matched.
  std::shared_ptr<const Tenant> found;
  const std::shared_ptr<const ApiKeys> keys = Current();
  for (const auto& tenant : keys->tenants) {
    for (const KeyHash& k : tenant->keys) {
      if (CRYPTO_memcmp(k.data(), hash.data(), hash.size()) == 0) found = tenant;
    }
  }
  if (!found) return absl::UnauthenticatedError("unknown API key");
  return found;
}

std::vector<std::string> Authenticator::TenantNames() const {
  std::vector<std::string> names;
  for (const auto& tenant : Current()->tenants) names.push_back(tenant->name);
  return names;
}

}  // namespace steady
