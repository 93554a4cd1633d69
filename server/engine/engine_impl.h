// The engine's private state, shared by engine.cc (the public methods), engine_loop.cc (thread,
// steps, jobs) and engine_sessions.cc (session operations, offload and restore). Not part of the
// API: include server/engine/engine.h.
#ifndef STEADY_SERVER_ENGINE_ENGINE_IMPL_H_
#define STEADY_SERVER_ENGINE_ENGINE_IMPL_H_

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "model/backend/backend.h"
#include "server/engine/engine.h"
#include "server/engine/prefix_cache.h"
#include "model/speculate/draft_model.h"
#include "server/engine/scheduler.h"
#include "server/engine/session_table.h"
#include "server/store/snapshot.h"

namespace steady {

int64_t NowUnixMs();
// A monotonic clock in ms, for the waits.
int64_t SteadyMs();
// Session::job of a session whose finished turn waits for its commit: busy, but no job runs.
inline constexpr int64_t kCommitting = -1;
// The payload of a refusal that waits (TryOrWait) for the session's running turn to end: a resend
// (expected_position) on a busy session. It waits at most max(store_wait_ms, kTurnWaitMs).
inline constexpr char kWaitsForTurn[] = "steady.engine/waits-for-turn";
inline constexpr int64_t kTurnWaitMs = 5000;
// Slots the pool gets for `model` under `options` (see docs/session-snapshot.md, "Slots").
int SlotCount(const Model& model, const EngineOptions& options);
// The backend options.device names, with SlotCount slots.
absl::StatusOr<std::unique_ptr<Backend>> MakeEngineBackend(const Model& model, const EngineOptions& options);

// The choices of one Generate with n > 1, shared by their jobs: the request's on_done runs when the
// last one ends.
struct ChoiceGroup {
  int running = 0;
  absl::Status status;  // the first error of any choice (the others are then cancelled)
  Usage usage;          // the prompt counted once, completion tokens summed
};

// One accepted Generate (or one choice of it), owned by the engine thread.
struct EngineJob {
  EngineJob(int64_t id, GenerateJob request, const Tokenizer& tokenizer)
      : id(id), request(std::move(request)), sampler(this->request.sampling), streamer(tokenizer, TextStreamer::Mode::kContinuation),
        stops(this->request.stop) {
    if (this->request.constraint) constraint.emplace(this->request.constraint);
  }
  int64_t id;
  int64_t arrival = 0;
  int64_t group = 0;             // the scheduler's fair-share group: one per tenant
  GenerateJob request;
  std::string session_id;        // the table's key (an internal id for ephemeral sessions)
  JobPhase phase = JobPhase::kWaiting;
  std::vector<int32_t> prompt;   // BOS (when the session is empty) + the encoded prompt
  size_t prompt_done = 0;        // prompt tokens in the state
  std::vector<int32_t> context;  // prompt + generated: what the repetition penalty sees
  std::vector<float> logits;     // [vocab] after the last token fed (host sampling)
  std::optional<int32_t> drawn;  // the next token, drawn on the device instead (Backend::ForwardSample),
                                 // or sampled from a verify step's row where it rejected a draft
  int64_t drafted = 0, accepted = 0;  // speculation's draft tokens verified and accepted
  int draft_lane = -1;  // the draft model's lane that follows this job's context (Impl::draft_lanes)
  // What the job drafts from when earlier turns join this one: the session's draft history (prompt
  // lookup) or the context its lane was left with by the session's previous turn (a draft model),
  // then `context` as it grows; empty: `context` alone.
  std::vector<int32_t> draft_context;
  bool from_empty = false;       // began on an empty session: its prompt prefixes can be cached
  std::vector<size_t> cache_points;  // prompt lengths (ascending) the cache keeps besides its interval
  PrefixCache::Ids cache_ids;        // the prompt's ids as the cache's entries share them
  int64_t cached_tokens = 0;     // prompt tokens taken from the prefix cache
  int64_t generated = 0;
  int64_t last_advanced = -1;
  // The session before a prompt that takes more than one chunk (or any prompt of an all_or_nothing
  // turn, kept to its end): a cancel mid-prompt (any cancel, for all_or_nothing) restores it.
  std::optional<SessionSnapshot> before_prompt;
  // The turn's outcome so far (one choice, a named session): what Session::last_turn keeps.
  int64_t start_position = 0;
  bool stored_before = false;  // the store held the session's state when the turn began
  std::vector<int32_t> out_ids;
  std::string out_text;
  Sampler sampler;
  TextStreamer streamer;
  StopMatcher stops;
  std::optional<ConstraintState> constraint;  // where the request's constraint stands
  std::vector<uint64_t> mask;                 // scratch: the constraint's mask
  // n > 1: the choices this job is one of (null until the prompt is in; then choice 0 is the job
  // that prefilled), and for the others, until admitted, the state after the prompt they start from.
  std::shared_ptr<ChoiceGroup> choices;
  int choice = 0;
  std::shared_ptr<const SessionSnapshot> fork_from;
};

struct Engine::Impl {
  Impl(const Model& m, const Tokenizer& t, EngineOptions o, std::unique_ptr<Backend> b)
      : model(m), tokenizer(t), options(std::move(o)), shape(MeasureSnapshotShape(m)), pool(std::move(b)),
        sessions(pool->slots()), id_rng(std::random_device{}()) {
    empty_state = CaptureSlot(*MakeCpuBackend(m, {}), 0);
    device = pool->Name();
  }

  // --- Constant after Start ---
  const Model& model;
  const Tokenizer& tokenizer;
  const EngineOptions options;
  const SnapshotShape shape;
  SessionSnapshot empty_state;  // a fresh session's state (InitState of every layer)
  std::string device;           // the backend's Name()

  // --- Engine thread only ---
  std::unique_ptr<Backend> pool;  // every resident session's state, in slots; runs the steps
  SessionTable sessions;
  std::map<int64_t, std::unique_ptr<EngineJob>> jobs;  // by id
  int64_t next_job_id = 1, next_ephemeral = 1, step = 0;
  std::mt19937_64 id_rng;
  bool stopping = false;  // copy of stop_requested, read after the last inbox drain
  std::unique_ptr<PrefixCache> prefix_cache;  // null when off
  // The draft model's states (options.draft_model; null without one): max_batch lanes, each
  // following one job's context (its turn's prompt and tokens), lent to the jobs that draft: a job
  // takes the lane its session's previous turn left, when no other job has taken it since (the
  // draft then continues with the session's earlier turns behind it, as the target does), else a
  // free lane, else the one least recently used by a job that does not draft this step (which then
  // starts over on its next lane). A lane taken afresh is reset, so a session's fork, snapshot,
  // offload or restore never has a draft state to carry; drafts only propose, so a lane that
  // followed a session elsewhere costs speed, never a token.
  std::unique_ptr<DraftModel> draft;
  struct DraftLane {
    int64_t job = 0;        // the job it follows (0: free; a finished job's lane is free too)
    int64_t last_step = -1;  // the step it last drafted in
    // Once its job finished: that job's session and whole draft context (the lane holds a prefix of
    // it), for the session's next turn.
    std::string session;
    std::vector<int32_t> carried;
  };
  std::vector<DraftLane> draft_lanes;
  std::map<int32_t, std::string> token_texts;  // TokenText's cache
  // Sessions whose blob in the store could not be read at start: id -> the error they answer.
  std::map<std::string, absl::Status> unreadable;
  // Generates that finished with OK on a named session this step; acknowledged by CommitTurns once
  // the store holds their state (Durability::kTurn).
  // A turn the store could not take yet (StoreBusy) waits in to_commit, its session busy (kCommitting),
  // and is written again at next_try_ms until options.store_wait_ms after its first try.
  struct FinishedTurn {
    std::string session_id;
    GenerateJob request;
    std::string reason;
    Usage usage;
    int64_t since_ms = -1;    // SteadyMs() of the first failed write; -1: not tried yet
    int64_t next_try_ms = 0;
  };
  std::vector<FinishedTurn> to_commit;
  // Calls waiting for the shared store: for a peer's lease on their session to lapse or be let go, or
  // for the store to answer again. Each is tried again at next_try_ms, between steps, until
  // options.store_wait_ms after its first try.
  struct WaitingCall {
    std::function<absl::Status()> attempt;          // OK or an error: the call is done; StoreBusy: not yet
    std::function<void(const absl::Status&)> done;  // once, with the final status
    std::shared_ptr<std::atomic<bool>> cancelled;   // the client's; may be null
    int64_t since_ms = -1;
    int64_t next_try_ms = 0;
  };
  std::vector<WaitingCall> waiting;
  bool draining = false;  // Drain(): offload every idle session at once
  std::map<std::string, int64_t> share_groups;  // tenant -> the scheduler's fair-share group

  // --- Guarded by mu ---
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::function<void()>> inbox;  // work for the engine thread, in arrival order
  bool stop_requested = false;
  bool closed = false;  // the engine thread is gone; Post refuses

  // --- Thread-safe ---
  std::atomic<int64_t> unfinished_jobs{0};  // accepted Generate jobs not yet done (the bounded queue)
  mutable std::mutex stats_mu;
  Stats stats;
  std::thread thread;

  bool Post(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (closed) return false;
      inbox.push_back(std::move(fn));
    }
    cv.notify_one();
    return true;
  }

  void Run();
  bool Step();  // false: nothing could run
  void Shutdown();
  // `verifies`: this step's verify segments, (drafts verified, drafts accepted) each.
  void UpdateStats(double step_seconds, int64_t tokens_in, int64_t tokens_out,
                   const std::vector<std::pair<int64_t, int64_t>>& verifies = {});

  // Waiting for the shared store (engine thread).
  // UNAVAILABLE from a shared store: another server holds the session, or the store cannot be reached.
  bool StoreBusy(const absl::Status& st) const { return Shared() && st.code() == absl::StatusCode::kUnavailable; }
  // Runs call.attempt now, and again later (parked in `waiting`) while it answers StoreBusy.
  void TryOrWait(WaitingCall call);
  // TryOrWait for an operation with a result: `done` gets op's last one (or why waiting ended).
  template <typename T>
  void RunOrWait(std::function<absl::StatusOr<T>()> op, std::function<void(absl::StatusOr<T>)> done) {
    auto result = std::make_shared<absl::StatusOr<T>>(absl::UnknownError("not run"));
    WaitingCall call;
    call.attempt = [op = std::move(op), result] {
      *result = op();
      return result->status();
    };
    call.done = [done = std::move(done), result](const absl::Status& st) {
      st.ok() ? done(std::move(*result)) : done(st);
    };
    TryOrWait(std::move(call));
  }
  // Tries the waiting calls that are due.
  void RetryWaiting();
  // The earliest next_try_ms of a waiting call or turn (SteadyMs); nullopt: none.
  std::optional<int64_t> NextRetryMs() const;
  // The status a call ends with when waiting did not help: `last`, saying how long it waited and why
  // it gives up.
  absl::Status GaveUp(const absl::Status& last, int64_t waited_ms);

  // Sessions and state.
  SessionStore* store() const { return options.store.get(); }
  bool TurnDurable() const { return store() && options.durability == Durability::kTurn; }
  bool Shared() const { return store() && store()->Shared(); }
  // The session, or the error its id answers: NOT_FOUND naming `field`, or the unreadable blob's.
  // With a shared store a session this server does not hold is read from the store (Adopt).
  absl::StatusOr<Session*> Lookup(const std::string& id, const std::string& field);
  // Lookup, and with a shared store this server's lease on it (UNAVAILABLE while a peer holds it).
  absl::StatusOr<Session*> LookupToChange(const std::string& id, const std::string& field);
  // Registers (or refreshes) `id` from the header of its blob in the store, offloaded.
  absl::StatusOr<Session*> Adopt(const std::string& id, const std::string& field);
  // ALREADY_EXISTS (naming `field`) when `id` is a session, readable or not, here or (shared store)
  // in the store. With a shared store OK leaves this server holding the new id's lease.
  absl::Status CheckNew(const std::string& id, const std::string& field);
  // Drops a session from the table (and its lease).
  void Forget(const std::string& id);
  // With a shared store, a session just created, forked or imported is offloaded and its lease
  // released: the balancer may route its next call to another server, which must be able to take it.
  void LetGo(Session& s);
  // The store holds `state` as s's current state.
  void MarkStored(Session& s, const SessionSnapshot& state);
  // Every session: the table's, and with a shared store every session in it.
  std::vector<SessionInfo> ListAll();
  int64_t Position(const Session& s) const { return s.slot >= 0 ? pool->position(s.slot) : s.position; }
  SessionInfo Info(const Session& s) const;
  std::string NewSessionId();
  absl::Status CheckCapacity() const;
  // RESOURCE_EXHAUSTED naming the quota when the tenant's sessions (this server's) would exceed it
  // with `new_sessions` more sessions holding `new_bytes` more state bytes.
  absl::Status CheckQuota(const SessionQuota& quota, int64_t new_sessions, int64_t new_bytes) const;
  // Writes `state` as s's blob (s keeps any slot it has); on OK s.stored.
  absl::Status Persist(Session& s, const SessionSnapshot& state);
  // The session's blob from the store, decoded and checked against this model and backend.
  absl::StatusOr<SessionSnapshot> LoadStored(const Session& s) const;
  absl::Status Offload(Session& s);
  absl::Status MakeResident(Session& s);
  void FreeSlot(Session& s);
  absl::StatusOr<SessionSnapshot> Snapshot(Session& s);
  absl::Status Place(Session& s, const SessionSnapshot& state);
  // FAILED_PRECONDITION when the state's KV cache exceeds the backend's max_context.
  absl::Status CheckFits(const SessionSnapshot& state) const;
  // At start: registers every session the store holds (offloaded), and the unreadable ones.
  absl::Status Recover();
  // Acknowledges the turns in to_commit that are due once their states are in the store (one group
  // commit); a turn whose write fails is undone (the slot reloaded from the store) and fails, unless
  // the store is only busy (StoreBusy) and the turn may still wait: then it is written again later.
  // `final`: every turn, and no more waiting (shutdown).
  void CommitTurns(bool final = false);
  // Offloads the resident sessions idle for options.release_idle_ms (shared stores: their leases go).
  void ReleaseIdle();
  int64_t last_idle_scan_ms = 0;  // engine thread only

  // Jobs.
  // `cache_points`: token counts into `tokens` where the prefix cache keeps the state too. A job for a
  // session another server holds, or while the store cannot be reached, waits (TryOrWait).
  void Accept(GenerateJob request, std::vector<int32_t> tokens, std::vector<int64_t> cache_points);
  // Accept's one try: OK when the job runs (then `request` is moved from), else the error it fails
  // with, or a StoreBusy status to wait on (then nothing changed).
  absl::Status TryAccept(GenerateJob& request, const std::vector<int32_t>& tokens,
                         const std::vector<int64_t>& cache_points);
  // A job entering prefill on an empty session starts from the longest cached prefix of its prompt.
  void StartFromPrefixCache(EngineJob& job, Session& s);
  // How many of the job's next `tokens` prompt tokens to feed: with the prefix cache, chunks end at
  // its boundaries (multiples of the interval, the prompt's end), where CachePrefix keeps the state.
  int64_t PrefillTake(const EngineJob& job, int64_t tokens) const;
  void CachePrefix(EngineJob& job, const Session& s);
  void Finish(EngineJob& job, const absl::Status& status, const std::string& reason);
  // The last turn of `s` when `request` resends it (expected_position where it started, the same
  // fingerprint, the session still where it ended); nullopt otherwise. Reads an offloaded session's
  // blob.
  std::optional<TurnRecord> ResentTurn(Session& s, const GenerateJob& request);
  // Answers `request` with a stored turn's outcome instead of running it.
  void Replay(GenerateJob& request, const TurnRecord& turn);
  // The draft tokens a decoding job may verify per step (0: it does not speculate).
  int DraftTokens(const EngineJob& job) const;
  // For each decode job of this step, up to k[d] drafts (0: none) after its context: prompt lookup,
  // or one batched call of the draft model (engine_drafts.cc).
  std::vector<std::vector<int32_t>> ProposeDrafts(const std::vector<EngineJob*>& decoding, const std::vector<int>& k);
  // The draft lane `job` follows from now on (reset when newly taken).
  int TakeDraftLane(EngineJob& job);
  // A sampled token goes out: the context, the text (held back for stop strings), the
  // log-probabilities from `raw` (the logits before sampling). An error: the caller finishes the job.
  absl::Status EmitToken(EngineJob& job, int32_t token, const std::vector<float>& raw);
  // After a verify step of `drafts` whose first `rows` logits rows (each [vocab]) are at `logits`:
  // samples row by row while the drafts are accepted, emitting them, and keeps exactly the emitted
  // tokens in the slot (Backend::KeepVerified). The row after the last accepted draft is the job's
  // next logits, or the token it drew the job's next (drawn). May finish the job.
  // Returns the drafts it emitted.
  int64_t SettleVerify(EngineJob& job, int slot, const std::vector<int32_t>& drafts, const float* logits);
  void Emit(EngineJob& job, const std::string& text, std::vector<int32_t> ids,
            const std::vector<TokenLogprobs>& logprobs = {}) {
    if (text.empty() && ids.empty()) return;
    if (job.request.n > 1) {
      job.request.on_choice_output(job.choice, text, ids, logprobs);
    } else {
      job.out_text += text;
      job.out_ids.insert(job.out_ids.end(), ids.begin(), ids.end());
      job.request.on_output(text, ids, logprobs);
    }
  }
  // n > 1, once the prompt is in: the other n - 1 choices as jobs waiting for a slot, each to
  // start from a copy of this job's state and logits.
  void SpawnChoices(EngineJob& job);
  // `token`'s log-probability under `logits` (taken before sampling changes them), and the `top` most
  // likely tokens'.
  TokenLogprobs Logprobs(const std::vector<float>& logits, int32_t token, int top);
  // A token's text inside running text, cached; "\\xNN" escapes for part of a UTF-8 character.
  const std::string& TokenText(int32_t token);

  // Control operations (engine thread).
  absl::StatusOr<SessionInfo> Create(std::string id, const SessionQuota& quota);
  absl::Status Delete(const std::string& id);
  absl::StatusOr<SessionInfo> Fork(const std::string& source_id, std::string new_id, const SessionQuota& quota);
  absl::StatusOr<std::string> Export(const std::string& id);
  absl::StatusOr<SessionInfo> Import(const std::string& blob, std::string id, const SessionQuota& quota);
};

}  // namespace steady

#endif  // STEADY_SERVER_ENGINE_ENGINE_IMPL_H_
