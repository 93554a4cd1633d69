// Where sessions live between processes (docs/durability.md): a flat namespace of keys (session
// ids) to snapshot blobs (server/store/snapshot.h). The engine speaks only this interface; the directory
// store (--session-dir, server/store/directory_store.h) is the embedded default, and a networked store
// implements the same five calls.
#ifndef STEADY_SERVER_STORE_SESSION_STORE_H_
#define STEADY_SERVER_STORE_SESSION_STORE_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/histogram.h"

namespace steady {

struct BlobWrite {
  std::string key;
  std::string blob;
};

// What a store did, for /metrics. Thread-safe.
struct StoreStats {
  std::atomic<int64_t> bytes_written{0};
  std::atomic<int64_t> blobs_written{0};
  std::atomic<int64_t> write_errors{0};
  std::atomic<int64_t> dropped_at_open{0};  // writes a crash interrupted, removed when the store opened
  Histogram sync_seconds{{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}};
};

class SessionStore {
 public:
  virtual ~SessionStore() = default;

  // Writes every blob, each atomically (a reader of a key finds its old blob or its new one, never a
  // mix) and durably when its status is OK; one group commit for all. Statuses are in `writes`'
  // order; a failed key keeps its old blob. RESOURCE_EXHAUSTED names a full store.
  virtual std::vector<absl::Status> Put(const std::vector<BlobWrite>& writes) = 0;
  // NOT_FOUND when the key has no blob.
  virtual absl::StatusOr<std::string> Get(const std::string& key) const = 0;
  // Durable on OK; OK when the key has no blob.
  virtual absl::Status Delete(const std::string& key) = 0;
  // Every key, sorted.
  virtual absl::StatusOr<std::vector<std::string>> List() const = 0;
  // For messages: "directory /var/lib/steady".
  virtual std::string Describe() const = 0;
  // The first `bytes` bytes of a key's blob (a snapshot's header: listing without reading
  // megabytes). NOT_FOUND when the key has no blob.
  virtual absl::StatusOr<std::string> Head(const std::string& key, size_t bytes) const;

  // --- Ownership, for a store several servers share (Shared()). A store that only one process
  // uses grants everything: these defaults.
  //
  // Takes, or keeps, this server's lease on `key`; UNAVAILABLE naming the holder while another server
  // holds it, with the lease's remaining time as RetryAfterMs (base/status.h): the holder may have died,
  // and the lease then lapses by itself. Put and Delete of a key are fenced: refused (ABORTED) once
  // another server has taken the key over, even if this one still believes it holds it. Every call of
  // a store may fail with UNAVAILABLE naming the store while it cannot be reached.
  virtual absl::Status Acquire(const std::string& key) { return absl::OkStatus(); }
  // Gives the lease up: another server may take the key over at once.
  virtual void Release(const std::string& key) {}
  // False once this server knows another has taken `key` over (a renewal found its lease gone).
  virtual bool Holds(const std::string& key) const { return true; }
  // Whether other servers write to this store too: then a session this server does not know may
  // be in it, and one it knows may have moved on.
  virtual bool Shared() const { return false; }

  StoreStats& stats() { return stats_; }
  const StoreStats& stats() const { return stats_; }

 protected:
  // Adds a Put's outcome to stats().
  void CountWrites(const std::vector<BlobWrite>& writes, const std::vector<absl::Status>& statuses);

  StoreStats stats_;
};

}  // namespace steady

#endif  // STEADY_SERVER_STORE_SESSION_STORE_H_
