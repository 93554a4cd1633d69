// A session's state as a self-describing, versioned, checksummed blob (format: docs/session-snapshot.md),
// the model fingerprint that ties a blob to the weights it was computed with, and atomic file writes
// for session_dir.
#ifndef STEADY_SERVER_STORE_SNAPSHOT_H_
#define STEADY_SERVER_STORE_SNAPSHOT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/file_io.h"  // WriteFileAtomic, ReadWholeFile for snapshot files
#include "model/backend/backend.h"
#include "model/decoder/model.h"
#include "model/decoder/state_pool.h"
#include "server/store/turn_record.h"

namespace steady {

inline constexpr char kSnapshotMagic[8] = {'S', 'T', 'D', 'Y', 'S', 'N', 'A', 'P'};
// Written: 2 (the state, then the last turn's outcome). Read: 1 (no last turn) and 2.
inline constexpr uint32_t kSnapshotVersion = 2;

// One session's state, outside the slot pool.
struct SessionSnapshot {
  std::string session_id;
  int64_t position = 0;  // tokens absorbed
  int64_t created_unix_ms = 0;
  int64_t last_used_unix_ms = 0;
  std::vector<float> fixed;                  // [fixed floats per slot] every layer's fixed state
  std::vector<std::vector<float>> growing;   // [layers][position * growth per token of the layer]
  std::optional<TurnRecord> last_turn;       // the turn that led to this state (none: version 1, or
                                             // a state no turn of this session made)
  int64_t StateBytes() const;
};

// What a snapshot must look like to fit a model: the slot size and how each layer's growing state
// grows per token (0 for constant-state layers; softmax: its KV floats per token).
struct SnapshotShape {
  uint64_t fingerprint = 0;
  uint64_t fixed_floats = 0;
  std::vector<uint64_t> growth_per_token;  // [layers]
};

// 64-bit hash of config.json as the model sees it (ModelConfig::ToJson), every layer's weights and
// every mechanism tensor. Computed once at engine start (memory speed). Embedding, final norm and
// LM head are not reachable through Model's public API and are not covered (see the format doc).
uint64_t ModelFingerprint(const Model& model);
// The fingerprint plus slot geometry; measures growth per token by feeding one token to a scratch slot.
SnapshotShape MeasureSnapshotShape(const Model& model);

// Non-cryptographic 64-bit hash over bytes (8 bytes per step; any single changed 8-byte word changes
// the result). Used for the fingerprint and the blob checksum.
uint64_t Hash64(std::string_view bytes, uint64_t seed = 0);

SessionSnapshot CaptureSlot(Backend& backend, int slot);
// Writes the snapshot's state and position into `slot` (shape already checked by DecodeSnapshot).
void RestoreSlot(const SessionSnapshot& snapshot, Backend& backend, int slot);

std::string EncodeSnapshot(const SessionSnapshot& snapshot, uint64_t fingerprint);

// A snapshot's header: everything but the state (docs/session-snapshot.md, "Format").
struct SnapshotHeader {
  std::string session_id;
  int64_t position = 0;
  int64_t created_unix_ms = 0;
  int64_t last_used_unix_ms = 0;
  uint64_t fixed_floats = 0;
  std::vector<uint64_t> growing_floats;  // [layers]
  size_t bytes = 0;                      // the header's length; the state follows
  int64_t StateBytes() const;
};
// Parses the header at the start of `blob`, with the checks of DecodeSnapshot that need no more than
// the header (magic, version, fingerprint, sizes). No checksum: a prefix of the blob suffices, so a
// shared store can list its sessions without reading their states. MaxSnapshotHeaderBytes bytes
// always suffice.
absl::StatusOr<SnapshotHeader> DecodeSnapshotHeader(std::string_view blob, const SnapshotShape& shape);
size_t MaxSnapshotHeaderBytes(const SnapshotShape& shape);
// Refuses, never crashes: INVALID_ARGUMENT (not a snapshot, unsupported version, inconsistent
// lengths, non-finite state), DATA_LOSS (checksum mismatch: corrupted), FAILED_PRECONDITION
// ("model fingerprint": made with other weights, or a state that does not fit this model).
absl::StatusOr<SessionSnapshot> DecodeSnapshot(std::string_view blob, const SnapshotShape& shape);

}  // namespace steady

#endif  // STEADY_SERVER_STORE_SNAPSHOT_H_
