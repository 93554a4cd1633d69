// Session states after common prompt prefixes, so a new or ephemeral request whose tokens start with
// one starts from its state and prefills only the rest (docs/api.md, "Prefix cache"). Keyed by the
// prefix's token ids (a 64-bit hash, the ids compared on a hit), least recently used first out,
// bounded in bytes. With constant-size states an entry's state costs the same at 100 or 100,000
// tokens; the ids kept to compare hits (4 bytes a token) are held once per prompt, shared by the
// entries cut from it. Engine thread only.
#ifndef STEADY_SERVER_ENGINE_PREFIX_CACHE_H_
#define STEADY_SERVER_ENGINE_PREFIX_CACHE_H_

#include <cstdint>
#include <list>
#include <memory>
#include <unordered_map>
#include <vector>

#include "server/store/snapshot.h"

namespace steady {

class PrefixCache {
 public:
  using Ids = std::shared_ptr<const std::vector<int32_t>>;
  struct Entry {
    Ids ids;                // the prefix is ids[0, length): a prompt shared with other entries
    size_t length = 0;
    uint64_t hash = 0;      // PrefixHashes(ids, length)[length]
    SessionSnapshot state;  // a session's state after exactly these tokens
    int64_t state_bytes = 0;
  };
  struct Stats {
    int64_t hits = 0, misses = 0, tokens_saved = 0, inserts = 0, evictions = 0, entries = 0, bytes = 0;
  };

  explicit PrefixCache(int64_t capacity_bytes) : capacity_(capacity_bytes) {}

  // The longest cached prefix of `tokens` that leaves at least one token to feed (a request needs
  // the last token's logits), or nullptr. Counts a hit (and the tokens saved) or a miss.
  std::shared_ptr<const Entry> Longest(const std::vector<int32_t>& tokens);
  // Whether the first `length` tokens are cached (no counting).
  bool Contains(const std::vector<int32_t>& tokens, size_t length) const;
  // Keeps the state after ids[0, length); evicts least recently used entries to stay within the
  // capacity (an entry larger than it is not kept). Entries cut from one prompt share its ids.
  void Insert(Ids ids, size_t length, SessionSnapshot state);
  // The same with a copy of tokens[0, length) of its own.
  void Insert(const std::vector<int32_t>& tokens, size_t length, SessionSnapshot state) {
    if (length > tokens.size()) return;
    Insert(std::make_shared<const std::vector<int32_t>>(tokens.begin(), tokens.begin() + length), length,
           std::move(state));
  }

  const Stats& stats() const { return stats_; }
  int64_t capacity() const { return capacity_; }

  // The 64-bit hash of tokens[0, k) for k = 0..n, in one pass.
  static std::vector<uint64_t> PrefixHashes(const std::vector<int32_t>& tokens, size_t n);

 private:
  using Lru = std::list<std::shared_ptr<const Entry>>;  // most recently used first
  Lru::iterator Find(const std::vector<int32_t>& tokens, size_t length, uint64_t hash) const;
  void EvictLast();
  // Bytes of an id vector, counted while at least one entry holds it.
  static int64_t IdBytes(const Ids& ids) { return int64_t(ids->size() * sizeof(int32_t)); }

  const int64_t capacity_;
  Lru lru_;
  std::unordered_multimap<uint64_t, Lru::iterator> index_;  // prefix hash -> entry
  std::unordered_map<const std::vector<int32_t>*, int> id_holders_;  // id vector -> entries holding it
  Stats stats_;
};

}  // namespace steady

#endif  // STEADY_SERVER_ENGINE_PREFIX_CACHE_H_
