#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/status.h"
#include "server/engine/engine_impl.h"
#include "server/engine/request_checks.h"

namespace steady {

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// State memory over a slot's fixed bytes, at least one, at most max_sessions. A softmax-only model
// has no fixed state (its KV cache grows instead): 4 * max_batch slots.
int SlotCount(const Model& model, const EngineOptions& o) {
  int64_t fixed_bytes = int64_t(model.StateFloats() * sizeof(float));
  // On a GPU a KV cache is preallocated for max_context tokens, in bf16 (BackendOptions::cuda_kv_bf16,
  // the default MakeEngineBackend keeps): it counts like fixed state.
  if (o.device != "cpu" && CudaDevicePresent()) {
    fixed_bytes += KvCacheFloatsPerToken(model.config()) * o.max_context * int64_t(sizeof(uint16_t));
  }
  int64_t slots = fixed_bytes == 0 ? int64_t(o.max_batch) * 4 : o.state_memory_bytes / fixed_bytes;
  slots = std::clamp<int64_t>(slots, 1, std::min<int64_t>(o.max_sessions, 1 << 24));
  return int(slots);
}

absl::StatusOr<std::unique_ptr<Backend>> MakeEngineBackend(const Model& model, const EngineOptions& o) {
  BackendOptions b;
  b.slots = SlotCount(model, o);
  b.max_context = o.max_context;
  b.cpu_threads = o.cpu_threads;
  b.cpu_weights = o.cpu_weights;
  b.cpu_gemm = o.cpu_gemm;
  return MakeBackend(model, o.device, b);
}

// ---------------------------------------------------------------------------------------------
// Sessions and state
// ---------------------------------------------------------------------------------------------

SessionInfo Engine::Impl::Info(const Session& s) const {
  SessionInfo info;
  info.session_id = s.id;
  info.position = Position(s);
  info.state_bytes = s.slot >= 0 ? int64_t(pool->BytesInUse(s.slot))
                     : s.on_disk ? s.state_bytes
                                 : empty_state.StateBytes();
  info.resident = !s.on_disk;
  info.busy = s.job != 0;
  info.created_unix_ms = s.created_unix_ms;
  info.last_used_unix_ms = s.last_used_unix_ms;
  return info;
}

std::string Engine::Impl::NewSessionId() {
  for (;;) {
    const std::string id = absl::StrCat(absl::Hex(id_rng(), absl::kZeroPad16), absl::Hex(id_rng(), absl::kZeroPad16));
    if (!sessions.Find(id)) return id;
  }
}

absl::StatusOr<Session*> Engine::Impl::Lookup(const std::string& id, const std::string& field) {
  Session* s = sessions.Find(id);
  // A shared store is the truth for a session this server does not hold: another server may have
  // created, changed or deleted it.
  if (s && (!Shared() || s->job != 0 || store()->Holds(id))) return s;
  if (!s) {
    if (auto it = unreadable.find(id); it != unreadable.end()) return it->second;
    if (!Shared()) return absl::NotFoundError(absl::StrCat(field, ": no session ", id));
  }
  return Adopt(id, field);
}

absl::StatusOr<Session*> Engine::Impl::Adopt(const std::string& id, const std::string& field) {
  auto head = store()->Head(id, MaxSnapshotHeaderBytes(shape));
  Session* s = sessions.Find(id);
  if (!head.ok()) {
    if (head.status().code() != absl::StatusCode::kNotFound) return head.status();
    if (s) {  // deleted by another server
      if (s->slot >= 0) FreeSlot(*s);
      sessions.Erase(id);
    }
    return absl::NotFoundError(absl::StrCat(field, ": no session ", id));
  }
  auto header = DecodeSnapshotHeader(*head, shape);
  if (!header.ok()) {
    return absl::Status(header.status().code() == absl::StatusCode::kFailedPrecondition ? header.status().code()
                                                                                       : absl::StatusCode::kDataLoss,
                        absl::StrCat("session ", id, ": its state in the ", store()->Describe(), " cannot be read (",
                                     std::string(header.status().message()), ")"));
  }
  if (!s) {
    if (absl::Status st = CheckCapacity(); !st.ok()) return st;
    s = &sessions.Add(id, false);
  }
  if (s->slot >= 0) FreeSlot(*s);  // this server's copy may be older than the store's
  sessions.SetOnDisk(*s, true);
  s->stored = true;
  s->position = header->position;
  s->state_bytes = header->StateBytes();
  s->created_unix_ms = header->created_unix_ms;
  s->last_used_unix_ms = header->last_used_unix_ms;
  return s;
}

absl::StatusOr<Session*> Engine::Impl::LookupToChange(const std::string& id, const std::string& field) {
  if (!Shared() || store()->Holds(id) || unreadable.count(id)) return Lookup(id, field);
  // A session running here (its lease lost meanwhile) answers as busy; its state is not replaced.
  if (Session* s = sessions.Find(id); s && s->job != 0) return s;
  // The lease first: while a peer holds it this costs one round trip (a call waiting for it tries
  // again and again), and once it is held nobody else writes the session, so what the store holds
  // is current.
  if (absl::Status st = store()->Acquire(id); !st.ok()) return st;
  auto s = Adopt(id, field);
  if (!s.ok()) store()->Release(id);  // no such session, or unreadable: nothing to hold
  return s;
}

absl::Status Engine::Impl::CheckNew(const std::string& id, const std::string& field) {
  if (sessions.Contains(id) || unreadable.count(id)) {
    return absl::AlreadyExistsError(absl::StrCat(field, ": ", id, " exists"));
  }
  if (!Shared()) return absl::OkStatus();
  auto exists = [&]() -> absl::Status {
    auto head = store()->Head(id, 1);
    if (head.status().code() == absl::StatusCode::kNotFound) return absl::OkStatus();
    return head.ok() ? absl::AlreadyExistsError(absl::StrCat(field, ": ", id, " exists")) : head.status();
  };
  if (absl::Status st = exists(); !st.ok()) return st;
  // Then the lease, so that no other server creates the same id meanwhile (kept for the new
  // session), and a second look in case one did just before.
  if (absl::Status st = store()->Acquire(id); !st.ok()) return st;
  absl::Status st = exists();
  if (!st.ok()) store()->Release(id);
  return st;
}

void Engine::Impl::LetGo(Session& s) {
  if (!Shared()) return;
  if (s.slot >= 0 && s.stored) {
    if (absl::Status st = Offload(s); st.ok()) return;  // releases the lease too
  }
  if (s.slot < 0) store()->Release(s.id);
}

void Engine::Impl::Forget(const std::string& id) {
  if (Shared()) store()->Release(id);
  sessions.Erase(id);
  for (DraftLane& lane : draft_lanes) {
    if (lane.session == id) lane.carried.clear();  // a new session of this id starts over
  }
}

std::vector<SessionInfo> Engine::Impl::ListAll() {
  std::vector<SessionInfo> out;
  if (!Shared()) {
    for (const Session* s : sessions.Named()) out.push_back(Info(*s));
    return out;
  }
  // Every server's sessions, as the store has them; this server's own from its table.
  auto keys = store()->List();
  if (!keys.ok()) {
    std::fprintf(stderr, "steady: ListSessions: %s\n", std::string(keys.status().message()).c_str());
    keys = std::vector<std::string>{};
  }
  for (const std::string& id : *keys) {
    auto s = Lookup(id, "session_id");
    if (s.ok()) out.push_back(Info(**s));
  }
  for (const Session* s : sessions.Named()) {
    if (!std::binary_search(keys->begin(), keys->end(), s->id)) out.push_back(Info(*s));  // not written yet
  }
  std::sort(out.begin(), out.end(), [](const SessionInfo& a, const SessionInfo& b) { return a.session_id < b.session_id; });
  return out;
}

absl::Status Engine::Impl::CheckCapacity() const {
  if (sessions.named_sessions() >= options.max_sessions) {
    return absl::ResourceExhaustedError(absl::StrCat("max_sessions (", options.max_sessions, ") reached"));
  }
  if (!store() && sessions.named_sessions() >= pool->slots()) {
    return absl::ResourceExhaustedError(absl::StrCat("all ", pool->slots(),
                                                     " state slots hold sessions and there is no session store to offload to"));
  }
  return absl::OkStatus();
}

absl::Status Engine::Impl::CheckQuota(const SessionQuota& quota, int64_t new_sessions, int64_t new_bytes) const {
  if (quota.tenant.empty() || (quota.max_sessions <= 0 && quota.max_state_bytes <= 0)) return absl::OkStatus();
  const std::string prefix = TenantPrefix(quota.tenant);
  int64_t count = new_sessions, bytes = new_bytes;
  for (const Session* s : sessions.Named()) {
    if (s->id.compare(0, prefix.size(), prefix) != 0) continue;
    ++count;
    bytes += Info(*s).state_bytes;
  }
  if (quota.max_sessions > 0 && count > quota.max_sessions) {
    return absl::ResourceExhaustedError(
        absl::StrCat("quota max_sessions of tenant ", quota.tenant, " (", quota.max_sessions, ") reached"));
  }
  if (quota.max_state_bytes > 0 && bytes > quota.max_state_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("quota max_state_bytes of tenant ", quota.tenant, " (",
                                                     quota.max_state_bytes, ") reached: its sessions would hold ",
                                                     bytes, " bytes"));
  }
  return absl::OkStatus();
}

void Engine::Impl::FreeSlot(Session& s) {
  const int slot = s.slot;
  sessions.ReleaseSlot(s);
  s.last_turn.reset();  // the store's blob holds it, or the slot's state is gone
  s.draft_history = {};  // only proposals: not worth keeping beyond the resident sessions
  pool->Reset(slot);  // frees a KV cache's memory too
}

absl::Status Engine::Impl::Offload(Session& s) {
  STEADY_CHECK(s.slot >= 0 && s.job == 0 && !s.ephemeral && store());
  // With turn durability the store already holds an idle session's state: nothing to write.
  if (!s.stored) {
    SessionSnapshot state = CaptureSlot(*pool, s.slot);
    state.last_turn = s.last_turn;
    if (absl::Status st = Persist(s, state); !st.ok()) return st;
  }
  s.position = pool->position(s.slot);
  s.state_bytes = int64_t(pool->BytesInUse(s.slot));
  FreeSlot(s);
  sessions.SetOnDisk(s, true);
  if (Shared()) store()->Release(s.id);  // another server may take it over now
  return absl::OkStatus();
}

absl::StatusOr<SessionSnapshot> Engine::Impl::LoadStored(const Session& s) const {
  auto blob = store()->Get(s.id);
  absl::StatusOr<SessionSnapshot> snap = blob.ok() ? DecodeSnapshot(*blob, shape) : blob.status();
  if (snap.ok()) {
    if (absl::Status st = CheckFits(*snap); !st.ok()) snap = st;
  }
  if (!snap.ok()) {
    return WithContext(snap.status(), absl::StrCat("session ", s.id, ": cannot restore it from the ", store()->Describe()));
  }
  return snap;
}

absl::Status Engine::Impl::MakeResident(Session& s) {
  if (s.slot >= 0) return absl::OkStatus();
  if (!sessions.AssignFreeSlot(s)) {
    Session* victim = store() ? sessions.EvictionCandidate() : nullptr;
    if (!victim) return absl::ResourceExhaustedError("no state slot is free");
    if (absl::Status st = Offload(*victim); !st.ok()) return st;
    STEADY_CHECK(sessions.AssignFreeSlot(s));
  }
  if (!s.on_disk) {
    pool->Reset(s.slot);
    return absl::OkStatus();
  }
  absl::StatusOr<SessionSnapshot> snap = LoadStored(s);
  if (!snap.ok()) {
    FreeSlot(s);
    return snap.status();
  }
  RestoreSlot(*snap, *pool, s.slot);
  s.last_turn = std::move(snap->last_turn);
  sessions.SetOnDisk(s, false);
  // Durability::kShutdown: the blob goes once the state is back in a slot, so the store never holds
  // a state older than the session's (a crash loses the session instead). kTurn keeps it current.
  if (!TurnDurable()) {
    if (absl::Status st = store()->Delete(s.id); !st.ok()) {
      std::fprintf(stderr, "steady: %s\n", std::string(st.message()).c_str());
    }
    s.stored = false;
  }
  return absl::OkStatus();
}

absl::StatusOr<SessionSnapshot> Engine::Impl::Snapshot(Session& s) {
  SessionSnapshot snap;
  if (s.slot >= 0) {
    snap = CaptureSlot(*pool, s.slot);
    snap.last_turn = s.last_turn;
  } else if (s.on_disk) {
    auto stored = LoadStored(s);
    if (!stored.ok()) return stored.status();
    snap = *std::move(stored);
  } else {
    snap = empty_state;
  }
  snap.session_id = s.id;
  snap.created_unix_ms = s.created_unix_ms;
  snap.last_used_unix_ms = s.last_used_unix_ms;
  return snap;
}

void Engine::Impl::MarkStored(Session& s, const SessionSnapshot& state) {
  s.stored = true;
  s.position = state.position;
  s.state_bytes = state.StateBytes();
}

absl::Status Engine::Impl::Persist(Session& s, const SessionSnapshot& state) {
  SessionSnapshot named = state;
  named.session_id = s.id;
  named.created_unix_ms = s.created_unix_ms;
  named.last_used_unix_ms = s.last_used_unix_ms;
  const absl::Status st = store()->Put({{s.id, EncodeSnapshot(named, shape.fingerprint)}})[0];
  if (st.ok()) MarkStored(s, state);
  return st;
}

absl::Status Engine::Impl::CheckFits(const SessionSnapshot& state) const {
  const int64_t cap = pool->max_context();
  if (cap < 0 || state.position <= cap) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("the session holds ", state.position, " tokens, more than the ",
                                                    cap, " tokens of KV cache a session has on this server (--max-context)"));
}

// Gives a new session `state`: a free slot when there is one, else the store (no slot is taken from
// another session for it). With turn durability the store gets it first, before it is acknowledged.
absl::Status Engine::Impl::Place(Session& s, const SessionSnapshot& state) {
  if (absl::Status st = CheckFits(state); !st.ok()) return st;
  if (TurnDurable()) {
    if (absl::Status st = Persist(s, state); !st.ok()) return st;
  }
  if (sessions.AssignFreeSlot(s)) {
    RestoreSlot(state, *pool, s.slot);
    s.last_turn = state.last_turn;
    return absl::OkStatus();
  }
  if (!store()) return absl::ResourceExhaustedError("no state slot is free; retry later");
  if (!s.stored) {
    if (absl::Status st = Persist(s, state); !st.ok()) return st;
  }
  s.position = state.position;
  s.state_bytes = state.StateBytes();
  sessions.SetOnDisk(s, true);
  return absl::OkStatus();
}

absl::Status Engine::Impl::Recover() {
  auto keys = store()->List();
  if (!keys.ok()) return keys.status();
  for (const std::string& id : *keys) {
    auto blob = store()->Get(id);
    absl::StatusOr<SessionSnapshot> snap = blob.ok() ? DecodeSnapshot(*blob, shape) : blob.status();
    if (snap.ok() && snap->session_id != id) snap = absl::DataLossError(absl::StrCat("holds session ", snap->session_id));
    if (absl::Status st = CheckSessionId(id, "key"); !st.ok()) {
      std::fprintf(stderr, "steady: %s: skipping %s: not a session id\n", store()->Describe().c_str(), id.c_str());
      continue;  // not ours: left alone
    }
    if (absl::Status st = CheckCapacity(); !st.ok()) {
      std::fprintf(stderr, "steady: %s: skipping session %s: %s\n", store()->Describe().c_str(), id.c_str(),
                   std::string(st.message()).c_str());
      continue;
    }
    if (!snap.ok()) {
      // Refused, never dropped: the blob stays for a look, and the session answers with the reason
      // (FAILED_PRECONDITION when another model made it, DATA_LOSS otherwise) until it is deleted.
      const absl::Status& why = snap.status();
      const absl::StatusCode code =
          why.code() == absl::StatusCode::kFailedPrecondition ? why.code() : absl::StatusCode::kDataLoss;
      unreadable[id] = absl::Status(code, absl::StrCat("session ", id, ": its state in the ", store()->Describe(),
                                                       " cannot be read (", std::string(why.message()),
                                                       "); DeleteSession removes it"));
      std::fprintf(stderr, "steady: %s\n", std::string(unreadable[id].message()).c_str());
      continue;
    }
    Session& s = sessions.Add(id, false);
    s.position = snap->position;
    s.state_bytes = snap->StateBytes();
    s.created_unix_ms = snap->created_unix_ms;
    s.last_used_unix_ms = snap->last_used_unix_ms;
    s.stored = true;
    sessions.SetOnDisk(s, true);
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Control operations
// ---------------------------------------------------------------------------------------------

absl::StatusOr<SessionInfo> Engine::Impl::Create(std::string id, const SessionQuota& quota) {
  if (id.empty()) id = NewSessionId();
  if (absl::Status st = CheckSessionId(id, "session_id"); !st.ok()) return st;
  if (absl::Status st = CheckCapacity(); !st.ok()) return st;
  if (absl::Status st = CheckQuota(quota, 1, empty_state.StateBytes()); !st.ok()) return st;
  if (absl::Status st = CheckNew(id, "session_id"); !st.ok()) return st;  // last: it may take a lease
  Session& s = sessions.Add(id, false);
  s.created_unix_ms = NowUnixMs();
  sessions.Touch(s, s.created_unix_ms);
  if (TurnDurable()) {
    if (absl::Status st = Persist(s, empty_state); !st.ok()) {
      Forget(id);
      return st;
    }
  }
  LetGo(s);
  return Info(s);
}

absl::Status Engine::Impl::Delete(const std::string& id) {
  if (absl::Status st = CheckSessionId(id, "session_id"); !st.ok()) return st;
  if (unreadable.count(id)) {
    if (absl::Status st = store()->Delete(id); !st.ok()) return st;
    unreadable.erase(id);
    return absl::OkStatus();
  }
  auto s = LookupToChange(id, "session_id");
  if (!s.ok()) return s.status();
  if ((*s)->job != 0) return absl::FailedPreconditionError(absl::StrCat("session ", id, " is running a Generate"));
  if ((*s)->stored) {
    if (absl::Status st = store()->Delete(id); !st.ok()) return st;
  }
  if ((*s)->slot >= 0) FreeSlot(**s);
  Forget(id);
  return absl::OkStatus();
}

absl::StatusOr<SessionInfo> Engine::Impl::Fork(const std::string& source_id, std::string new_id,
                                               const SessionQuota& quota) {
  if (absl::Status st = CheckSessionId(source_id, "source_id"); !st.ok()) return st;
  if (!new_id.empty()) {
    if (absl::Status st = CheckSessionId(new_id, "new_id"); !st.ok()) return st;
  }
  auto found = Lookup(source_id, "source_id");
  if (!found.ok()) return found.status();
  Session* source = *found;
  if (source->job != 0) return absl::FailedPreconditionError(absl::StrCat("session ", source_id, " is running a Generate"));
  if (new_id.empty()) new_id = NewSessionId();
  if (absl::Status st = CheckCapacity(); !st.ok()) return st;
  if (absl::Status st = CheckQuota(quota, 1, Info(*source).state_bytes); !st.ok()) return st;
  auto state = Snapshot(*source);
  if (!state.ok()) return state.status();
  state->last_turn.reset();  // the fork's history starts here: no turn of its own to replay
  // A source that never held state (no slot, nothing stored) forks into another empty session.
  const bool empty = source->slot < 0 && !source->on_disk;
  if (absl::Status st = CheckNew(new_id, "new_id"); !st.ok()) return st;  // last: it may take a lease
  Session& s = sessions.Add(new_id, false);
  s.created_unix_ms = NowUnixMs();
  sessions.Touch(s, s.created_unix_ms);
  absl::Status st = !empty ? Place(s, *state) : TurnDurable() ? Persist(s, empty_state) : absl::OkStatus();
  if (!st.ok()) {
    Forget(new_id);
    return st;
  }
  if (s.slot >= 0) s.draft_history = source->draft_history;  // the same tokens led to its state
  LetGo(s);
  return Info(s);
}

absl::StatusOr<std::string> Engine::Impl::Export(const std::string& id) {
  if (absl::Status st = CheckSessionId(id, "session_id"); !st.ok()) return st;
  auto s = Lookup(id, "session_id");
  if (!s.ok()) return s.status();
  if ((*s)->job != 0) return absl::FailedPreconditionError(absl::StrCat("session ", id, " is running a Generate"));
  auto snap = Snapshot(**s);
  if (!snap.ok()) return snap.status();
  return EncodeSnapshot(*snap, shape.fingerprint);
}

absl::StatusOr<SessionInfo> Engine::Impl::Import(const std::string& blob, std::string id, const SessionQuota& quota) {
  if (!id.empty()) {
    if (absl::Status st = CheckSessionId(id, "session_id"); !st.ok()) return st;
  }
  auto snap = DecodeSnapshot(blob, shape);
  if (!snap.ok()) return snap.status();
  if (id.empty()) id = NewSessionId();
  if (absl::Status st = CheckCapacity(); !st.ok()) return st;
  if (absl::Status st = CheckQuota(quota, 1, snap->StateBytes()); !st.ok()) return st;
  if (absl::Status st = CheckNew(id, "session_id"); !st.ok()) return st;  // last: it may take a lease
  Session& s = sessions.Add(id, false);
  s.created_unix_ms = snap->created_unix_ms;
  sessions.Touch(s, NowUnixMs());
  if (absl::Status st = Place(s, *snap); !st.ok()) {
    Forget(id);
    return st;
  }
  LetGo(s);
  return Info(s);
}

}  // namespace steady
