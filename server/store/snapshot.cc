#include "server/store/snapshot.h"

#include <atomic>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>


#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "server/store/session_id.h"

namespace steady {

static_assert(std::endian::native == std::endian::little, "snapshots are little-endian; add byte swaps");

namespace {

constexpr uint64_t kMul1 = 0x9E3779B97F4A7C15ull, kMul2 = 0xC2B2AE3D27D4EB4Full;
// Header: magic, version, fingerprint, id length; then id, position, times, counts; then floats,
// then the checksum. Fields before the id have fixed offsets.
constexpr size_t kMinSnapshotBytes = 8 + 4 + 8 + 4 + 8 * 3 + 8 + 4 + 8;
constexpr int64_t kMaxPosition = int64_t(1) << 40;

template <typename T>
std::string_view AsBytes(const std::vector<T>& v) {
  return {reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T)};
}

template <typename T>
void Put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

// Bounds-checked little-endian reads over a blob.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  template <typename T>
  bool Read(T* value) {
    if (data_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(value, data_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool ReadBytes(size_t n, std::string_view* out) {
    if (data_.size() - pos_ < n) return false;
    *out = data_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  size_t left() const { return data_.size() - pos_; }

 private:
  std::string_view data_;
  size_t pos_ = 0;
};

absl::Status Invalid(const std::string& what) { return absl::InvalidArgumentError(absl::StrCat("snapshot: ", what)); }

}  // namespace

uint64_t Hash64(std::string_view bytes, uint64_t seed) {
  uint64_t h = seed ^ (uint64_t(bytes.size()) * kMul2);
  auto step = [&h](uint64_t w) { h = std::rotl(h ^ (w * kMul1), 31) * kMul2; };
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, bytes.data() + i, 8);
    step(w);
  }
  if (i < bytes.size()) {
    uint64_t w = 0;
    std::memcpy(&w, bytes.data() + i, bytes.size() - i);
    step(w);
  }
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCDull;
  h ^= h >> 33;
  h *= 0xC4CEB9FE1A85EC53ull;
  h ^= h >> 33;
  return h;
}

int64_t SessionSnapshot::StateBytes() const {
  int64_t floats = int64_t(fixed.size());
  for (const auto& g : growing) floats += int64_t(g.size());
  return floats * int64_t(sizeof(float));
}

uint64_t ModelFingerprint(const Model& model) {
  uint64_t h = Hash64(model.config().ToJson().dump());
  model.VisitWeightValues(
      [&](const float* values, size_t n) {
        h = Hash64(std::string_view(reinterpret_cast<const char*>(values), n * sizeof(float)), h);
      },
      [&](int l) {  // each layer's mechanism tensors after its weights
        std::vector<TensorToWrite> tensors;
        AppendAttentionTensors(model.layers()[l].attention, absl::StrCat("layer", l, "."), &tensors);
        for (const TensorToWrite& t : tensors) h = Hash64(AsBytes(t.values), Hash64(t.name, h));
      });
  return h;
}

SnapshotShape MeasureSnapshotShape(const Model& model) {
  SnapshotShape shape;
  shape.fingerprint = ModelFingerprint(model);
  StatePool scratch(model, 1);
  shape.fixed_floats = scratch.fixed_floats_per_slot();
  ForwardWorkspace ws;
  std::vector<float> logits;
  model.Forward({Segment{0, {0}, false}}, scratch, ws, &logits);
  for (int l = 0; l < model.config().num_layers; ++l) shape.growth_per_token.push_back(scratch.Growing(0, l).size());
  return shape;
}

SessionSnapshot CaptureSlot(Backend& backend, int slot) {
  SlotState state = backend.ReadSlot(slot);
  SessionSnapshot s;
  s.position = state.position;
  s.fixed = std::move(state.fixed);
  s.growing = std::move(state.growing);
  return s;
}

void RestoreSlot(const SessionSnapshot& snapshot, Backend& backend, int slot) {
  backend.WriteSlot(slot, SlotState{snapshot.position, snapshot.fixed, snapshot.growing});
}

std::string EncodeSnapshot(const SessionSnapshot& s, uint64_t fingerprint) {
  std::string out;
  out.reserve(kMinSnapshotBytes + s.session_id.size() + 8 * s.growing.size() + size_t(s.StateBytes()));
  out.append(kSnapshotMagic, 8);
  Put<uint32_t>(out, kSnapshotVersion);
  Put<uint64_t>(out, fingerprint);
  Put<uint32_t>(out, uint32_t(s.session_id.size()));
  out += s.session_id;
  Put<int64_t>(out, s.position);
  Put<int64_t>(out, s.created_unix_ms);
  Put<int64_t>(out, s.last_used_unix_ms);
  Put<uint64_t>(out, s.fixed.size());
  Put<uint32_t>(out, uint32_t(s.growing.size()));
  for (const auto& g : s.growing) Put<uint64_t>(out, g.size());
  out += AsBytes(s.fixed);
  for (const auto& g : s.growing) out += AsBytes(g);
  // Version 2: the last turn.
  Put<uint8_t>(out, s.last_turn ? 1 : 0);
  if (const std::optional<TurnRecord>& t = s.last_turn) {
    Put<uint64_t>(out, t->request_fingerprint);
    Put<int64_t>(out, t->start_position);
    Put<uint64_t>(out, t->token_ids.size());
    out += AsBytes(t->token_ids);
    Put<uint64_t>(out, t->text.size());
    out += t->text;
    Put<uint64_t>(out, t->finish_reason.size());
    out += t->finish_reason;
    for (int64_t v : {t->prompt_tokens, t->completion_tokens, t->session_position, t->cached_tokens,
                      t->drafted_tokens, t->accepted_tokens}) {
      Put<int64_t>(out, v);
    }
  }
  Put<uint64_t>(out, Hash64(out));
  return out;
}

namespace {

// The blob's format version (1 or 2), or why it is not a snapshot this server reads.
absl::StatusOr<uint32_t> CheckMagicAndVersion(std::string_view blob) {
  if (blob.size() < 12) return Invalid(absl::StrCat(blob.size(), " bytes, too short to be a session snapshot"));
  if (std::memcmp(blob.data(), kSnapshotMagic, 8) != 0) return Invalid("bad magic (not a Steady session snapshot)");
  uint32_t version;
  std::memcpy(&version, blob.data() + 8, 4);
  if (version < 1 || version > kSnapshotVersion) {
    return Invalid(absl::StrCat("format version ", version, " is not supported (this server reads versions 1 to ",
                                kSnapshotVersion, ")"));
  }
  return version;
}

// Version 2's last-turn section; every length checked against the bytes left before anything is
// allocated.
absl::Status ReadLastTurn(Reader& r, std::optional<TurnRecord>* out) {
  uint8_t present;
  if (!r.Read(&present) || present > 1) return Invalid("last turn: truncated or bad flag");
  if (present == 0) return absl::OkStatus();
  TurnRecord t;
  uint64_t n;
  std::string_view bytes;
  if (!r.Read(&t.request_fingerprint) || !r.Read(&t.start_position) || !r.Read(&n) ||
      n > r.left() / sizeof(int32_t) || !r.ReadBytes(n * sizeof(int32_t), &bytes)) {
    return Invalid("last turn: truncated token ids");
  }
  t.token_ids.resize(n);
  if (n > 0) std::memcpy(t.token_ids.data(), bytes.data(), bytes.size());
  for (std::string* text : {&t.text, &t.finish_reason}) {
    if (!r.Read(&n) || n > r.left() || !r.ReadBytes(n, &bytes)) return Invalid("last turn: truncated text");
    *text = std::string(bytes);
  }
  for (int64_t* v : {&t.prompt_tokens, &t.completion_tokens, &t.session_position, &t.cached_tokens,
                     &t.drafted_tokens, &t.accepted_tokens}) {
    if (!r.Read(v)) return Invalid("last turn: truncated usage");
  }
  if (t.start_position < 0 || t.start_position > t.session_position || t.session_position > kMaxPosition) {
    return Invalid(absl::StrCat("last turn: positions ", t.start_position, " to ", t.session_position, " out of range"));
  }
  *out = std::move(t);
  return absl::OkStatus();
}

}  // namespace

int64_t SnapshotHeader::StateBytes() const {
  uint64_t floats = fixed_floats;
  for (uint64_t g : growing_floats) floats += g;
  return int64_t(floats * sizeof(float));
}

size_t MaxSnapshotHeaderBytes(const SnapshotShape& shape) {
  return 12 + 8 + 4 + kMaxSessionKeyBytes + 3 * 8 + 8 + 4 + 8 * shape.growth_per_token.size();
}

absl::StatusOr<SnapshotHeader> DecodeSnapshotHeader(std::string_view blob, const SnapshotShape& shape) {
  if (absl::Status st = CheckMagicAndVersion(blob).status(); !st.ok()) return st;
  Reader r(blob.substr(12));
  SnapshotHeader h;
  uint64_t fingerprint;
  uint32_t id_len, layers;
  std::string_view id;
  if (!r.Read(&fingerprint) || !r.Read(&id_len)) return Invalid("truncated header");
  if (fingerprint != shape.fingerprint) {
    return absl::FailedPreconditionError(absl::StrCat(
        "snapshot: model fingerprint ", absl::Hex(fingerprint, absl::kZeroPad16), " differs from this model's ",
        absl::Hex(shape.fingerprint, absl::kZeroPad16), " (made with other weights or config)"));
  }
  if (id_len > kMaxSessionKeyBytes || !r.ReadBytes(id_len, &id)) return Invalid(absl::StrCat("session id length ", id_len));
  h.session_id = std::string(id);
  if (!r.Read(&h.position) || !r.Read(&h.created_unix_ms) || !r.Read(&h.last_used_unix_ms) ||
      !r.Read(&h.fixed_floats) || !r.Read(&layers)) {
    return Invalid("truncated header");
  }
  if (h.position < 0 || h.position > kMaxPosition) return Invalid(absl::StrCat("position ", h.position, " out of range"));
  if (h.fixed_floats != shape.fixed_floats || layers != shape.growth_per_token.size()) {
    return absl::FailedPreconditionError(absl::StrCat("snapshot: state of ", h.fixed_floats, " fixed floats over ",
                                                      layers, " layers does not fit this model (", shape.fixed_floats,
                                                      " over ", shape.growth_per_token.size(), ")"));
  }
  h.growing_floats.resize(layers);
  for (uint32_t l = 0; l < layers; ++l) {
    if (!r.Read(&h.growing_floats[l])) return Invalid("truncated header");
    // position <= 2^40 and growth per token is a slot-sized number: no overflow.
    if (h.growing_floats[l] != uint64_t(h.position) * shape.growth_per_token[l]) {
      return Invalid(absl::StrCat("layer ", l, ": ", h.growing_floats[l], " growing floats for position ", h.position,
                                  " (expected ", uint64_t(h.position) * shape.growth_per_token[l], ")"));
    }
  }
  h.bytes = blob.size() - r.left();
  return h;
}

absl::StatusOr<SessionSnapshot> DecodeSnapshot(std::string_view blob, const SnapshotShape& shape) {
  absl::StatusOr<uint32_t> version = CheckMagicAndVersion(blob);
  if (!version.ok()) return version.status();
  if (blob.size() < kMinSnapshotBytes) return absl::DataLossError(absl::StrCat("snapshot: truncated (", blob.size(), " bytes)"));
  uint64_t stored_checksum;
  std::memcpy(&stored_checksum, blob.data() + blob.size() - 8, 8);
  const std::string_view body = blob.substr(0, blob.size() - 8);
  if (Hash64(body) != stored_checksum) {
    return absl::DataLossError("snapshot: checksum mismatch (the blob is corrupted or truncated)");
  }
  auto header = DecodeSnapshotHeader(body, shape);
  if (!header.ok()) return header.status();
  Reader r(body.substr(header->bytes));
  SessionSnapshot s;
  s.session_id = header->session_id;
  s.position = header->position;
  s.created_unix_ms = header->created_unix_ms;
  s.last_used_unix_ms = header->last_used_unix_ms;
  auto read_floats = [&](uint64_t n, std::vector<float>* out) {
    std::string_view bytes;
    if (n > r.left() / sizeof(float) || !r.ReadBytes(n * sizeof(float), &bytes)) return false;
    out->resize(n);
    if (n > 0) std::memcpy(out->data(), bytes.data(), bytes.size());
    for (float x : *out) {
      if (!std::isfinite(x)) return false;
    }
    return true;
  };
  if (!read_floats(header->fixed_floats, &s.fixed)) return Invalid("fixed state truncated or not finite");
  s.growing.resize(header->growing_floats.size());
  for (size_t l = 0; l < s.growing.size(); ++l) {
    if (!read_floats(header->growing_floats[l], &s.growing[l])) {
      return Invalid(absl::StrCat("layer ", l, ": growing state truncated or not finite"));
    }
  }
  if (*version >= 2) {
    if (absl::Status st = ReadLastTurn(r, &s.last_turn); !st.ok()) return st;
    // A turn that did not lead to this state cannot be replayed over it: forgotten.
    if (s.last_turn && s.last_turn->session_position != s.position) s.last_turn.reset();
  }
  if (r.left() != 0) return Invalid(absl::StrCat(r.left(), " unexpected bytes after the state"));
  return s;
}

}  // namespace steady
