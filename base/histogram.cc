#include "base/histogram.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace steady {
namespace {

// Prometheus renders +Inf and integral bounds without noise ("0.005", "1", "+Inf").
std::string FormatBound(double b) { return absl::StrFormat("%g", b); }

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  std::lock_guard lock(mu_);
  ++counts_[i];
  sum_ += value;
  ++count_;
}

void Histogram::Render(const std::string& name, std::string* out) const {
  std::lock_guard lock(mu_);
  int64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < bounds_.size() ? FormatBound(bounds_[i]) : "+Inf";
    absl::StrAppend(out, name, "_bucket{le=\"", le, "\"} ", cumulative, "\n");
  }
  absl::StrAppend(out, name, "_sum ", absl::StrFormat("%.9g", sum_), "\n", name, "_count ", count_, "\n");
}

}  // namespace steady
