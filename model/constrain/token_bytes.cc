#include "model/constrain/token_bytes.h"

#include "absl/strings/str_cat.h"

namespace steady {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // what sentencepiece decodes a lone byte piece to

}  // namespace

absl::StatusOr<std::vector<std::string>> TokenByteStrings(const Tokenizer& tokenizer, int model_vocab) {
  const int n = tokenizer.vocab_size();
  if (n > model_vocab) {
    return absl::FailedPreconditionError(absl::StrCat("tokenizer has ", n, " pieces but the model only ", model_vocab));
  }
  // A piece that is a word of its own: decoded behind it, a piece keeps its leading space.
  auto sentinel = tokenizer.Encode("a");
  if (!sentinel.ok()) return sentinel.status();
  if (sentinel->size() != 1) return absl::FailedPreconditionError("tokenizer: \"a\" is not a single piece");
  auto sentinel_text = tokenizer.Decode(*sentinel);
  if (!sentinel_text.ok()) return sentinel_text.status();
  std::vector<std::string> out(model_vocab);
  for (int32_t id = 0; id < n; ++id) {
    auto text = tokenizer.Decode({(*sentinel)[0], id});
    if (!text.ok()) return text.status();
    if (text->compare(0, sentinel_text->size(), *sentinel_text) != 0) {
      return absl::InternalError(absl::StrCat("tokenizer: piece ", id, " changes the text before it"));
    }
    out[id] = text->substr(sentinel_text->size());
  }
  // Byte-fallback pieces: 256 consecutive ids whose printable ASCII members decode to their byte and
  // whose bytes >= 0x80 decode to the replacement character alone.
  for (int32_t base = 0; base + 256 <= n; ++base) {
    if (out[base + 'A'] != "A" || out[base + 'z'] != "z" || out[base + '0'] != "0" || out[base + 0x80] != kReplacement ||
        out[base + 0xFF] != kReplacement) {
      continue;
    }
    for (int b = 0; b < 256; ++b) out[base + b] = std::string(1, char(b));
    break;
  }
  // Any other piece still holding a replacement character stands for bytes we cannot know: never
  // allowed under a constraint.
  for (std::string& s : out) {
    if (s.find(kReplacement) != std::string::npos) s.clear();
  }
  return out;
}

absl::StatusOr<std::shared_ptr<const TokenVocabulary>> MakeTokenVocabulary(const Tokenizer& tokenizer, int model_vocab,
                                                                          std::vector<int32_t> end_tokens) {
  auto bytes = TokenByteStrings(tokenizer, model_vocab);
  if (!bytes.ok()) return bytes.status();
  for (int32_t t : end_tokens) {
    if (t >= 0 && t < model_vocab) (*bytes)[t].clear();
  }
  return std::make_shared<const TokenVocabulary>(*std::move(bytes), std::move(end_tokens));
}

}  // namespace steady
