// The security pieces alone (docs/security.md): the API key file, constant-time key lookup and
// reload, the tenants' token bucket and concurrency limits, and signed snapshots.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>

#include "server/auth/api_keys.h"
#include "server/auth/tenant_limits.h"
#include "server/store/snapshot_signing.h"
#include "tests/testutil.h"

namespace steady {
namespace {

std::string Hash(const std::string& key) { return HexDigest(Sha256(key)); }

std::string KeysJson(const std::string& alice_key, const std::string& bob_key) {
  return R"({"tenants": {"alice": {"keys_sha256": [")" + Hash(alice_key) +
         R"("], "max_sessions": 3, "max_state_bytes": 4096,
                                       "tokens_per_minute": 600},
                         "bob": {"keys_sha256": [")" + Hash(bob_key) + R"("]}}})";
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

TEST(ApiKeysTest, Sha256MatchesTheKnownDigest) {
  // FIPS 180-2's "abc" example.
  EXPECT_EQ(HexDigest(Sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(ApiKeysTest, ParsesTenantsKeysAndQuotas) {
  auto keys = ParseApiKeys(KeysJson("ka", "kb"));
  ASSERT_TRUE(keys.ok()) << keys.status();
  ASSERT_EQ(keys->tenants.size(), 2u);
  const Tenant& alice = *keys->tenants[0];
  EXPECT_EQ(alice.name, "alice");
  EXPECT_EQ(alice.quotas.max_sessions, 3);
  EXPECT_EQ(alice.quotas.max_state_bytes, 4096);
  EXPECT_EQ(alice.quotas.tokens_per_minute, 600);
  EXPECT_EQ(alice.quotas.max_concurrent_generates, 0);
  ASSERT_EQ(alice.keys.size(), 1u);
  EXPECT_EQ(HexDigest(alice.keys[0]), Hash("ka"));
}

TEST(ApiKeysTest, BadFilesAreRefusedNamingTheProblem) {
  const std::string h = Hash("k");
  const std::pair<std::string, std::string> cases[] = {
      {"{", "not valid JSON"},
      {R"({"tenant": {}})", "tenants"},
      {R"({"tenants": {"a b": {"keys_sha256": []}}})", "not a tenant name"},
      {R"({"tenants": {"a": {"keys_sha256": ["plaintext-key"]}}})", "tenants.a.keys_sha256[0]"},
      {R"({"tenants": {"a": {"keys_sha256": [")" + h + R"("]}, "b": {"keys_sha256": [")" + h + R"("]}}})",
       "listed twice"},
      {R"({"tenants": {"a": {"max_sessions": -1}}})", "tenants.a.max_sessions"},
      {R"({"tenants": {"a": {"max_state_bytes": -1}}})", "tenants.a.max_state_bytes"},
      {R"({"tenants": {"a": {"max_session": 1}}})", "unknown field"},
  };
  for (const auto& [text, expected] : cases) {
    auto keys = ParseApiKeys(text);
    ASSERT_FALSE(keys.ok()) << text;
    EXPECT_EQ(keys.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_NE(keys.status().message().find(expected), std::string::npos) << keys.status() << " for " << text;
  }
}

TEST(ApiKeysTest, AuthenticatesBearerKeysAndReloads) {
  const std::string path = testing::MakeTempDir("keys") + "/keys.json";
  WriteFile(path, KeysJson("ka", "kb"));
  auto auth = Authenticator::Load(path);
  ASSERT_TRUE(auth.ok()) << auth.status();
  auto alice = (*auth)->Authenticate("Bearer ka");
  ASSERT_TRUE(alice.ok()) << alice.status();
  EXPECT_EQ((*alice)->name, "alice");
  EXPECT_EQ((*(*auth)->Authenticate("Bearer kb"))->name, "bob");
  for (const char* bad : {"", "ka", "Bearer ", "Bearer kc", "Basic ka", "Bearer ka2"}) {
    auto r = (*auth)->Authenticate(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnauthenticated) << bad;
  }
  // Revoke alice's key, add a new one: the old fails at once, the new works.
  WriteFile(path, KeysJson("ka-new", "kb"));
  ASSERT_TRUE((*auth)->Reload().ok());
  EXPECT_EQ((*auth)->Authenticate("Bearer ka").status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ((*(*auth)->Authenticate("Bearer ka-new"))->name, "alice");
  // A broken file keeps the keys in force.
  WriteFile(path, "{broken");
  EXPECT_FALSE((*auth)->Reload().ok());
  EXPECT_TRUE((*auth)->Authenticate("Bearer ka-new").ok());
}

TEST(TenantLimitsTest, TokenBucketRefusesUntilItRefills) {
  using Clock = TokenBucket::Clock;
  TenantLimits limits;
  Tenant t;
  t.name = "t";
  t.quotas.tokens_per_minute = 60;  // one a second
  const Clock::time_point t0 = Clock::now();
  int64_t retry = 0;
  ASSERT_TRUE(limits.BeginGenerate(t, &retry, t0).ok());
  limits.EndGenerate(t, 90, t0);  // 30 over
  absl::Status s = limits.BeginGenerate(t, &retry, t0);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("tokens_per_minute"), std::string::npos) << s;
  EXPECT_EQ(retry, 30);
  EXPECT_FALSE(limits.BeginGenerate(t, &retry, t0 + std::chrono::seconds(29)).ok());
  EXPECT_TRUE(limits.BeginGenerate(t, &retry, t0 + std::chrono::seconds(31)).ok());
}

TEST(TenantLimitsTest, ConcurrentGeneratesAreCountedPerTenant) {
  TenantLimits limits;
  Tenant a, b;
  a.name = "a";
  a.quotas.max_concurrent_generates = 2;
  b.name = "b";
  b.quotas.max_concurrent_generates = 1;
  int64_t retry = 0;
  EXPECT_TRUE(limits.BeginGenerate(a, &retry).ok());
  EXPECT_TRUE(limits.BeginGenerate(a, &retry).ok());
  absl::Status s = limits.BeginGenerate(a, &retry);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("max_concurrent_generates"), std::string::npos) << s;
  EXPECT_TRUE(limits.BeginGenerate(b, &retry).ok());  // b is counted apart
  limits.EndGenerate(a, 0);
  EXPECT_TRUE(limits.BeginGenerate(a, &retry).ok());
  EXPECT_EQ(limits.running("a"), 2);
}

TEST(SignedSnapshotTest, VerifiesOnlyTheSameKeyTenantAndBytes) {
  const std::string key(32, 'k'), other_key(32, 'o'), snapshot = "the snapshot's bytes";
  const std::string signed_blob = SignSnapshot(key, "alice", snapshot);
  ASSERT_TRUE(IsSignedSnapshot(signed_blob));
  auto inner = VerifySignedSnapshot(key, "alice", signed_blob);
  ASSERT_TRUE(inner.ok()) << inner.status();
  EXPECT_EQ(*inner, snapshot);
  EXPECT_EQ(VerifySignedSnapshot(key, "bob", signed_blob).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(VerifySignedSnapshot(other_key, "alice", signed_blob).status().code(), absl::StatusCode::kPermissionDenied);
  // A tenant name cannot be moved into the content: the length is in the MAC.
  EXPECT_EQ(VerifySignedSnapshot(key, "alic", SignSnapshot(key, "alice", "")).status().code(),
            absl::StatusCode::kPermissionDenied);
  // Every flipped byte and every truncation is refused.
  for (size_t i = 8; i < signed_blob.size(); ++i) {
    std::string flipped = signed_blob;
    flipped[i] ^= 1;
    EXPECT_FALSE(VerifySignedSnapshot(key, "alice", flipped).ok()) << i;
  }
  // Cut anywhere after the magic (inside the MAC too): PERMISSION_DENIED, as docs/security.md says.
  for (size_t n = 0; n < signed_blob.size(); ++n) {
    const absl::Status s = VerifySignedSnapshot(key, "alice", signed_blob.substr(0, n)).status();
    EXPECT_EQ(s.code(), n < kSignedSnapshotMagic.size() ? absl::StatusCode::kInvalidArgument
                                                        : absl::StatusCode::kPermissionDenied)
        << n << ": " << s;
  }
}

TEST(SignedSnapshotTest, ShortKeysAreRefused) {
  const std::string dir = testing::MakeTempDir("snapkey");
  WriteFile(dir + "/short", "too short");
  auto key = LoadSnapshotKey(dir + "/short");
  ASSERT_FALSE(key.ok());
  EXPECT_NE(key.status().message().find("at least 32"), std::string::npos) << key.status();
  WriteFile(dir + "/good", std::string(32, 'x'));
  EXPECT_TRUE(LoadSnapshotKey(dir + "/good").ok());
}

}  // namespace
}  // namespace steady
