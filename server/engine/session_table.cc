#include "server/engine/session_table.h"

#include <algorithm>

#include "base/check.h"

namespace steady {

SessionTable::SessionTable(int slots) : slots_(slots) {
  STEADY_CHECK(slots > 0);
  for (int s = slots - 1; s >= 0; --s) free_.push_back(s);  // slot 0 is handed out first
}

Session* SessionTable::Find(const std::string& id) {
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : &it->second;
}

Session& SessionTable::Add(const std::string& id, bool ephemeral) {
  auto [it, inserted] = sessions_.try_emplace(id);
  STEADY_CHECK(inserted);
  Session& s = it->second;
  s.id = id;
  s.ephemeral = ephemeral;
  s.lru_ = ++clock_;
  named_ += !ephemeral;
  return s;
}

void SessionTable::Erase(const std::string& id) {
  Session* s = Find(id);
  STEADY_CHECK(s != nullptr);
  Unindex(*s);
  if (s->slot >= 0) free_.push_back(s->slot);
  named_ -= !s->ephemeral;
  offloaded_ -= s->on_disk;
  sessions_.erase(id);
}

Session* SessionTable::EvictionCandidate() {
  return idle_resident_.empty() ? nullptr : Find(idle_resident_.begin()->second);
}

bool SessionTable::AssignFreeSlot(Session& s) {
  STEADY_CHECK(s.slot < 0);
  if (free_.empty()) return false;
  Unindex(s);
  s.slot = free_.back();
  free_.pop_back();
  Index(s);
  return true;
}

void SessionTable::ReleaseSlot(Session& s) {
  STEADY_CHECK(s.slot >= 0);
  Unindex(s);
  free_.push_back(s.slot);
  s.slot = -1;
}

void SessionTable::SetOnDisk(Session& s, bool on_disk) {
  offloaded_ += int64_t(on_disk) - int64_t(s.on_disk);
  s.on_disk = on_disk;
}

void SessionTable::SetJob(Session& s, int64_t job) {
  Unindex(s);
  s.job = job;
  Index(s);
}

void SessionTable::Touch(Session& s, int64_t now_unix_ms) {
  Unindex(s);
  s.lru_ = ++clock_;
  s.last_used_unix_ms = now_unix_ms;
  Index(s);
}

std::vector<const Session*> SessionTable::Named() const {
  std::vector<const Session*> out;
  for (const auto& [id, s] : sessions_) {
    if (!s.ephemeral) out.push_back(&s);
  }
  std::sort(out.begin(), out.end(), [](const Session* a, const Session* b) { return a->id < b->id; });
  return out;
}

void SessionTable::Unindex(Session& s) {
  if (s.indexed_) idle_resident_.erase({s.lru_, s.id});
  s.indexed_ = false;
}

void SessionTable::Index(Session& s) {
  if (s.ephemeral || s.slot < 0 || s.job != 0) return;
  idle_resident_.insert({s.lru_, s.id});
  s.indexed_ = true;
}

}  // namespace steady
