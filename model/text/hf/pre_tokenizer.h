// tokenizer.json's "pre_tokenizer": normalized text to the words the model encodes one by one.
#ifndef STEADY_MODEL_TEXT_HF_PRE_TOKENIZER_H_
#define STEADY_MODEL_TEXT_HF_PRE_TOKENIZER_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/text/hf/json_fields.h"
#include "model/text/hf/regex.h"

namespace steady::hf {

// What a Split does with the pieces its pattern matches (the Rust library's names and meanings).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct PreTokenizer {
  enum class Kind { kSequence, kSplit, kByteLevel, kDigits, kMetaspace, kWhitespace, kWhitespaceSplit };
  Kind kind = Kind::kSequence;
  std::vector<PreTokenizer> steps;  // kSequence
  // kSplit (and kWhitespace, a fixed Split)
  std::optional<std::string> literal;
  std::optional<Regex> regex;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  // kByteLevel
  bool add_prefix_space = false;
  bool use_regex = true;
  // kDigits
  bool individual_digits = false;
  // kMetaspace
  std::string replacement = "\xE2\x96\x81";  // U+2581
  enum class Prepend { kAlways, kFirst, kNever } prepend = Prepend::kAlways;
  bool split = true;
};

// `j` is the "pre_tokenizer" object (not null). ByteLevel must be the last step: its words are
// handed to the model as raw bytes (the model maps them to its byte alphabet), and *byte_level says
// whether it is there.
absl::StatusOr<PreTokenizer> ParsePreTokenizer(const Json& j, const std::string& path, bool* byte_level);

// Hands each word of `text` to `sink`, in order (a word lives only during its call). `section` is
// the index of the text among the pieces the added tokens cut the input into (Metaspace's
// prepend_scheme "first" prepends only in piece 0).
using WordSink = std::function<void(std::string_view)>;
absl::Status PreTokenize(const PreTokenizer& p, std::string_view text, int section, const WordSink& sink);

}  // namespace steady::hf

#endif  // STEADY_MODEL_TEXT_HF_PRE_TOKENIZER_H_
