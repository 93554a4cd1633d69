// Tenants (docs/security.md): every RPC with and without keys, across tenants, with quotas and signed
// snapshots, through restarts on a directory and on Redis (tests/server/rpc/service_fixture.h).
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "server/auth/api_keys.h"
#include "server/store/directory_store.h"
#include "server/store/redis_store.h"
#include "server/store/snapshot_signing.h"
#include "tests/server/rpc/service_fixture.h"
#include "tests/server/store/redis_harness.h"
#include "tests/testutil.h"

namespace steady {
namespace {

class TenantServiceTest : public ServiceTest {
 protected:
  void SetUp() override {
    keys_path_ = testing::MakeTempDir("tenants") + "/keys.json";
    WriteKeys(0);
    auto auth = Authenticator::Load(keys_path_);
    ASSERT_TRUE(auth.ok()) << auth.status();
    security_.auth = *std::move(auth);
    security_.snapshot_key = std::string(32, 'k');
    StartServer({}, security_);
  }

  // alice may hold 3 sessions, bob is unlimited, carol's sessions may hold `carol_max_state_bytes`
  // (0: unlimited). Rewriting the file and calling security_.auth->Reload() changes the quotas of a
  // running server, as SIGHUP does.
  void WriteKeys(int64_t carol_max_state_bytes) {
    std::ofstream(keys_path_, std::ios::trunc) << R"({"tenants": {
        "alice": {"keys_sha256": [")" + HexDigest(Sha256("alice-key")) + R"("], "max_sessions": 3},
        "bob": {"keys_sha256": [")" + HexDigest(Sha256("bob-key")) + R"("]},
        "carol": {"keys_sha256": [")" + HexDigest(Sha256("carol-key")) + R"("], "max_state_bytes": )" +
                                         std::to_string(carol_max_state_bytes) + "}}}";
  }

  // The /metrics page as the server's --metrics-port would serve it.
  std::string MetricsPage() const { return metrics_->Render(engine_->stats(), engine_->options().store.get()); }

  // Alice's and bob's same-named sessions through restarts on the store `open_store` opens each time.
  void ExpectTenantsKeepTheirSessionsAcrossRestarts(const std::function<std::shared_ptr<SessionStore>()>& open_store);

  std::string keys_path_;
  ServiceOptions security_;
  std::unique_ptr<testing::RedisServer> redis_;  // stops after TearDown has stopped the server using it
};

TEST_F(TenantServiceTest, EveryRpcNeedsAKey) {
  for (const std::string key : {"", "wrong-key"}) {
    v1::ModelInfo info;
    EXPECT_EQ(stub_->GetModelInfo(As(key).get(), {}, &info).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(Create(key, "x").error_code(), grpc::StatusCode::UNAUTHENTICATED);
    v1::Session s;
    EXPECT_EQ(Get(key, "x", &s).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    grpc::Status list;
    List(key, &list);
    EXPECT_EQ(list.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(GenerateAs(key, Request("", "Hello", 2)).status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(Fork(key, "x", "y").error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(Delete(key, "x").error_code(), grpc::StatusCode::UNAUTHENTICATED);
    std::string blob;
    EXPECT_EQ(Export(key, "x", &blob).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(Import(key, "x", "bytes").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  v1::ModelInfo info;
  EXPECT_TRUE(stub_->GetModelInfo(As("alice-key").get(), {}, &info).ok());
  // Each refusal is counted once by reason (9 RPCs each way); the good key is not.
  const std::string page = MetricsPage();
  EXPECT_NE(page.find("steady_auth_failures_total{reason=\"missing\"} 9\n"), std::string::npos) << page;
  EXPECT_NE(page.find("steady_auth_failures_total{reason=\"unknown\"} 9\n"), std::string::npos) << page;
}

TEST_F(TenantServiceTest, AnotherTenantsSessionIsNotFound) {
  ASSERT_TRUE(Create("alice-key", "s").ok());
  const Streamed turn = GenerateAs("alice-key", Request("s", "Hello there", 6));
  ASSERT_TRUE(turn.status.ok()) << turn.status.error_message();
  // Bob gets what a session that does not exist gets, on every RPC, and alice's session is untouched.
  v1::Session got;
  for (const std::string id : {"s", "no-such"}) {
    grpc::Status get = Get("bob-key", id, &got);
    EXPECT_EQ(get.error_code(), grpc::StatusCode::NOT_FOUND) << id;
    EXPECT_EQ(get.error_message(), "session_id: no session " + id);
    EXPECT_EQ(GenerateAs("bob-key", Request(id, "more", 2)).status.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_EQ(Fork("bob-key", id, "mine").error_code(), grpc::StatusCode::NOT_FOUND);
    std::string blob;
    EXPECT_EQ(Export("bob-key", id, &blob).error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_EQ(Delete("bob-key", id).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  // Naming the engine's id of another tenant's session is not a way in: '~' is not an id character.
  EXPECT_EQ(Get("bob-key", "alice~s", &got).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(GenerateAs("bob-key", Request("alice~s", "more", 2)).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ASSERT_TRUE(Get("alice-key", "s", &got).ok());
  const int64_t alice_position = got.position();
  EXPECT_GT(alice_position, 0);
  // The same id under two tenants: two sessions, each listing only its own.
  ASSERT_TRUE(Create("bob-key", "s").ok());
  EXPECT_EQ(List("alice-key"), std::vector<std::string>{"s"});
  EXPECT_EQ(List("bob-key"), std::vector<std::string>{"s"});
  ASSERT_TRUE(Get("bob-key", "s", &got).ok());
  EXPECT_EQ(got.position(), 0);
  ASSERT_TRUE(Delete("bob-key", "s").ok());
  ASSERT_TRUE(Get("alice-key", "s", &got).ok());
  EXPECT_EQ(got.position(), alice_position);
  // Quota: alice may hold 3 sessions.
  ASSERT_TRUE(Create("alice-key", "t").ok());
  ASSERT_TRUE(Fork("alice-key", "s", "u").ok());
  grpc::Status over = Create("alice-key", "v");
  EXPECT_EQ(over.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(over.error_message().find("max_sessions"), std::string::npos) << over.error_message();
  EXPECT_EQ(Fork("alice-key", "s", "w").error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(Create("bob-key", "v").ok());  // bob's own count
}

TEST_F(TenantServiceTest, SnapshotsImportOnlyForTheTenantThatSignedThem) {
  ASSERT_TRUE(Create("alice-key", "s").ok());
  ASSERT_TRUE(GenerateAs("alice-key", Request("s", "Hello there", 6)).status.ok());
  std::string blob;
  ASSERT_TRUE(Export("alice-key", "s", &blob).ok());
  ASSERT_TRUE(IsSignedSnapshot(blob));
  // Another tenant's, a modified one, a truncated one, an unsigned one: refused before parsing.
  EXPECT_EQ(Import("bob-key", "stolen", blob).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  std::string modified = blob;
  modified[modified.size() / 2] ^= 0x40;
  EXPECT_EQ(Import("alice-key", "m", modified).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Import("alice-key", "t", blob.substr(0, blob.size() - 1)).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Import("alice-key", "h", blob.substr(0, kSignedSnapshotHeaderBytes - 1)).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);  // cut inside the MAC
  grpc::Status unsigned_import = Import("alice-key", "u", blob.substr(kSignedSnapshotHeaderBytes));
  EXPECT_EQ(unsigned_import.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(unsigned_import.error_message().find("unsigned"), std::string::npos) << unsigned_import.error_message();
  EXPECT_TRUE(List("bob-key").empty());
  // The longest id behind a tenant's prefix goes through a snapshot too.
  const std::string longest(kMaxSessionIdBytes, 'z');
  ASSERT_TRUE(Create("alice-key", longest).ok());
  std::string long_blob;
  ASSERT_TRUE(Export("alice-key", longest, &long_blob).ok());
  ASSERT_TRUE(Delete("alice-key", longest).ok());
  EXPECT_TRUE(Import("alice-key", longest, long_blob).ok());
  // Its own tenant imports it, and the copy continues like the original.
  ASSERT_TRUE(Import("alice-key", "copy", blob).ok());
  const Streamed a = GenerateAs("alice-key", Request("s", " and then", 8));
  const Streamed b = GenerateAs("alice-key", Request("copy", " and then", 8));
  ASSERT_TRUE(a.status.ok() && b.status.ok());
  EXPECT_EQ(a.text, b.text);
}

// max_state_bytes (docs/security.md, Quotas): a session that would take its tenant's state bytes over
// the quota is not made (Create, Fork, Import), and a tenant already over it (its quota lowered by a
// reload) starts no Generate; each answers RESOURCE_EXHAUSTED naming the quota and the tenant.
// Nothing is created, nothing is lost, other tenants are not counted, and /metrics counts each refusal.
TEST_F(TenantServiceTest, MaxStateBytesRefusesWhatWouldGoOverItAndChangesNothing) {
  // A Taylor session's state has one size whatever its position.
  const int64_t per_session = int64_t(model_->StateFloats() * sizeof(float));
  const int64_t quota = 2 * per_session + per_session / 2;  // room for two sessions, not three
  WriteKeys(quota);
  ASSERT_TRUE(security_.auth->Reload().ok());
  ASSERT_TRUE(Create("carol-key", "a").ok());
  ASSERT_TRUE(Create("carol-key", "b").ok());
  ASSERT_TRUE(GenerateAs("carol-key", Request("a", "Hello there", 4)).status.ok());
  v1::Session a;
  ASSERT_TRUE(Get("carol-key", "a", &a).ok());
  ASSERT_EQ(a.state_bytes(), per_session);
  ASSERT_GT(a.position(), 0);
  std::string blob;
  ASSERT_TRUE(Export("carol-key", "a", &blob).ok());

  auto expect_refused = [](const grpc::Status& s, int64_t limit, int64_t would_hold, const std::string& rpc) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << rpc << ": " << s.error_message();
    const std::string want = "quota max_state_bytes of tenant carol (" + std::to_string(limit) +
                             ") reached: its sessions would hold " + std::to_string(would_hold) + " bytes";
    EXPECT_EQ(s.error_message(), want) << rpc;
  };
  expect_refused(Create("carol-key", "c"), quota, 3 * per_session, "CreateSession");
  expect_refused(Fork("carol-key", "a", "c"), quota, 3 * per_session, "ForkSession");
  expect_refused(Import("carol-key", "c", blob), quota, 3 * per_session, "ImportSession");
  EXPECT_EQ(List("carol-key"), (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(std::filesystem::exists(session_dir_ + "/carol~c.snap"));
  EXPECT_TRUE(Create("bob-key", "c").ok());  // bob's bytes are his own

  WriteKeys(per_session);  // carol now holds twice her quota
  ASSERT_TRUE(security_.auth->Reload().ok());
  const Streamed over = GenerateAs("carol-key", Request("a", " and more", 4));
  expect_refused(over.status, per_session, 2 * per_session, "Generate");
  EXPECT_TRUE(over.text.empty());
  v1::Session after;
  ASSERT_TRUE(Get("carol-key", "a", &after).ok());
  EXPECT_EQ(after.position(), a.position());
  EXPECT_EQ(List("carol-key"), (std::vector<std::string>{"a", "b"}));
  // Back within it, the same session goes on from where it was.
  ASSERT_TRUE(Delete("carol-key", "b").ok());
  const Streamed under = GenerateAs("carol-key", Request("a", " and more", 4));
  ASSERT_TRUE(under.status.ok()) << under.status.error_message();
  ASSERT_TRUE(Get("carol-key", "a", &after).ok());
  EXPECT_GT(after.position(), a.position());

  const std::string page = MetricsPage();
  EXPECT_NE(page.find("steady_quota_refusals_total{tenant=\"carol\",quota=\"max_state_bytes\"} 4\n"), std::string::npos)
      << page;
  EXPECT_EQ(page.find("steady_quota_refusals_total{tenant=\"bob\""), std::string::npos) << page;
}

// --allow-unsigned-imports (docs/security.md, Signed snapshots). With a snapshot key an unsigned
// snapshot is PERMISSION_DENIED ("unsigned") by default and imports with the flag, continuing like the
// original; signed blobs are still checked either way. Without a snapshot key a signed blob is
// FAILED_PRECONDITION and an unsigned one imports.
TEST_F(TenantServiceTest, UnsignedSnapshotsImportOnlyWithTheFlag) {
  ASSERT_TRUE(Create("alice-key", "s").ok());
  ASSERT_TRUE(GenerateAs("alice-key", Request("s", "Hello there", 6)).status.ok());
  std::string blob;
  ASSERT_TRUE(Export("alice-key", "s", &blob).ok());
  ASSERT_TRUE(IsSignedSnapshot(blob));
  const std::string unsigned_blob = blob.substr(kSignedSnapshotHeaderBytes);
  ASSERT_FALSE(IsSignedSnapshot(unsigned_blob));
  const grpc::Status refused = Import("alice-key", "u", unsigned_blob);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED) << refused.error_message();
  EXPECT_NE(refused.error_message().find("snapshot: unsigned"), std::string::npos) << refused.error_message();
  EXPECT_EQ(List("alice-key"), std::vector<std::string>{"s"});

  StopServer();
  ServiceOptions allowing = security_;
  allowing.allow_unsigned_imports = true;
  StartServer({}, allowing);
  grpc::Status imported = Import("alice-key", "u", unsigned_blob);
  ASSERT_TRUE(imported.ok()) << imported.error_message();
  imported = Import("alice-key", "v", blob);
  ASSERT_TRUE(imported.ok()) << imported.error_message();
  std::string modified = blob;
  modified[modified.size() / 2] ^= 0x40;
  const grpc::Status forged = Import("alice-key", "m", modified);
  EXPECT_EQ(forged.error_code(), grpc::StatusCode::PERMISSION_DENIED) << forged.error_message();
  EXPECT_NE(forged.error_message().find("does not verify"), std::string::npos) << forged.error_message();
  EXPECT_EQ(Import("bob-key", "stolen", blob).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(List("alice-key"), (std::vector<std::string>{"s", "u", "v"}));
  EXPECT_TRUE(List("bob-key").empty());
  const Streamed original = GenerateAs("alice-key", Request("s", " and then", 8));
  const Streamed from_unsigned = GenerateAs("alice-key", Request("u", " and then", 8));
  const Streamed from_signed = GenerateAs("alice-key", Request("v", " and then", 8));
  ASSERT_TRUE(original.status.ok() && from_unsigned.status.ok() && from_signed.status.ok());
  EXPECT_EQ(from_unsigned.text, original.text);
  EXPECT_EQ(from_signed.text, original.text);

  ASSERT_TRUE(Delete("alice-key", "v").ok());  // alice may hold 3 sessions
  StopServer();
  ServiceOptions keyless = security_;
  keyless.snapshot_key.clear();
  StartServer({}, keyless);
  const grpc::Status no_key = Import("alice-key", "w", blob);
  EXPECT_EQ(no_key.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << no_key.error_message();
  imported = Import("alice-key", "w", unsigned_blob);
  EXPECT_TRUE(imported.ok()) << imported.error_message();
}

// The session store's keys carry the tenant (docs/security.md): alice's and bob's session "s", made
// from different prompts, come back after a restart on the same store as two sessions, each to its
// own tenant (its position, and the continuation it would have given before the restart); a delete
// by one tenant leaves the other's. `open_store` opens the same store at each start.
void TenantServiceTest::ExpectTenantsKeepTheirSessionsAcrossRestarts(
    const std::function<std::shared_ptr<SessionStore>()>& open_store) {
  auto restart = [&] {
    StopServer();
    EngineOptions options;
    options.store = open_store();
    ASSERT_NE(options.store, nullptr);
    StartServer(options, security_);
  };
  ASSERT_NO_FATAL_FAILURE(restart());
  const std::map<std::string, std::string> prompts = {{"alice-key", "This License applies to any program or other work"},
                                                      {"bob-key", "Hello"}};
  std::map<std::string, int64_t> positions;
  std::map<std::string, std::string> continuations;  // of a fork, made before the restart
  for (const auto& [key, prompt] : prompts) {
    ASSERT_TRUE(Create(key, "s").ok()) << key;
    ASSERT_TRUE(GenerateAs(key, Request("s", prompt, 3)).status.ok()) << key;
    v1::Session got;
    ASSERT_TRUE(Get(key, "s", &got).ok()) << key;
    positions[key] = got.position();
    ASSERT_TRUE(Fork(key, "s", "probe").ok()) << key;
    const Streamed probe = GenerateAs(key, Request("probe", " and then", 8));
    ASSERT_TRUE(probe.status.ok()) << probe.status.error_message();
    continuations[key] = probe.text;
    ASSERT_TRUE(Delete(key, "probe").ok()) << key;
  }
  ASSERT_NE(positions["alice-key"], positions["bob-key"]);
  EXPECT_NE(continuations["alice-key"], continuations["bob-key"]);  // else a swap would go unseen

  ASSERT_NO_FATAL_FAILURE(restart());
  auto stored = engine_->options().store->List();
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(*stored, (std::vector<std::string>{"alice~s", "bob~s"}));
  for (const auto& [key, prompt] : prompts) {
    EXPECT_EQ(List(key), std::vector<std::string>{"s"}) << key;
    v1::Session got;
    ASSERT_TRUE(Get(key, "s", &got).ok()) << key;
    EXPECT_EQ(got.position(), positions[key]) << key;
    const Streamed next = GenerateAs(key, Request("s", " and then", 8));
    ASSERT_TRUE(next.status.ok()) << next.status.error_message();
    EXPECT_EQ(next.text, continuations[key]) << key;
  }

  ASSERT_TRUE(Delete("bob-key", "s").ok());
  ASSERT_NO_FATAL_FAILURE(restart());
  v1::Session got;
  EXPECT_EQ(Get("bob-key", "s", &got).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(List("bob-key").empty());
  ASSERT_TRUE(Get("alice-key", "s", &got).ok());
  EXPECT_GT(got.position(), positions["alice-key"]);  // with the turn made after the first restart
}

TEST_F(TenantServiceTest, TenantsKeepTheirSessionsAcrossRestartsOnADirectory) {
  const std::string dir = testing::MakeTempDir("tenant_sessions");
  ExpectTenantsKeepTheirSessionsAcrossRestarts([&]() -> std::shared_ptr<SessionStore> {
    auto store = DirectoryStore::Open(dir);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  });
  EXPECT_TRUE(std::filesystem::exists(dir + "/alice~s.snap"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/bob~s.snap"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/s.snap"));
}

TEST_F(TenantServiceTest, TenantsKeepTheirSessionsAcrossRestartsInRedis) {
  redis_ = testing::RedisServer::Start(testing::MakeTempDir("redis"));
  if (!redis_) GTEST_SKIP() << "SKIPPED: redis-server is not installed (scripts/install-deps.sh installs it)";
  int replica = 0;  // each start is another process to Redis: a lease owner of its own
  ExpectTenantsKeepTheirSessionsAcrossRestarts([&]() -> std::shared_ptr<SessionStore> {
    RedisStoreOptions o;
    o.url = redis_->url();
    o.key_prefix = "steady:service-test:";
    o.owner = "replica-" + std::to_string(++replica);
    auto store = RedisStore::Open(o);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  });
}

}  // namespace
}  // namespace steady
