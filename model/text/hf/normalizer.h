// tokenizer.json's "normalizer": text to text, applied to the text between added tokens.
#ifndef STEADY_MODEL_TEXT_HF_NORMALIZER_H_
#define STEADY_MODEL_TEXT_HF_NORMALIZER_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/text/hf/json_fields.h"
#include "model/text/hf/regex.h"
#include "model/text/hf/unicode.h"

namespace steady::hf {

struct Normalizer {
  enum class Kind { kSequence, kForm, kLowercase, kStripAccents, kStrip, kReplace, kPrepend };
  Kind kind = Kind::kSequence;
  std::vector<Normalizer> steps;  // kSequence
  NormalForm form = NormalForm::kNFC;
  bool strip_left = false, strip_right = false;  // kStrip
  // kReplace: a literal (pattern.String) or a regex (pattern.Regex) and what replaces it;
  // kPrepend: `content` is the prefix.
  std::optional<std::string> literal;
  std::optional<Regex> regex;
  std::string content;
};

// `j` is the "normalizer" object (not null); `path` names it in errors.
absl::StatusOr<Normalizer> ParseNormalizer(const Json& j, const std::string& path);
absl::StatusOr<std::string> Normalize(const Normalizer& n, std::string text);

// {"String": s} or {"Regex": r} (Split, Replace): the literal, or the translated, compiled regex.
absl::Status ParsePattern(const Json& owner, const std::string& path, std::optional<std::string>* literal,
                          std::optional<Regex>* regex);
// Every occurrence of the pattern replaced by `content`, as JavaScript's replaceAll.
absl::StatusOr<std::string> ReplaceAll(const std::optional<std::string>& literal, const std::optional<Regex>& regex,
                                       const std::string& text, const std::string& content);

}  // namespace steady::hf

#endif  // STEADY_MODEL_TEXT_HF_NORMALIZER_H_
