#include "model/constrain/constraint_cache.h"

namespace steady {

absl::StatusOr<std::shared_ptr<const Constraint>> ConstraintCache::Get(const ConstraintSpec& spec) {
  Key key(int(spec.kind), spec.kind == ConstraintSpec::Kind::kJsonObject ? std::string() : spec.text);
  {
    std::lock_guard lock(mu_);
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      order_.splice(order_.begin(), order_, it->second.second);
      return it->second.first;
    }
  }
  auto compiled = Constraint::Compile(spec, vocab_);
  if (!compiled.ok() || capacity_ == 0) return compiled;
  std::lock_guard lock(mu_);
  if (entries_.count(key)) return entries_.at(key).first;  // compiled meanwhile by another caller
  order_.push_front(key);
  entries_[key] = {*compiled, order_.begin()};
  while (entries_.size() > capacity_) {
    entries_.erase(order_.back());
    order_.pop_back();
  }
  return compiled;
}

}  // namespace steady
