// The engine: one thread owns the model, the state pool and every session. RPC handlers only call
// the thread-safe methods below, which enqueue work and return at once; results come back through
// callbacks that run ON THE ENGINE THREAD and must not block (post to a reactor, signal, return).
//
// Each engine step (a pure decision by the scheduler, server/engine/scheduler.h) advances every decoding
// session by one token in one batched Model::Forward and spends a token budget on chunked prefill of
// new prompts, so a long prompt never stalls the others for more than one chunk.
#ifndef STEADY_SERVER_ENGINE_ENGINE_H_
#define STEADY_SERVER_ENGINE_ENGINE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/decoder/cpu_weights.h"
#include "model/constrain/constraint.h"
#include "model/decoder/model.h"
#include "model/generate.h"
#include "model/sampling/sampling.h"
#include "model/text/tokenizer.h"
#include "server/store/session_store.h"

namespace steady {

// When a session's changes reach the store (docs/durability.md).
enum class Durability {
  kTurn,      // before each is acknowledged: a finished Generate, CreateSession, ForkSession,
              // ImportSession, DeleteSession (a crash loses nothing acknowledged)
  kShutdown,  // on offload and at a clean shutdown only (a crash loses the resident sessions)
};

struct EngineOptions {
  int64_t state_memory_bytes = int64_t(1) << 30;  // --state-memory: sizes the resident slot pool
  // Where sessions are offloaded and persisted (--session-dir: a DirectoryStore); null: nowhere,
  // sessions end with the process and are capped at the slot count.
  std::shared_ptr<SessionStore> store;
  Durability durability = Durability::kTurn;      // --durability (with a store)
  int max_queue = 1024;                           // pending Generate jobs; beyond: RESOURCE_EXHAUSTED
  int max_batch = 64;                             // decode rows per step
  int prefill_budget = 512;                       // prompt tokens per step (chunked prefill)
  int64_t max_prompt_tokens = 1 << 20;
  int64_t max_new_tokens = 1 << 16;
  int64_t max_sessions = 1 << 20;                 // resident + offloaded
  std::string device = "cpu";                     // --device cpu|cuda|auto (model/backend/backend.h)
  int cpu_threads = 0;                            // --threads: CPU kernels' threads (0: all cores)
  CpuWeights cpu_weights = CpuWeights::kAuto;     // --cpu-weights auto|stored|f32|bf16|q8|q4|q4k (model/decoder/cpu_weights.h)
  CpuGemm cpu_gemm = CpuGemm::kAuto;              // --cpu-gemm auto|simd|openblas
  int64_t max_context = 8192;                     // --max-context: KV cache tokens per session where
                                                  // the backend preallocates it (CUDA, softmax layers)
  // With a shared store: a resident session idle this long is offloaded and its lease released, so
  // the replica the balancer now routes it to can take it (after a failover, the way back home);
  // 0: never. steady-server sets half of --lease-ms.
  int64_t release_idle_ms = 0;
  // With a shared store: how long a call waits when the store answers UNAVAILABLE (another server
  // holds the session's lease, or the store cannot be reached) before it fails with that status. The
  // call waits parked, without holding up the steps of other sessions, and is tried again every
  // store_poll_ms and when the holder's lease would run out; a turn whose commit the store refused
  // stays unacknowledged (its session busy) and is written again the same way. 0: fail at once.
  // steady-server sets --takeover-wait-ms (docs/deployment.md).
  int64_t store_wait_ms = 0;
  int64_t store_poll_ms = 100;
  // The prefix cache (server/engine/prefix_cache.h): bytes of states kept after prompt prefixes (0: off),
  // taken at every multiple of prefix_cache_interval tokens and at each prompt's end.
  int64_t prefix_cache_bytes = 0;
  int prefix_cache_interval = 256;
  // Speculative decoding's server default (--speculative, --draft-tokens; docs/speculative.md): a
  // decoding job verifies up to draft_tokens drafts (prompt lookup, or the draft model's) in its
  // row's step, using the rows of max_batch the other decode rows leave. Only on a backend that
  // verifies (the CPU).
  Speculation speculative = Speculation::kOff;
  int draft_tokens = 4;
  // Prompt lookup also searches the last ngram_history tokens of a session's earlier turns (prompts
  // and outputs; --ngram-history), kept while the session is resident: at most slots x this many
  // tokens in all, dropped when a session is offloaded (drafts only propose: losing them costs
  // speed, never a token). 0: a turn's own tokens only.
  int64_t ngram_history = 4096;
  // --draft-model: the draft checkpoint (its tokenizer the target's: the caller checked,
  // CheckSameTokenizer), run on a CPU backend of the engine's own with one lane per slot; it
  // outlives the engine. Null: kDraft is refused.
  const Model* draft_model = nullptr;
  bool device_sampling = true;                    // on a GPU, draw tokens there when no row of a step
                                                  // needs the repetition penalty (only ids come back)
};

struct SessionInfo {
  std::string session_id;
  int64_t position = 0;        // tokens absorbed into the state
  int64_t state_bytes = 0;     // bytes the session's state holds now
  bool resident = true;        // in the slot pool (false: offloaded to the store)
  bool busy = false;           // a Generate is running on it
  int64_t created_unix_ms = 0;
  int64_t last_used_unix_ms = 0;
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t session_position = 0;
  int64_t cached_tokens = 0;  // of prompt_tokens, taken from the prefix cache instead of prefilled
  // Speculation: draft tokens verified, and those of them accepted (of completion_tokens).
  int64_t drafted_tokens = 0, accepted_tokens = 0;
  // The call was a resend of the session's last turn, answered with that turn's stored outcome
  // (GenerateJob::request_fingerprint) instead of being run: nothing changed.
  bool replayed = false;
};

// A token's text inside running text ("\\xNN" escapes for a piece of a UTF-8 character) and its
// log-probability under the model (before temperature, top-k, top-p and the repetition penalty).
struct TokenChoice {
  int32_t token = 0;
  std::string text;
  float logprob = 0.0f;
};
struct TokenLogprobs {
  TokenChoice chosen;
  std::vector<TokenChoice> top;  // the most likely tokens at that step, most likely first
};
inline constexpr int kMaxTopLogprobs = 20;
inline constexpr int kMaxChoices = 16;              // GenerateJob::n
inline constexpr int kMaxLogitBiasEntries = 1024;   // SamplingParams::logit_bias

// A tenant's limits on its sessions (docs/security.md). Its sessions' ids begin with TenantPrefix(tenant)
// ("alice~"); the engine thread checks the limits where sessions are made (Create, Fork, Import) and
// where a Generate starts, counting this server's sessions of the tenant. A Generate's tenant is also
// its fair-share group: each step shares its decode rows and prefill tokens equally among the tenants
// that have work (server/engine/scheduler.h).
struct SessionQuota {
  std::string tenant;           // empty: none (no limits, one shared group)
  int64_t max_sessions = 0;     // named sessions; 0: unlimited
  int64_t max_state_bytes = 0;  // their state bytes (resident or offloaded); 0: unlimited
};
// "tenant~": sessions of a tenant are "tenant~id" inside the engine and the store.
inline std::string TenantPrefix(const std::string& tenant) { return tenant.empty() ? "" : tenant + "~"; }

// One Generate call. Callbacks run on the engine thread.
struct GenerateJob {
  std::string session_id;  // empty: an ephemeral session, freed at the end
  std::string prompt;      // appended to the session
  // Instead of prompt (which must then be empty): its token ids. On an empty session BOS goes in
  // front unless they begin with it.
  std::vector<int32_t> prompt_token_ids;
  // Byte offsets into prompt where the prefix cache also keeps the state (the end of a chat's system
  // messages: where requests sharing a system prompt part ways), besides its regular boundaries.
  std::vector<size_t> cache_at_bytes;
  int64_t max_tokens = 0;  // 0: prefill only
  SamplingParams sampling;
  // Constrained decoding: every sampled token is one this allows next (an opaque compiled
  // constraint, model/constrain/constraint.h); null: free text. Ended by max_tokens: "length".
  std::shared_ptr<const Constraint> constraint;
  std::vector<std::string> stop;
  // Speculative decoding for this call; unset: the server's (EngineOptions). draft_tokens in
  // [1, kMaxDraftTokens].
  std::optional<Speculation> speculative;
  std::optional<int> draft_tokens;
  // Set: ABORTED (nothing changed) unless the session's position equals it (exactly-once retries),
  // or it is where the session's last turn started and request_fingerprint is that turn's: then the
  // call is answered with the turn's outcome (one on_output, then on_done with usage.replayed).
  std::optional<int64_t> expected_position;
  // What determines the output (the RPC layer hashes the request without expected_position and
  // all_or_nothing); kept with the session's last turn. 0: this turn can never be replayed.
  uint64_t request_fingerprint = 0;
  // A turn that does not complete (cancelled, its stream broken, an error, the engine stopping) is
  // rolled back, prompt included: the session stays where it was, as if the call never came. Costs
  // a copy of the session's state per turn. Unset: the tokens generated until then are kept.
  bool all_or_nothing = false;
  // -1: no log-probabilities; 0..kMaxTopLogprobs: each sampled token's, with this many of the most
  // likely tokens at its step.
  int top_logprobs = -1;
  SessionQuota quota;  // the caller's tenant: its fair share of steps, and its state-bytes limit
  // New text (never part of a stop string) and the ids sampled since the last call, with their
  // log-probabilities when asked for (else empty). Called once per sampled token (text may be empty
  // while held back) and once more for a released tail (ids empty).
  std::function<void(const std::string& text, const std::vector<int32_t>& token_ids,
                     const std::vector<TokenLogprobs>& logprobs)>
      on_output;
  // A session turn (session_id set), once, before its first output, when the engine takes it up:
  // the session's position before the turn (a replay: where the replayed turn started). A client
  // that loses the stream after this knows the expected_position that makes a resend exact.
  std::function<void(int64_t start_position)> on_start;
  // Exactly once, last: OK with finish_reason "stop" | "length" | "cancelled", or an error status.
  // With n > 1, after every choice has ended: usage sums their completion tokens (the prompt counted
  // once) and finish_reason is the last choice's.
  std::function<void(const absl::Status& status, const std::string& finish_reason, const Usage& usage)> on_done;
  // Choices: with n > 1 the prompt is prefilled once and its state forked n times (into ephemeral
  // sessions; the job's session_id must be empty); choice i samples with seed + i * 0x9E3779B97F4A7C15.
  // Each choice's output goes to on_choice_output with its index (instead of on_output) and its
  // end to on_choice_done, before on_done.
  int n = 1;
  std::function<void(int index, const std::string& text, const std::vector<int32_t>& token_ids,
                     const std::vector<TokenLogprobs>& logprobs)>
      on_choice_output;
  std::function<void(int index, const std::string& finish_reason)> on_choice_done;
  // Set by the RPC layer on client cancel / deadline; the engine stops this job within one step and
  // keeps the session consistent (tokens generated before the cancel are in the state).
  std::shared_ptr<std::atomic<bool>> cancelled = std::make_shared<std::atomic<bool>>(false);
};

class Engine {
 public:
  // Recovers the sessions in options.store (a session whose blob cannot be read answers DATA_LOSS),
  // then starts the engine thread.
  static absl::StatusOr<std::unique_ptr<Engine>> Start(const Model& model, const Tokenizer& tokenizer,
                                                       EngineOptions options);
  // Drains: finishes running jobs' current step, fails queued ones with UNAVAILABLE, ends running
  // ones with UNAVAILABLE at the step boundary (generated tokens stay in the session, a prompt cut
  // midway is rolled back), writes every session the store lacks (when there is one), joins the thread.
  // No method may be called once the destructor has begun.
  ~Engine();

  // Thread-safe. `done` runs on the engine thread.
  // Create, Fork and Import: RESOURCE_EXHAUSTED naming the quota when the new session would exceed it.
  void CreateSession(std::string session_id, std::function<void(absl::StatusOr<SessionInfo>)> done,
                     SessionQuota quota = {});
  void GetSession(std::string session_id, std::function<void(absl::StatusOr<SessionInfo>)> done);
  void ListSessions(std::function<void(std::vector<SessionInfo>)> done);
  void DeleteSession(std::string session_id, std::function<void(absl::Status)> done);
  // A new session with a copy of the state: O(state bytes).
  void ForkSession(std::string source_id, std::string new_id, std::function<void(absl::StatusOr<SessionInfo>)> done,
                   SessionQuota quota = {});
  // The session's state as a versioned, checksummed snapshot blob (server/store/snapshot.h).
  void ExportSession(std::string session_id, std::function<void(absl::StatusOr<std::string>)> done);
  void ImportSession(std::string blob, std::string session_id, std::function<void(absl::StatusOr<SessionInfo>)> done,
                     SessionQuota quota = {});
  // RESOURCE_EXHAUSTED at once (through on_done, on the engine thread, before its next step) when
  // options.max_queue jobs are accepted and not yet done; FAILED_PRECONDITION when
  // the session already runs a Generate; NOT_FOUND for an unknown session; INVALID_ARGUMENT naming
  // the field for bad parameters.
  void Submit(GenerateJob job);

  // A server about to stop (SIGTERM): every session is offloaded, and its lease released, as soon as
  // it is idle (a running Generate's once it is acknowledged), so other replicas take them over at
  // once instead of waiting for the leases to lapse. Calls go on being served.
  void Drain();

  // Snapshot of counters for /metrics (thread-safe).
  struct Stats {
    int64_t queue_depth = 0, sessions_resident = 0, sessions_offloaded = 0, state_bytes = 0;
    int64_t steps = 0, tokens_in = 0, tokens_out = 0;
    double last_step_seconds = 0;
    // Durability: turns made durable and turns whose write failed (undone, reported to the client);
    // at start, the recovery's duration, sessions recovered and sessions whose blob was unreadable.
    int64_t turns_committed = 0, commit_failures = 0;
    // Resends of a session's last turn answered with its stored outcome, and all_or_nothing turns
    // rolled back because they did not complete.
    int64_t turns_replayed = 0, turns_rolled_back = 0;
    // Shared stores: calls that waited for the store (a peer's lease, the store down), and those of
    // them that then failed (the holder was alive, or the store stayed away for store_wait_ms).
    int64_t store_waits = 0, store_waits_failed = 0;
    double recovery_seconds = 0;
    int64_t sessions_recovered = 0, sessions_unreadable = 0;
    // The prefix cache's counters (zeros when it is off).
    int64_t prefix_hits = 0, prefix_misses = 0, prefix_tokens_saved = 0, prefix_entries = 0, prefix_bytes = 0;
    // Speculative decoding: draft tokens verified and accepted, and the verify steps of one job by
    // the drafts they accepted (verify_accepted[a]: steps that accepted a drafts, a in
    // [0, kMaxDraftTokens]; empty until the first).
    int64_t drafted_tokens = 0, accepted_tokens = 0;
    std::vector<int64_t> verify_accepted;
  };
  Stats stats() const;
  const Model& model() const;
  const Tokenizer& tokenizer() const;
  const EngineOptions& options() const;
  // The backend the steps run on: "cpu" or "cuda (device name)".
  const std::string& device() const;

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace steady

#endif  // STEADY_SERVER_ENGINE_ENGINE_H_
