// Each token's bytes, as the model's tokenizer writes them inside running text: what a constraint
// matches. Derived through Tokenizer's public API only (decoding behind a one-piece sentinel, as
// TextStreamer does), with sentencepiece's byte-fallback pieces <0x00>..<0xFF> found by their
// decoded text and mapped to their single byte.
#ifndef STEADY_MODEL_CONSTRAIN_TOKEN_BYTES_H_
#define STEADY_MODEL_CONSTRAIN_TOKEN_BYTES_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/constrain/token_tables.h"
#include "model/text/tokenizer.h"

namespace steady {

// [model_vocab] byte strings: empty for control tokens and for ids past the tokenizer's vocabulary.
absl::StatusOr<std::vector<std::string>> TokenByteStrings(const Tokenizer& tokenizer, int model_vocab);

// The vocabulary a constraint compiles against: TokenByteStrings, with `end_tokens` (the model's
// EOS ids) allowed once the constrained text is complete.
absl::StatusOr<std::shared_ptr<const TokenVocabulary>> MakeTokenVocabulary(const Tokenizer& tokenizer, int model_vocab,
                                                                          std::vector<int32_t> end_tokens);

}  // namespace steady

#endif  // STEADY_MODEL_CONSTRAIN_TOKEN_BYTES_H_
