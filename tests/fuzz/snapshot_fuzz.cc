// libFuzzer target for what ImportSession parses (docs/security.md, "Fuzzing"): the signed-snapshot
// envelope (server/store/snapshot_signing.h) and the snapshot decoder (server/store/snapshot.h) on any bytes.
// Any input must give a clean error or a snapshot that fits the shape it was checked against; a
// snapshot that decodes must encode back to the same bytes.
//
// The first input byte picks the shape (constant state, a KV cache, two growing layers) and a mode:
//   bit 0: replace the blob's last 8 bytes by the right checksum, so mutations get past the checksum
//          into the fields behind it;
//   bit 1: build a valid snapshot from the input (id, position, state values), encode it, then apply
//          the input's byte edits (offset, xor) to it: deep coverage without a seed corpus.
// The target also feeds the bytes to VerifySignedSnapshot under a fixed key, and checks that a blob
// signed here verifies.
//
// Build and run: tools/fuzz/run.sh snapshot_fuzz [SECONDS] (docs/fuzzing.md).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "base/check.h"
#include "server/store/snapshot.h"
#include "server/store/snapshot_signing.h"

namespace {

steady::SnapshotShape Shape(int which) {
  steady::SnapshotShape s;
  s.fingerprint = 0x5354454144590001ull;
  switch (which % 3) {
    case 0:  // constant state
      s.fixed_floats = 24;
      s.growth_per_token = {0, 0};
      break;
    case 1:  // one softmax layer: 8 floats a token
      s.fixed_floats = 8;
      s.growth_per_token = {8, 0};
      break;
    default:  // two growing layers
      s.fixed_floats = 0;
      s.growth_per_token = {4, 12};
  }
  return s;
}

// A valid snapshot made from `in` (id length and bytes, position, state values), then edited: each
// remaining 3 bytes are (offset, offset, xor) applied to the encoded blob.
std::string BuildAndEdit(const steady::SnapshotShape& shape, std::string_view in) {
  auto take = [&in](size_t n) {
    std::string_view out = in.substr(0, std::min(n, in.size()));
    in.remove_prefix(out.size());
    return out;
  };
  steady::SessionSnapshot s;
  const std::string_view id_len = take(1);
  s.session_id = std::string(take(id_len.empty() ? 0 : uint8_t(id_len[0]) % 48));
  const std::string_view pos = take(1);
  s.position = pos.empty() ? 0 : uint8_t(pos[0]) % 5;
  auto value = [&take]() {
    const std::string_view b = take(1);
    return b.empty() ? 0.5f : (float(uint8_t(b[0])) - 128.0f) / 16.0f;
  };
  s.fixed.resize(shape.fixed_floats);
  for (float& f : s.fixed) f = value();
  for (uint64_t g : shape.growth_per_token) {
    s.growing.emplace_back(g * uint64_t(s.position));
    for (float& f : s.growing.back()) f = value();
  }
  std::string blob = steady::EncodeSnapshot(s, shape.fingerprint);
  while (in.size() >= 3) {
    const std::string_view e = take(3);
    const size_t at = (uint8_t(e[0]) | size_t(uint8_t(e[1])) << 8) % blob.size();
    blob[at] = char(blob[at] ^ e[2]);
  }
  return blob;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const steady::SnapshotShape shape = Shape(data[0] >> 2);
  std::string blob(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] & 2) blob = BuildAndEdit(shape, blob);
  if ((data[0] & 1) && blob.size() >= 8) {
    const uint64_t sum = steady::Hash64(std::string_view(blob).substr(0, blob.size() - 8));
    std::memcpy(blob.data() + blob.size() - 8, &sum, 8);  // little-endian hosts only, as the format
  }

  auto header = steady::DecodeSnapshotHeader(blob, shape);
  auto snapshot = steady::DecodeSnapshot(blob, shape);
  if (snapshot.ok()) {
    // A header decodes whenever the whole blob does, and they agree.
    STEADY_CHECK(header.ok());
    STEADY_CHECK(header->session_id == snapshot->session_id && header->position == snapshot->position);
    STEADY_CHECK(snapshot->fixed.size() == shape.fixed_floats);
    STEADY_CHECK(snapshot->growing.size() == shape.growth_per_token.size());
    for (size_t l = 0; l < shape.growth_per_token.size(); ++l) {
      STEADY_CHECK(snapshot->growing[l].size() == uint64_t(snapshot->position) * shape.growth_per_token[l]);
    }
    STEADY_CHECK(steady::EncodeSnapshot(*snapshot, shape.fingerprint) == blob);
  }

  // The envelope: a fixed key and tenant; anything not signed here must be refused.
  static const std::string key(32, 'k');
  auto inner = steady::VerifySignedSnapshot(key, "tenant", blob);
  if (inner.ok()) STEADY_CHECK(steady::SignSnapshot(key, "tenant", *inner) == blob);
  const std::string signed_here = steady::SignSnapshot(key, "tenant", blob);
  auto back = steady::VerifySignedSnapshot(key, "tenant", signed_here);
  STEADY_CHECK(back.ok() && *back == blob);
  STEADY_CHECK(!steady::VerifySignedSnapshot(key, "other", signed_here).ok());
  return 0;
}
