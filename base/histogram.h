// A Prometheus histogram: cumulative buckets with fixed upper bounds, thread-safe.
#ifndef STEADY_BASE_HISTOGRAM_H_
#define STEADY_BASE_HISTOGRAM_H_

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace steady {

// Cumulative histogram with fixed upper bounds (seconds).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);
  // Appends the _bucket, _sum and _count lines of metric `name`.
  void Render(const std::string& name, std::string* out) const;

 private:
  const std::vector<double> bounds_;  // ascending; +Inf is implicit
  mutable std::mutex mu_;
  std::vector<int64_t> counts_;  // guarded by mu_: [bounds + 1], per bucket (not cumulative)
  double sum_ = 0;               // guarded by mu_
  int64_t count_ = 0;            // guarded by mu_
};

}  // namespace steady

#endif  // STEADY_BASE_HISTOGRAM_H_
