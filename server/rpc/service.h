// The gRPC service (proto/steady/v1/inference.proto) over the Engine, on gRPC's callback API.
//
// Handlers validate the request, enqueue it to the engine and return; the engine's callbacks (on the
// engine thread) fill the response and finish the call. Generate is a write reactor with one write in
// flight: engine output is merged into the next message under the reactor's mutex and written when
// the previous write completes. A client cancel or deadline only sets the job's cancelled flag; the
// engine ends the job within one step and the reactor finishes when the engine reports it done.
#ifndef STEADY_SERVER_RPC_SERVICE_H_
#define STEADY_SERVER_RPC_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <shared_mutex>
#include <string>
#include <string_view>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "model/constrain/constraint_cache.h"
#include "model/text/chat_format.h"
#include "server/auth/api_keys.h"
#include "server/auth/tenant_limits.h"
#include "server/engine/engine.h"
#include "server/metrics/metrics.h"
#include "steady/v1/inference.grpc.pb.h"

namespace steady {

// Limits the RPC layer enforces itself (the engine enforces EngineOptions).
struct ServiceOptions {
  std::string model_name;                          // reported by GetModelInfo
  int64_t max_stop_strings = 16;
  int64_t max_stop_bytes = 256;                    // per stop string
  int64_t max_snapshot_bytes = int64_t(1) << 32;   // ImportSession
  int64_t export_chunk_bytes = int64_t(1) << 20;   // ExportSession message size (gRPC's default cap is 4 MiB)
  // Security (docs/security.md). Null: every caller is anonymous and sees every session.
  std::shared_ptr<Authenticator> auth;              // --api-keys
  std::string snapshot_key;                         // --snapshot-key-file's bytes; empty: exports unsigned
  bool allow_unsigned_imports = false;              // --allow-unsigned-imports (with a snapshot key)
  // How chat messages become the prompt (the model directory's Jinja template or config.json's small
  // format: model/text/chat_format.h). Null: the model config's small format.
  std::shared_ptr<const ChatFormat> chat;
};
constexpr int64_t kMaxSessionIdBytes = 128;
// Generate's initial metadata for a session turn, sent when the engine takes the turn up: the
// session's position before it (decimal), the expected_position that makes a resend of the turn
// exact (docs/api.md, Generate and "Retries").
inline constexpr std::string_view kStartPositionHeader = "x-steady-start-position";

// absl and gRPC share the canonical status codes: the mapping is one to one and keeps the message.
grpc::Status ToGrpcStatus(const absl::Status& status);

// INVALID_ARGUMENT naming `field` unless `id` is 1-128 bytes of [A-Za-z0-9_.-] not starting with '.'
// (ids name files in the session directory). An empty id passes when `allow_empty`.
absl::Status ValidateSessionId(const std::string& field, const std::string& id, bool allow_empty);
// INVALID_ARGUMENT "FIELD: not valid UTF-8 (byte N, 0xXX)" at the first byte of `text` that does not
// begin a well-formed UTF-8 character.
absl::Status CheckUtf8(const std::string& field, std::string_view text);
// The request's fields checked against the limits, the sampling fields it leaves out taken from
// `defaults` (SamplingFromRequest), and chat messages rendered with `chat` into the prompt.
// INVALID_ARGUMENT naming the field.
// The identity of a Generate request's output: a hash of every field but expected_position and
// all_or_nothing (deterministic serialization; never 0). A resend of a session's last turn matches it.
uint64_t RequestFingerprint(const v1::GenerateRequest& request);
absl::StatusOr<GenerateJob> JobFromRequest(const v1::GenerateRequest& request, const EngineOptions& engine,
                                           const ServiceOptions& options, const ChatFormat& chat,
                                           const GenerationDefaults& defaults);
// request_sampling.cc. job->max_tokens and job->sampling's temperature, top_k, top_p and
// repetition_penalty: the request's value where it sets the field (checked: INVALID_ARGUMENT naming
// it; top_p and repetition_penalty 0 mean off, 1), else the checkpoint's default (max_tokens held to
// `max_new_tokens`), else what `job` holds.
absl::Status SamplingFromRequest(const v1::GenerateRequest& request, const GenerationDefaults& defaults,
                                 int64_t max_new_tokens, GenerateJob* job);
// The values `job` samples with, for the final GenerateResponse.
void ToProto(const GenerateJob& job, v1::Sampling* out);
// ModelInfo.generation_defaults_json: the fields `defaults` sets, named as GenerateRequest names them.
std::string GenerationDefaultsJson(const GenerationDefaults& defaults);
// The request's response_format compiled into job->constraint (left null for "" and "text"), through
// `cache`. INVALID_ARGUMENT naming response_format and the problem (a schema keyword and where it
// is, a grammar's line and column).
absl::Status SetConstraint(const v1::ResponseFormat& format, ConstraintCache& cache, GenerateJob* job);

void ToProto(const SessionInfo& info, v1::Session* out);
// UNAVAILABLE for calls that arrive while the server drains.
absl::Status ShuttingDownError();

class InferenceService final : public v1::Inference::CallbackService {
 public:
  InferenceService(Engine& engine, Metrics& metrics, ServiceOptions options);

  // Graceful drain: every later call fails with UNAVAILABLE without reaching the engine; running
  // Generate calls go on (a rolling restart cuts no turn short) until CancelRunning. After this
  // returns no new handler touches the engine, so it may be destroyed once the gRPC server has shut
  // down.
  void BeginDrain();
  // Asks every running Generate to stop: it ends at the next step boundary with finish_reason
  // "cancelled", the tokens generated so far in the session.
  void CancelRunning();

  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context, const v1::GetModelInfoRequest* request,
                                         v1::ModelInfo* response) override;
  grpc::ServerUnaryReactor* CreateSession(grpc::CallbackServerContext* context,
                                          const v1::CreateSessionRequest* request, v1::Session* response) override;
  grpc::ServerUnaryReactor* GetSession(grpc::CallbackServerContext* context, const v1::GetSessionRequest* request,
                                       v1::Session* response) override;
  grpc::ServerUnaryReactor* ListSessions(grpc::CallbackServerContext* context,
                                         const v1::ListSessionsRequest* request,
                                         v1::ListSessionsResponse* response) override;
  grpc::ServerUnaryReactor* DeleteSession(grpc::CallbackServerContext* context,
                                          const v1::DeleteSessionRequest* request,
                                          v1::DeleteSessionResponse* response) override;
  grpc::ServerUnaryReactor* ForkSession(grpc::CallbackServerContext* context, const v1::ForkSessionRequest* request,
                                        v1::Session* response) override;
  // service_generate.cc
  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(grpc::CallbackServerContext* context,
                                                           const v1::GenerateRequest* request) override;
  // service_transfer.cc
  grpc::ServerWriteReactor<v1::SessionChunk>* ExportSession(grpc::CallbackServerContext* context,
                                                            const v1::ExportSessionRequest* request) override;
  grpc::ServerReadReactor<v1::ImportSessionRequest>* ImportSession(grpc::CallbackServerContext* context,
                                                                   v1::Session* response) override;

 private:
  // Runs `enqueue` (which calls the engine) unless draining; false when draining.
  template <typename F>
  bool Enqueue(F&& enqueue) {
    std::shared_lock lock(gate_);
    if (draining_) return false;
    enqueue();
    return true;
  }
  // Finishes a unary call with `status` and counts it.
  grpc::ServerUnaryReactor* Finish(grpc::ServerUnaryReactor* reactor, const char* rpc, const absl::Status& status);

  // --- Tenants (null tenant: no --api-keys). Inside the engine a tenant's session "x" is "tenant~x".
  // The caller's tenant from its `authorization` metadata; UNAUTHENTICATED (counted) without a valid
  // key. OK with null when the server has no keys.
  absl::StatusOr<std::shared_ptr<const Tenant>> Authorize(grpc::CallbackServerContext* context);
  static std::string Internal(const Tenant* tenant, const std::string& id);
  static SessionQuota QuotaOf(const Tenant* tenant);
  // `status` as the tenant may see it: its own prefix removed from the message; quota refusals counted.
  absl::Status Outward(const Tenant* tenant, const absl::Status& status);
  // The session as the tenant sees it.
  static void ToProtoFor(const Tenant* tenant, const SessionInfo& info, v1::Session* out);
  // ImportSession: the snapshot inside `blob` once its signature checks (docs/security.md).
  absl::StatusOr<std::string> CheckSignature(const Tenant* tenant, std::string blob) const;
  // `id` when set, else a fresh random one.
  std::string SessionIdOrNew(const std::string& id);
  void TrackGenerate(const std::shared_ptr<std::atomic<bool>>& cancelled);
  void UntrackGenerate(const std::shared_ptr<std::atomic<bool>>& cancelled);

  // Constant after construction.
  Engine& engine_;
  Metrics& metrics_;
  const ServiceOptions options_;
  v1::ModelInfo model_info_;
  TenantLimits limits_;  // thread-safe
  // Compiled response formats (thread-safe); null when the tokenizer's token bytes could not be
  // derived, and then constraints_error_ says why.
  std::unique_ptr<ConstraintCache> constraints_;
  absl::Status constraints_error_;

  // Held shared while a handler enqueues to the engine, exclusively to start draining.
  std::shared_mutex gate_;
  bool draining_ = false;  // guarded by gate_

  std::mutex mu_;
  std::set<std::shared_ptr<std::atomic<bool>>> running_;  // guarded by mu_: cancel flags of live Generate calls
  std::mt19937_64 id_rng_;                                // guarded by mu_
};

}  // namespace steady

#endif  // STEADY_SERVER_RPC_SERVICE_H_
