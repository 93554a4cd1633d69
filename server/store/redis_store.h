// A session store in Redis (--session-store redis://HOST:PORT[/DB]) that several steady-server
// replicas share (docs/deployment.md). Keys live under "steady:<model fingerprint>:":
//   ptr:<id>    the name of the session's current blob      (switched atomically by a Lua script)
//   blob:<id>:<n>  a snapshot; a new one is written under a new name, then the pointer is switched
//   lease:<id>  "<owner> <epoch>" with a TTL: which replica serves the session now
//   epoch:<id>  the fencing epoch, incremented at every takeover; every write and delete checks that
//               it still equals the writer's, so a paused former owner can never overwrite a newer
//               state
// Leases are renewed by a thread of the store every lease/3 while held; a replica releases a
// session's lease when it offloads or deletes it, or shuts down.
#ifndef STEADY_SERVER_STORE_REDIS_STORE_H_
#define STEADY_SERVER_STORE_REDIS_STORE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/store/session_store.h"

namespace steady {

struct RedisStoreOptions {
  std::string url;             // redis://HOST:PORT[/DB]
  std::string key_prefix;      // "steady:<fingerprint hex>:"
  std::string owner;           // this replica's name in leases (unique per process)
  int64_t lease_ms = 10000;    // a dead replica's sessions move after this long
  int64_t timeout_ms = 5000;   // connect and command timeout
};

class RedisConnection;

class RedisStore : public SessionStore {
 public:
  // Connects (UNAVAILABLE naming the URL when Redis does not answer) and starts the lease thread.
  static absl::StatusOr<std::unique_ptr<RedisStore>> Open(const RedisStoreOptions& options);
  ~RedisStore() override;  // releases every lease it holds

  std::vector<absl::Status> Put(const std::vector<BlobWrite>& writes) override;
  absl::StatusOr<std::string> Get(const std::string& key) const override;
  absl::StatusOr<std::string> Head(const std::string& key, size_t bytes) const override;
  absl::Status Delete(const std::string& key) override;
  absl::StatusOr<std::vector<std::string>> List() const override;
  std::string Describe() const override { return "Redis store " + options_.url; }

  absl::Status Acquire(const std::string& key) override;
  void Release(const std::string& key) override;
  bool Holds(const std::string& key) const override;
  bool Shared() const override { return true; }

  // The epoch this replica holds `key` at (0: none); for tests.
  uint64_t EpochOf(const std::string& key) const;

 private:
  explicit RedisStore(RedisStoreOptions options);
  void RenewLoop();
  // For a key whose lease lapsed with nobody taking it since: takes it again (OK). ABORTED when
  // another server acquired it meanwhile (its writes may be newer than this server's state);
  // UNAVAILABLE, the lease still lost, when the store does not answer.
  absl::Status Retake(const std::string& key);

  const RedisStoreOptions options_;
  std::unique_ptr<RedisConnection> conn_;   // the engine's calls
  std::unique_ptr<RedisConnection> renew_;  // the lease thread's

  mutable std::mutex mu_;
  std::map<std::string, uint64_t> held_;  // guarded by mu_: key -> epoch of the lease held
  // guarded by mu_: leases a renewal found gone (expired while Redis or this process stalled) ->
  // the epoch held then. Taken back by a write only if nobody took the key in between.
  std::map<std::string, uint64_t> lost_;
  uint64_t next_blob_ = 0;                // guarded by mu_
  std::condition_variable cv_;
  bool stop_ = false;                     // guarded by mu_
  std::thread renewer_;
};

// Parses redis://HOST:PORT[/DB]; INVALID_ARGUMENT naming the URL otherwise.
struct RedisAddress {
  std::string host;
  int port = 6379;
  int db = 0;
};
absl::StatusOr<RedisAddress> ParseRedisUrl(const std::string& url);

}  // namespace steady

#endif  // STEADY_SERVER_STORE_REDIS_STORE_H_
