#include "server/engine/prefix_cache.h"

#include <algorithm>

namespace steady {

std::vector<uint64_t> PrefixCache::PrefixHashes(const std::vector<int32_t>& tokens, size_t n) {
  std::vector<uint64_t> h(n + 1);
  uint64_t x = 0x9e3779b97f4a7c15ULL ^ 0x5ee4dULL;
  h[0] = x;
  for (size_t i = 0; i < n; ++i) {
    // splitmix64's finalizer over (running hash + token): every prefix length gets its own value.
    x += 0x9e3779b97f4a7c15ULL + uint64_t(uint32_t(tokens[i]));
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    x = z ^ (z >> 31);
    h[i + 1] = x;
  }
  return h;
}

PrefixCache::Lru::iterator PrefixCache::Find(const std::vector<int32_t>& tokens, size_t length, uint64_t hash) const {
  auto [first, last] = index_.equal_range(hash);
  for (auto it = first; it != last; ++it) {
    const Entry& e = **it->second;
    if (e.length == length && std::equal(e.ids->begin(), e.ids->begin() + length, tokens.begin())) return it->second;
  }
  return const_cast<Lru&>(lru_).end();
}

std::shared_ptr<const PrefixCache::Entry> PrefixCache::Longest(const std::vector<int32_t>& tokens) {
  if (!lru_.empty() && tokens.size() >= 2) {
    const std::vector<uint64_t> h = PrefixHashes(tokens, tokens.size() - 1);
    for (size_t k = tokens.size() - 1; k >= 1; --k) {
      if (index_.count(h[k]) == 0) continue;
      auto it = Find(tokens, k, h[k]);
      if (it == lru_.end()) continue;
      lru_.splice(lru_.begin(), lru_, it);  // most recently used
      ++stats_.hits;
      stats_.tokens_saved += int64_t(k);
      return *it;
    }
  }
  ++stats_.misses;
  return nullptr;
}

bool PrefixCache::Contains(const std::vector<int32_t>& tokens, size_t length) const {
  if (length == 0 || length > tokens.size()) return false;
  return Find(tokens, length, PrefixHashes(tokens, length)[length]) != lru_.end();
}

void PrefixCache::EvictLast() {
  const Entry& victim = *lru_.back();
  auto [first, last] = index_.equal_range(victim.hash);
  for (auto it = first; it != last; ++it) {
    if (it->second == std::prev(lru_.end())) {
      index_.erase(it);
      break;
    }
  }
  stats_.bytes -= victim.state_bytes;
  if (auto holders = id_holders_.find(victim.ids.get()); --holders->second == 0) {
    stats_.bytes -= IdBytes(victim.ids);
    id_holders_.erase(holders);
  }
  --stats_.entries;
  ++stats_.evictions;
  lru_.pop_back();
}

void PrefixCache::Insert(Ids ids, size_t length, SessionSnapshot state) {
  if (length == 0 || length > ids->size() || Contains(*ids, length)) return;
  auto entry = std::make_shared<Entry>();
  entry->state_bytes = state.StateBytes();
  if (entry->state_bytes + IdBytes(ids) > capacity_) return;
  entry->hash = PrefixHashes(*ids, length).back();
  entry->length = length;
  entry->state = std::move(state);
  entry->ids = std::move(ids);
  // What keeping it adds: its state, and its ids unless another entry holds them already.
  auto adds = [&] { return entry->state_bytes + (id_holders_.count(entry->ids.get()) ? 0 : IdBytes(entry->ids)); };
  while (stats_.bytes + adds() > capacity_ && !lru_.empty()) EvictLast();
  if (id_holders_[entry->ids.get()]++ == 0) stats_.bytes += IdBytes(entry->ids);
  stats_.bytes += entry->state_bytes;
  ++stats_.entries;
  ++stats_.inserts;
  const uint64_t hash = entry->hash;
  lru_.push_front(std::move(entry));
  index_.emplace(hash, lru_.begin());
}

}  // namespace steady
