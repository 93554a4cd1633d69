// Server metrics in the Prometheus text exposition format (version 0.0.4), served by a one-thread
// HTTP/1.1 endpoint (GET /metrics; anything else is 404).
#ifndef STEADY_SERVER_METRICS_METRICS_H_
#define STEADY_SERVER_METRICS_METRICS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "base/histogram.h"
#include "server/engine/engine.h"
#include "server/store/session_store.h"

namespace steady {

class Metrics {
 public:
  Metrics();
  // One finished RPC; `code` is the canonical status code name ("OK", "INVALID_ARGUMENT", ...).
  void CountRequest(const std::string& rpc, const std::string& code);
  // A call refused for its API key: reason "missing" or "unknown" (a bounded label: an unknown key
  // names no tenant).
  void CountAuthFailure(const std::string& reason);
  // A tenant's call refused over a quota (tenants: bounded by --api-keys; quota: one of four names).
  void CountQuotaRefusal(const std::string& tenant, const std::string& quota);
  void ObserveTimeToFirstToken(double seconds);
  void ObserveInterTokenLatency(double seconds);
  // Every metric, with the engine's gauges and counters from `engine` and the session store's
  // (none without a store).
  std::string Render(const Engine::Stats& engine, const SessionStore* store = nullptr) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, int64_t> requests_;  // guarded by mu_: (rpc, code) -> count
  std::map<std::string, int64_t> auth_failures_;                     // guarded by mu_: reason -> count
  std::map<std::pair<std::string, std::string>, int64_t> quota_refusals_;  // guarded by mu_: (tenant, quota)
  Histogram ttft_, inter_token_;
};

// GET /metrics over HTTP/1.1 on one thread; one request per connection.
class MetricsHttpServer {
 public:
  // Listens on host:port (port 0: an ephemeral port, see port()). `render` runs on the server thread.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const std::string& host, int port,
                                                                  std::function<std::string()> render);
  ~MetricsHttpServer();  // stops and joins the thread
  int port() const { return port_; }

 private:
  MetricsHttpServer(int listen_fd, int port, std::function<std::string()> render);
  void Serve();
  void HandleConnection(int fd);

  const int listen_fd_;
  const int port_;
  const std::function<std::string()> render_;
  int wake_pipe_[2] = {-1, -1};  // written by the destructor to stop Serve()
  std::thread thread_;
};

}  // namespace steady

#endif  // STEADY_SERVER_METRICS_METRICS_H_
