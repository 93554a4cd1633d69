// The sentencepiece implementation of Tokenizer (model/text/sentencepiece.cc).
#ifndef STEADY_MODEL_TEXT_SENTENCEPIECE_H_
#define STEADY_MODEL_TEXT_SENTENCEPIECE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/text/tokenizer.h"

namespace steady {

// A sentencepiece model file, through the steady_spm module. NOT_FOUND for a missing file.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePiece(const std::string& model_path);

}  // namespace steady

#endif  // STEADY_MODEL_TEXT_SENTENCEPIECE_H_
