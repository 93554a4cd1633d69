// The split regexes of tokenizer.json, run with PCRE2. The files write them for Oniguruma (the Rust
// library's engine); TranslatePattern rewrites one into PCRE2 syntax with the meaning Hugging Face's
// JS port gives it (its rewrite_oniguruma_to_js): \s is White_Space, \d is \p{Nd}, \w is Unicode,
// `.` stops at \n only, (?i:...) folds ASCII letters only, X{n,m}+ repeats the bounded group (not
// PCRE2's possessive), atomic groups are plain ones. Nested classes and class intersections are
// refused with an error rather than approximated.
#ifndef STEADY_MODEL_TEXT_HF_REGEX_H_
#define STEADY_MODEL_TEXT_HF_REGEX_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace steady::hf {

// INVALID_ARGUMENT naming the offset for a construct the translation does not support.
absl::StatusOr<std::string> TranslatePattern(std::string_view oniguruma);

// A compiled pattern (JIT when PCRE2 has it); thread-safe: each search brings its own match data.
class Regex {
 public:
  // `pcre2_pattern` is PCRE2 syntax (already translated, or a quoted literal).
  static absl::StatusOr<Regex> Compile(const std::string& pcre2_pattern);
  // The pattern for a literal string (tokenizer.json's {"String": ...}).
  static std::string Quote(std::string_view literal);

  // Calls on_match(begin, end) for each match, left to right, as JavaScript's matchAll does: after
  // an empty match the search resumes one character later. INTERNAL if PCRE2 fails (a resource
  // limit), never for "no match".
  absl::Status ForEachMatch(std::string_view text, const std::function<void(size_t, size_t)>& on_match) const;

 private:
  struct Code;
  std::shared_ptr<const Code> code_;
};

}  // namespace steady::hf

#endif  // STEADY_MODEL_TEXT_HF_REGEX_H_
