// libFuzzer target for the tokenizer on what clients send and what the server streams back
// (docs/security.md, "Fuzzing"): arbitrary bytes encoded, arbitrary ids decoded at once and streamed
// through TextStreamer, with the shipped tiny-softmax tokenizer. Encoding must not fail on any bytes
// (the prompt's UTF-8 is checked before, but the tokenizer must not rely on it), ids must be in the
// vocabulary, and streamed text must equal the whole decode whenever the ids decode.
//
// Build and run: tools/fuzz/run.sh tokenizer_fuzz [SECONDS] (docs/fuzzing.md).
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/check.h"
#include "model/text/tokenizer.h"

namespace {

const steady::Tokenizer& TheTokenizer() {
  static const steady::Tokenizer* tokenizer = [] {
    auto t = steady::Tokenizer::Load(STEADY_SOURCE_DIR "/models/tiny-softmax/tokenizer.model");
    STEADY_CHECK(t.ok());
    return t->release();
  }();
  return *tokenizer;
}

}  // namespace

// Streams `ids` through a TextStreamer; false when a call fails.
bool Stream(const steady::Tokenizer& tokenizer, const std::vector<int32_t>& ids, std::string* out) {
  steady::TextStreamer streamer(tokenizer);
  for (int32_t id : ids) {
    auto piece = streamer.Add(id);
    if (!piece.ok()) return false;
    *out += *piece;
  }
  auto tail = streamer.Flush();
  if (!tail.ok()) return false;
  *out += *tail;
  return true;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const steady::Tokenizer& tokenizer = TheTokenizer();
  // The first half as text: its ids are in the vocabulary, and streaming them gives the whole decode.
  const std::string text(reinterpret_cast<const char*>(data), size / 2);
  auto ids = tokenizer.Encode(text);
  if (ids.ok()) {
    for (int32_t id : *ids) STEADY_CHECK(id >= 0 && id < tokenizer.vocab_size());
    auto whole = tokenizer.Decode(*ids);
    STEADY_CHECK(whole.ok());
    std::string streamed;
    STEADY_CHECK(Stream(tokenizer, *ids, &streamed));
    STEADY_CHECK(streamed == *whole);
  }
  // The second half as ids (2 bytes each, some out of range on purpose): any id sequence decodes or
  // is refused, never crashes; an out-of-range id is refused.
  std::vector<int32_t> raw;
  bool in_range = true;
  for (size_t i = size / 2; i + 2 <= size; i += 2) {
    uint16_t v;
    std::memcpy(&v, data + i, 2);
    raw.push_back(int32_t(v % (tokenizer.vocab_size() + 16)) - 8);
    in_range = in_range && raw.back() >= 0 && raw.back() < tokenizer.vocab_size();
  }
  auto whole = tokenizer.Decode(raw);
  STEADY_CHECK(whole.ok() == in_range);
  std::string streamed;
  STEADY_CHECK(Stream(tokenizer, raw, &streamed) == in_range);
  return 0;
}
