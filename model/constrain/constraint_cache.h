// Compiled constraints by spec, shared between requests: a schema or grammar that many requests use
// compiles (and builds its token tables) once. Thread-safe; least recently used entries go first.
#ifndef STEADY_MODEL_CONSTRAIN_CONSTRAINT_CACHE_H_
#define STEADY_MODEL_CONSTRAIN_CONSTRAINT_CACHE_H_

#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "model/constrain/constraint.h"

namespace steady {

class ConstraintCache {
 public:
  ConstraintCache(std::shared_ptr<const TokenVocabulary> vocab, size_t capacity = 64)
      : vocab_(std::move(vocab)), capacity_(capacity) {}

  // The compiled constraint, from the cache or compiled now (outside the lock); errors as
  // Constraint::Compile, not cached.
  absl::StatusOr<std::shared_ptr<const Constraint>> Get(const ConstraintSpec& spec);
  const TokenVocabulary& vocab() const { return *vocab_; }

 private:
  using Key = std::pair<int, std::string>;
  const std::shared_ptr<const TokenVocabulary> vocab_;
  const size_t capacity_;
  std::mutex mu_;
  std::list<Key> order_;  // guarded by mu_: most recently used first
  std::map<Key, std::pair<std::shared_ptr<const Constraint>, std::list<Key>::iterator>> entries_;  // guarded by mu_
};

}  // namespace steady

#endif  // STEADY_MODEL_CONSTRAIN_CONSTRAINT_CACHE_H_
