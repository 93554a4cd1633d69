#include "server/auth/tenant_limits.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace steady {

void TokenBucket::Refill(int64_t per_minute, Clock::time_point now) {
  if (!started_) {
    started_ = true;
    level_ = double(per_minute);
    last_ = now;
    return;
  }
  const double seconds = std::chrono::duration<double>(now - last_).count();
  if (seconds > 0) {
    level_ = std::min(double(per_minute), level_ + seconds * double(per_minute) / 60.0);
    last_ = now;
  }
}

int64_t TokenBucket::RetryAfterSeconds(int64_t per_minute, Clock::time_point now) {
  Refill(per_minute, now);
  if (level_ > 0) return 0;
  // Until the level is above zero again.
  const double seconds = -level_ * 60.0 / double(per_minute);
  return std::max<int64_t>(1, int64_t(std::ceil(seconds)));
}

void TokenBucket::Charge(int64_t per_minute, int64_t tokens, Clock::time_point now) {
  Refill(per_minute, now);
  level_ -= double(tokens);
}

absl::Status TenantLimits::BeginGenerate(const Tenant& tenant, int64_t* retry_after_seconds,
                                         TokenBucket::Clock::time_point now) {
  const TenantQuotas& q = tenant.quotas;
  std::lock_guard lock(mu_);
  Usage& u = usage_[tenant.name];
  if (q.max_concurrent_generates > 0 && u.running >= q.max_concurrent_generates) {
    return absl::ResourceExhaustedError(absl::StrCat("quota max_concurrent_generates of tenant ", tenant.name, " (",
                                                     q.max_concurrent_generates, ") reached"));
  }
  if (q.tokens_per_minute > 0) {
    if (const int64_t wait = u.bucket.RetryAfterSeconds(q.tokens_per_minute, now); wait > 0) {
      *retry_after_seconds = wait;
      return absl::ResourceExhaustedError(absl::StrCat("quota tokens_per_minute of tenant ", tenant.name, " (",
                                                       q.tokens_per_minute, ") used up; retry in ", wait, " s"));
    }
  }
  ++u.running;
  return absl::OkStatus();
}

void TenantLimits::EndGenerate(const Tenant& tenant, int64_t tokens, TokenBucket::Clock::time_point now) {
  std::lock_guard lock(mu_);
  Usage& u = usage_[tenant.name];
  u.running = std::max<int64_t>(0, u.running - 1);
  if (tenant.quotas.tokens_per_minute > 0) u.bucket.Charge(tenant.quotas.tokens_per_minute, tokens, now);
}

int64_t TenantLimits::running(const std::string& tenant) const {
  std::lock_guard lock(mu_);
  auto it = usage_.find(tenant);
  return it == usage_.end() ? 0 : it->second.running;
}

}  // namespace steady
