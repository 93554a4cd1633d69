#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "server/engine_impl.h"
#include "server/request_checks.h"

namespace steady {

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// State memory over a slot's fixed bytes, at least one, at most max_sessions. A softmax-only model
// has no fixed state (its KV cache grows instead): 4 * max_batch slots.
int SlotCount(const Model& model, const EngineOptions& o) {
  int64_t fixed_bytes = int64_t(model.StateFloats() * sizeof(float));
  // On a GPU a KV cache is preallocated for max_context tokens: it counts like fixed state.
  if (o.device != "cpu" && CudaDevicePresent()) {
    fixed_bytes += KvCacheFloatsPerToken(model.config()) * o.max_context * int64_t(sizeof(float));
  }
  int64_t slots = fixed_bytes == 0 ? int64_t(o.max_batch) * 4 : o.state_memory_bytes / fixed_bytes;
  slots = std::clamp<int64_t>(slots, 1, std::min<int64_t>(o.max_sessions, 1 << 24));
  return int(slots);
}

absl::StatusOr<std::unique_ptr<Backend>> MakeEngineBackend(const Model& model, const EngineOptions& o) {
  BackendOptions b;
  b.slots = SlotCount(model, o);
  b.max_context = o.max_context;
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

absl::Status Engine::Impl::CheckCapacity() const {
  if (sessions.named_sessions() >= options.max_sessions) {
    return absl::ResourceExhaustedError(absl::StrCat("max_sessions (", options.max_sessions, ") reached"));
  }
  if (options.session_dir.empty() && sessions.named_sessions() >= pool->slots()) {
    return absl::ResourceExhaustedError(absl::StrCat("all ", pool->slots(),
                                                     " state slots hold sessions and there is no session_dir to offload to"));
  }
  return absl::OkStatus();
}

void Engine::Impl::FreeSlot(Session& s) {
  const int slot = s.slot;
  sessions.ReleaseSlot(s);
  pool->Reset(slot);  // frees a KV cache's memory too
}

absl::Status Engine::Impl::Offload(Session& s) {
  STEADY_CHECK(s.slot >= 0 && s.job == 0 && !s.ephemeral && !options.session_dir.empty());
  const int slot = s.slot;
  if (absl::Status st = WriteToDisk(s, CaptureSlot(*pool, slot)); !st.ok()) return st;
  FreeSlot(s);
  return absl::OkStatus();
}

absl::Status Engine::Impl::MakeResident(Session& s) {
  if (s.slot >= 0) return absl::OkStatus();
  if (!sessions.AssignFreeSlot(s)) {
    Session* victim = options.session_dir.empty() ? nullptr : sessions.EvictionCandidate();
    if (!victim) return absl::ResourceExhaustedError("no state slot is free");
    if (absl::Status st = Offload(*victim); !st.ok()) return st;
    STEADY_CHECK(sessions.AssignFreeSlot(s));
  }
  if (!s.on_disk) {
    pool->Reset(s.slot);
    return absl::OkStatus();
  }
  absl::StatusOr<SessionSnapshot> snap = [&]() -> absl::StatusOr<SessionSnapshot> {
    auto blob = ReadWholeFile(SnapshotPath(s.id));
    if (!blob.ok()) return blob.status();
    auto decoded = DecodeSnapshot(*blob, shape);
    if (!decoded.ok()) return decoded.status();
    if (absl::Status st = CheckFits(*decoded); !st.ok()) return st;
    return decoded;
  }();
  if (!snap.ok()) {
    FreeSlot(s);
    return absl::Status(snap.status().code(),
                        absl::StrCat("session ", s.id, ": cannot restore it from ", SnapshotPath(s.id), ": ",
                                     snap.status().message()));
  }
  RestoreSlot(*snap, *pool, s.slot);
  // The file goes once the state is back in a slot: a file exists only for offloaded sessions (and
  // for every session after a shutdown).
  ::unlink(SnapshotPath(s.id).c_str());
  sessions.SetOnDisk(s, false);
  return absl::OkStatus();
}

absl::StatusOr<SessionSnapshot> Engine::Impl::Snapshot(Session& s) {
  SessionSnapshot snap;
  if (s.slot >= 0) {
    snap = CaptureSlot(*pool, s.slot);
  } else if (s.on_disk) {
    auto blob = ReadWholeFile(SnapshotPath(s.id));
    if (!blob.ok()) return blob.status();
    auto decoded = DecodeSnapshot(*blob, shape);
    if (!decoded.ok()) return decoded.status();
    snap = *std::move(decoded);
  } else {
    snap = empty_state;
  }
  snap.session_id = s.id;
  snap.created_unix_ms = s.created_unix_ms;
  snap.last_used_unix_ms = s.last_used_unix_ms;
  return snap;
}

absl::Status Engine::Impl::WriteToDisk(Session& s, const SessionSnapshot& state) {
  SessionSnapshot named = state;
  named.session_id = s.id;
  named.created_unix_ms = s.created_unix_ms;
  named.last_used_unix_ms = s.last_used_unix_ms;
  if (absl::Status st = WriteFileAtomic(SnapshotPath(s.id), EncodeSnapshot(named, shape.fingerprint)); !st.ok()) {
    return st;
  }
  s.position = state.position;
  s.state_bytes = state.StateBytes();
  sessions.SetOnDisk(s, true);
  return absl::OkStatus();
}

// Gives a new session `state`: a free slot when there is one, else a file in session_dir (no slot
// is taken from another session for it).
absl::Status Engine::Impl::CheckFits(const SessionSnapshot& state) const {
  const int64_t cap = pool->max_context();
  if (cap < 0 || state.position <= cap) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("the session holds ", state.position, " tokens, more than the ",
                                                    cap, " tokens of KV cache a session has on this server (--max-context)"));
}

absl::Status Engine::Impl::Place(Session& s, const SessionSnapshot& state) {
  if (absl::Status st = CheckFits(state); !st.ok()) return st;
  if (sessions.AssignFreeSlot(s)) {
    RestoreSlot(state, *pool, s.slot);
    return absl::OkStatus();
  }
  if (options.session_dir.empty()) return absl::ResourceExhaustedError("no state slot is free; retry later");
  return WriteToDisk(s, state);
}

void Engine::Impl::RestoreSessionDir() {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(options.session_dir, ec)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& p : files) {
    const std::string name = p.filename().string();
    if (name.find(".snap.tmp.") != std::string::npos) {
      fs::remove(p, ec);  // a write interrupted by a crash; the previous file (if any) is intact
      continue;
    }
    if (p.extension() != ".snap") continue;
    const std::string id = p.stem().string();
    auto blob = ReadWholeFile(p.string());
    absl::StatusOr<SessionSnapshot> snap = blob.ok() ? DecodeSnapshot(*blob, shape) : blob.status();
    absl::Status st = snap.ok() ? CheckSessionId(id, "file name") : snap.status();
    if (st.ok() && snap->session_id != id) st = absl::InvalidArgumentError(absl::StrCat("holds session ", snap->session_id));
    if (st.ok()) st = CheckCapacity();
    if (!st.ok()) {
      // Left in place: it may belong to another model or need a look.
      std::fprintf(stderr, "steady: skipping %s: %s\n", p.c_str(), std::string(st.message()).c_str());
      continue;
    }
    Session& s = sessions.Add(id, false);
    s.position = snap->position;
    s.state_bytes = snap->StateBytes();
    s.created_unix_ms = snap->created_unix_ms;
    s.last_used_unix_ms = snap->last_used_unix_ms;
    sessions.SetOnDisk(s, true);
  }
}

// ---------------------------------------------------------------------------------------------
// Control operations
// ---------------------------------------------------------------------------------------------

absl::StatusOr<SessionInfo> Engine::Impl::Create(std::string id) {
  if (id.empty()) id = NewSessionId();
  if (absl::Status st = CheckSessionId(id, "session_id"); !st.ok()) return st;
  if (sessions.Find(id)) return absl::AlreadyExistsError(absl::StrCat("session_id: ", id, " exists"));
  if (absl::Status st = CheckCapacity(); !st.ok()) return st;
  Session& s = sessions.Add(id, false);
  s.created_unix_ms = NowUnixMs();
  sessions.Touch(s, s.created_unix_ms);
  return Info(s);
}

absl::Status Engine::Impl::Delete(const std::string& id) {
  if (absl::Status st = CheckSessionId(id, "session_id"); !st.ok()) return st;
  Session* s = sessions.Find(id);
  if (!s) return absl::NotFoundError(absl::StrCat("session_id: no session ", id));
  if (s->job != 0) return absl::FailedPreconditionError(absl::StrCat("session ", id, " is running a Generate"));
  if (s->on_disk && ::unlink(SnapshotPath(id).c_str()) != 0 && errno != ENOENT) {
    return absl::InternalError(absl::StrCat(SnapshotPath(id), ": cannot delete: ", std::strerror(errno)));
  }
  if (s->slot >= 0) FreeSlot(*s);
  sessions.Erase(id);
  return absl::OkStatus();
}

absl::StatusOr<SessionInfo> Engine::Impl::Fork(const std::string& source_id, std::string new_id) {
  if (absl::Status st = CheckSessionId(source_id, "source_id"); !st.ok()) return st;
  if (!new_id.empty()) {
    if (absl::Status st = CheckSessionId(new_id, "new_id"); !st.ok()) return st;
  }
  Session* source = sessions.Find(source_id);
  if (!source) return absl::NotFoundError(absl::StrCat("source_id: no session ", source_id));
  if (source->job != 0) return absl::FailedPreconditionError(absl::StrCat("session ", source_id, " is running a Generate"));
  if (new_id.empty()) new_id = NewSessionId();
  if (sessions.Find(new_id)) return absl::AlreadyExistsError(absl::StrCat("new_id: ", new_id, " exists"));
  if (absl::Status st = CheckCapacity(); !st.ok()) return st;
  auto state = Snapshot(*source);
  if (!state.ok()) return state.status();
  Session& s = sessions.Add(new_id, false);
  s.created_unix_ms = NowUnixMs();
  sessions.Touch(s, s.created_unix_ms);
  if (source->slot >= 0 || source->on_disk) {
    if (absl::Status st = Place(s, *state); !st.ok()) {
      sessions.Erase(new_id);
      return st;
    }
  }
  return Info(s);
}

absl::StatusOr<std::string> Engine::Impl::Export(const std::string& id) {
  if (absl::Status st = CheckSessionId(id, "session_id"); !st.ok()) return st;
  Session* s = sessions.Find(id);
  if (!s) return absl::NotFoundError(absl::StrCat("session_id: no session ", id));
  if (s->job != 0) return absl::FailedPreconditionError(absl::StrCat("session ", id, " is running a Generate"));
  auto snap = Snapshot(*s);
  if (!snap.ok()) return snap.status();
  return EncodeSnapshot(*snap, shape.fingerprint);
}

absl::StatusOr<SessionInfo> Engine::Impl::Import(const std::string& blob, std::string id) {
  if (!id.empty()) {
    if (absl::Status st = CheckSessionId(id, "session_id"); !st.ok()) return st;
  }
  auto snap = DecodeSnapshot(blob, shape);
  if (!snap.ok()) return snap.status();
  if (id.empty()) id = NewSessionId();
  if (sessions.Find(id)) return absl::AlreadyExistsError(absl::StrCat("session_id: ", id, " exists"));
  if (absl::Status st = CheckCapacity(); !st.ok()) return st;
  Session& s = sessions.Add(id, false);
  s.created_unix_ms = snap->created_unix_ms;
  sessions.Touch(s, NowUnixMs());
  if (absl::Status st = Place(s, *snap); !st.ok()) {
    sessions.Erase(id);
    return st;
  }
  return Info(s);
}

}  // namespace steady
