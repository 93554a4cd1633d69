// UTF-8 in and out: code points, strict validity, and the replacement decoding that Hugging Face's
// tokenizers use for byte tokens (WHATWG's, which is also Rust's String::from_utf8_lossy).
#ifndef STEADY_BASE_UTF8_H_
#define STEADY_BASE_UTF8_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace steady {

constexpr char32_t kReplacementChar = 0xFFFD;

// Strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF, no truncated sequences.
bool IsValidUtf8(std::string_view text);

// The code point that starts at text[at] and its length in bytes. An ill-formed sequence reads as
// U+FFFD with length 1 (callers that need strictness check IsValidUtf8 first).
char32_t DecodeUtf8At(std::string_view text, size_t at, size_t* length);

void AppendUtf8(char32_t c, std::string* out);
inline std::string Utf8(char32_t c) {
  std::string s;
  AppendUtf8(c, &s);
  return s;
}

// `bytes` as UTF-8 text, each maximal ill-formed subsequence replaced by one U+FFFD (the WHATWG
// Encoding Standard's decoder, which JavaScript's TextDecoder and Rust's from_utf8_lossy follow).
std::string Utf8Lossy(std::string_view bytes);

// True when `text` ends inside a UTF-8 sequence that more bytes could complete.
bool EndsInPartialUtf8(std::string_view text);

}  // namespace steady

#endif  // STEADY_BASE_UTF8_H_
