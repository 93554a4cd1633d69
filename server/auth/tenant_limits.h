// Per-tenant rate and concurrency limits the RPC layer enforces (docs/security.md, "Quotas"):
// concurrent Generate calls and tokens per minute. Session count and state bytes are the engine's
// (SessionQuota, server/engine/engine.h): only the engine thread knows them exactly.
#ifndef STEADY_SERVER_AUTH_TENANT_LIMITS_H_
#define STEADY_SERVER_AUTH_TENANT_LIMITS_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "server/auth/api_keys.h"

namespace steady {

// A token bucket holding up to `per_minute` tokens, refilled at per_minute / 60 a second. A call may
// start while the level is positive and is charged what it used when it ends, so the level can go
// below zero; it then waits for the refill.
class TokenBucket {
 public:
  using Clock = std::chrono::steady_clock;
  // 0 when a call may start now, else the seconds until the level is positive (rounded up, >= 1).
  int64_t RetryAfterSeconds(int64_t per_minute, Clock::time_point now);
  void Charge(int64_t per_minute, int64_t tokens, Clock::time_point now);
  double level() const { return level_; }

 private:
  void Refill(int64_t per_minute, Clock::time_point now);

  double level_ = 0;  // full at the first use
  bool started_ = false;
  Clock::time_point last_{};
};

// Thread-safe.
class TenantLimits {
 public:
  // A Generate of `tenant` starts: RESOURCE_EXHAUSTED naming the quota (and *retry_after_seconds set
  // for tokens_per_minute) when over one; otherwise the call is counted until EndGenerate.
  absl::Status BeginGenerate(const Tenant& tenant, int64_t* retry_after_seconds,
                             TokenBucket::Clock::time_point now = TokenBucket::Clock::now());
  // It ended, having used `tokens` (prompt + completion).
  void EndGenerate(const Tenant& tenant, int64_t tokens,
                   TokenBucket::Clock::time_point now = TokenBucket::Clock::now());
  int64_t running(const std::string& tenant) const;

 private:
  struct Usage {
    int64_t running = 0;
    TokenBucket bucket;
  };
  mutable std::mutex mu_;
  std::map<std::string, Usage> usage_;  // guarded by mu_; by tenant name, so it outlives a reload
};

}  // namespace steady

#endif  // STEADY_SERVER_AUTH_TENANT_LIMITS_H_
