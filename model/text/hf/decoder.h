// tokenizer.json's "decoder": token strings back to text.
#ifndef STEADY_MODEL_TEXT_HF_DECODER_H_
#define STEADY_MODEL_TEXT_HF_DECODER_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/text/hf/json_fields.h"
#include "model/text/hf/regex.h"

namespace steady::hf {

struct Decoder {
  enum class Kind { kSequence, kByteLevel, kMetaspace, kByteFallback, kFuse, kStrip, kReplace };
  Kind kind = Kind::kSequence;
  std::vector<Decoder> steps;  // kSequence
  std::string replacement;     // kMetaspace
  bool strip_first_space = true;  // kMetaspace: unless prepend_scheme is "never"
  std::string content;         // kStrip: the character stripped; kReplace: the replacement
  int start = 0, stop = 0;     // kStrip
  std::optional<std::string> literal;  // kReplace
  std::optional<Regex> regex;
};

absl::StatusOr<Decoder> ParseDecoder(const Json& j, const std::string& path);

// Runs the chain over `tokens`. A top-level ByteLevel passes the added tokens (`is_added`) through
// as they are; inside a Sequence it maps every token (the JS port's rule).
absl::Status DecodeChain(const Decoder& d, const std::function<bool(const std::string&)>& is_added,
                         std::vector<std::string>* tokens);

// transformers' clean_up_tokenization: " ." -> "." and the like, " n't" -> "n't", " 's" -> "'s".
std::string CleanUpTokenization(std::string text);

}  // namespace steady::hf

#endif  // STEADY_MODEL_TEXT_HF_DECODER_H_
