// ExportSession (server streaming) and ImportSession (client streaming): a session snapshot moved
// in chunks.
#include <algorithm>
#include <atomic>
#include <functional>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/rpc/service.h"
#include "server/store/snapshot_signing.h"

namespace steady {

namespace {

// Writes the engine's snapshot blob in chunks of `chunk_bytes`, one write in flight.
class ExportReactor final : public grpc::ServerWriteReactor<v1::SessionChunk> {
 public:
  ExportReactor(Metrics& metrics, int64_t chunk_bytes) : metrics_(metrics), chunk_bytes_(size_t(chunk_bytes)) {}

  // Engine thread (or the handler, for a refused request).
  void OnSnapshot(absl::StatusOr<std::string> blob) {
    std::lock_guard lock(mu_);
    if (!blob.ok()) {
      FinishLocked(blob.status());
      return;
    }
    blob_ = *std::move(blob);
    WriteNextLocked();
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard lock(mu_);
    if (!ok) {
      FinishLocked(absl::CancelledError("the client cancelled the call"));
      return;
    }
    WriteNextLocked();
  }

  void OnDone() override { delete this; }

 private:
  void WriteNextLocked() {
    if (offset_ >= blob_.size() && offset_ > 0) {
      FinishLocked(absl::OkStatus());
      return;
    }
    // An empty snapshot still goes out as one (empty) chunk, so the client always sees a message.
    const size_t n = std::min(chunk_bytes_, blob_.size() - offset_);
    chunk_.set_data(blob_.substr(offset_, n));
    offset_ += std::max<size_t>(n, 1);
    StartWrite(&chunk_);
  }

  void FinishLocked(const absl::Status& status) {
    metrics_.CountRequest("ExportSession", absl::StatusCodeToString(status.code()));
    Finish(ToGrpcStatus(status));
  }

  Metrics& metrics_;
  const size_t chunk_bytes_;
  std::mutex mu_;
  std::string blob_;         // guarded by mu_
  size_t offset_ = 0;        // guarded by mu_: bytes of blob_ written (or in flight)
  v1::SessionChunk chunk_;   // guarded by mu_: the message in flight
};

// Collects the chunks, then hands the whole snapshot to the engine.
class ImportReactor final : public grpc::ServerReadReactor<v1::ImportSessionRequest> {
 public:
  using SubmitFn = std::function<bool(ImportReactor*)>;  // false: draining

  // A call refused up front (`refused` not OK) finishes at once without reading.
  ImportReactor(Metrics& metrics, int64_t max_bytes, v1::Session* response, const absl::Status& refused, SubmitFn submit)
      : metrics_(metrics), max_bytes_(max_bytes), response_(response), submit_(std::move(submit)) {
    if (!refused.ok()) {
      FinishWith(refused);
      return;
    }
    StartRead(&request_);
  }

  const std::string& session_id() const { return session_id_; }
  std::string TakeBlob() { return std::move(blob_); }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client closed its side, or the call is gone
      if (cancelled_.load()) {
        FinishWith(absl::CancelledError("the client cancelled the call"));
      } else if (!submit_(this)) {
        FinishWith(ShuttingDownError());
      }
      return;
    }
    if (first_) {
      session_id_ = request_.session_id();
      first_ = false;
    } else if (!request_.session_id().empty() && request_.session_id() != session_id_) {
      FinishWith(absl::InvalidArgumentError("session_id: set in a later message to a different value"));
      return;
    }
    if (int64_t(blob_.size() + request_.data().size()) > max_bytes_) {
      FinishWith(absl::ResourceExhaustedError(absl::StrCat("data: the snapshot exceeds ", max_bytes_, " bytes")));
      return;
    }
    blob_.append(request_.data());
    StartRead(&request_);
  }

  // Engine thread: the imported session, as the caller sees it.
  void OnImported(absl::StatusOr<v1::Session> session) {
    if (session.ok()) *response_ = *std::move(session);
    FinishWith(session.status());
  }

  void FinishWith(const absl::Status& status) {
    metrics_.CountRequest("ImportSession", absl::StatusCodeToString(status.code()));
    Finish(ToGrpcStatus(status));
  }

  void OnCancel() override { cancelled_.store(true); }
  void OnDone() override { delete this; }

 private:
  Metrics& metrics_;
  const int64_t max_bytes_;
  v1::Session* const response_;
  const SubmitFn submit_;
  std::atomic<bool> cancelled_{false};
  // Touched only by reactions, which gRPC runs one at a time for a read-only stream.
  v1::ImportSessionRequest request_;
  bool first_ = true;
  std::string session_id_;
  std::string blob_;
};

}  // namespace

grpc::ServerWriteReactor<v1::SessionChunk>* InferenceService::ExportSession(grpc::CallbackServerContext* context,
                                                                            const v1::ExportSessionRequest* request) {
  auto* reactor = new ExportReactor(metrics_, options_.export_chunk_bytes);
  auto tenant = Authorize(context);
  if (!tenant.ok()) {
    reactor->OnSnapshot(tenant.status());
    return reactor;
  }
  if (absl::Status s = ValidateSessionId("session_id", request->session_id(), false); !s.ok()) {
    reactor->OnSnapshot(s);
    return reactor;
  }
  const bool queued = Enqueue([&] {
    engine_.ExportSession(Internal(tenant->get(), request->session_id()),
                          [this, reactor, t = *tenant](absl::StatusOr<std::string> blob) {
                            // Signed for the exporting tenant: only it can import the blob back.
                            if (blob.ok() && !options_.snapshot_key.empty()) {
                              blob = SignSnapshot(options_.snapshot_key, t ? t->name : "", *blob);
                            }
                            reactor->OnSnapshot(blob.ok() ? std::move(blob) : Outward(t.get(), blob.status()));
                          });
  });
  if (!queued) reactor->OnSnapshot(ShuttingDownError());
  return reactor;
}

grpc::ServerReadReactor<v1::ImportSessionRequest>* InferenceService::ImportSession(grpc::CallbackServerContext* context,
                                                                                   v1::Session* response) {
  // Authorized before the first byte is read: an unauthenticated client cannot make the server
  // buffer a snapshot.
  auto tenant = Authorize(context);
  return new ImportReactor(metrics_, options_.max_snapshot_bytes, response, tenant.status(),
                           [this, t = tenant.ok() ? *tenant : nullptr](ImportReactor* reactor) {
    const std::string& requested = reactor->session_id();
    if (absl::Status s = ValidateSessionId("session_id", requested, true); !s.ok()) {
      reactor->FinishWith(s);
      return true;
    }
    // The signature before anything parses the snapshot.
    auto blob = CheckSignature(t.get(), reactor->TakeBlob());
    if (!blob.ok()) {
      reactor->FinishWith(blob.status());
      return true;
    }
    const std::string id = Internal(t.get(), SessionIdOrNew(requested));
    return Enqueue([&] {
      engine_.ImportSession(
          *std::move(blob), id,
          [this, reactor, t](absl::StatusOr<SessionInfo> info) {
            if (info.ok()) {
              v1::Session session;
              ToProtoFor(t.get(), *info, &session);
              reactor->OnImported(session);
            } else {
              reactor->OnImported(Outward(t.get(), info.status()));
            }
          },
          QuotaOf(t.get()));
    });
  });
}

}  // namespace steady
