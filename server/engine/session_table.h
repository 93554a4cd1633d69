// Bookkeeping of sessions and state slots, owned by the engine thread: which session holds which
// slot, which are offloaded to the session store, which are busy, and the LRU order of idle
// resident sessions (the offload candidates). No model and no store: the engine moves the state.
#ifndef STEADY_SERVER_ENGINE_SESSION_TABLE_H_
#define STEADY_SERVER_ENGINE_SESSION_TABLE_H_

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "server/store/turn_record.h"

namespace steady {

struct Session {
  std::string id;
  bool ephemeral = false;   // a Generate without session_id: never listed, offloaded or persisted
  int slot = -1;            // resident slot; -1: none (empty, or offloaded when on_disk)
  bool on_disk = false;     // offloaded: the state is only in the store; then slot == -1
  bool stored = false;      // the store's blob is the session's current state (on_disk implies it)
  int64_t position = 0;     // while not resident (resident: the pool's position)
  int64_t state_bytes = 0;  // while not resident
  int64_t created_unix_ms = 0;
  int64_t last_used_unix_ms = 0;
  int64_t job = 0;          // the Generate running on it; 0: idle
  // While resident: the turn that led to the slot's state (offloaded: the store's blob holds it).
  std::optional<TurnRecord> last_turn;
  // While resident: the last tokens of its turns, for prompt lookup (EngineOptions::ngram_history);
  // dropped when the slot is freed (Engine::Impl::FreeSlot).
  std::vector<int32_t> draft_history;

 private:
  friend class SessionTable;
  uint64_t lru_ = 0;        // larger: used more recently
  bool indexed_ = false;    // in SessionTable::idle_resident_
};

class SessionTable {
 public:
  explicit SessionTable(int slots);

  Session* Find(const std::string& id);
  bool Contains(const std::string& id) const { return sessions_.count(id) > 0; }
  // A new session without a slot (empty state). The id must be new.
  Session& Add(const std::string& id, bool ephemeral);
  // Forgets the session and frees its slot.
  void Erase(const std::string& id);

  int slots() const { return slots_; }
  int free_slots() const { return int(free_.size()); }
  int64_t named_sessions() const { return named_; }
  int64_t offloaded_sessions() const { return offloaded_; }
  int64_t resident_sessions() const { return slots_ - int64_t(free_.size()); }
  // Named, resident, idle sessions: what offloading can free.
  int64_t evictable() const { return int64_t(idle_resident_.size()); }
  // The least recently used of those; nullptr when none.
  Session* EvictionCandidate();

  // Gives `s` a free slot (it must have none); false when none is free.
  bool AssignFreeSlot(Session& s);
  void ReleaseSlot(Session& s);
  void SetOnDisk(Session& s, bool on_disk);
  void SetJob(Session& s, int64_t job);
  // Marks `s` most recently used.
  void Touch(Session& s, int64_t now_unix_ms);

  // Named sessions, sorted by id.
  std::vector<const Session*> Named() const;

 private:
  void Unindex(Session& s);
  void Index(Session& s);

  int slots_;
  std::vector<int> free_;  // free slot numbers
  std::unordered_map<std::string, Session> sessions_;
  std::set<std::pair<uint64_t, std::string>> idle_resident_;  // (lru, id), oldest first
  uint64_t clock_ = 0;
  int64_t named_ = 0, offloaded_ = 0;
};

}  // namespace steady

#endif  // STEADY_SERVER_ENGINE_SESSION_TABLE_H_
