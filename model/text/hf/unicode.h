// Unicode operations the tokenizer.json pipeline needs, over utf8proc's tables (no tables of our
// own): normalization forms, case mapping, character classes. Inputs are valid UTF-8.
#ifndef STEADY_MODEL_TEXT_HF_UNICODE_H_
#define STEADY_MODEL_TEXT_HF_UNICODE_H_

#include <string>
#include <string_view>

namespace steady::hf {

enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };
std::string NormalizeForm(std::string_view text, NormalForm form);

// JavaScript's String.prototype.toLowerCase (and Rust's str::to_lowercase): the full mapping, with
// U+0130 to "i\u0307" and a word-final capital sigma to U+03C2.
std::string Lowercase(std::string_view text);
// Simple (one-to-one) case mappings, for Jinja's upper/title/capitalize.
std::string UppercaseSimple(std::string_view text);
char32_t UpperOf(char32_t c);
char32_t LowerOf(char32_t c);

// Unicode's White_Space property (Rust's char::is_whitespace).
bool IsWhiteSpace(char32_t c);
// JavaScript's trim() set: WhiteSpace and LineTerminator (adds U+FEFF, lacks U+0085).
bool IsJsWhiteSpace(char32_t c);
bool IsAlphanumeric(char32_t c);   // general category L* or N*
bool IsNumeric(char32_t c);        // general category Nd, Nl or No (Rust's char::is_numeric)
bool IsMark(char32_t c);           // general category M*
bool IsPunctuation(char32_t c);    // general category P*

// Leading/trailing characters removed while `pred` holds.
std::string_view TrimStart(std::string_view text, bool (*pred)(char32_t));
std::string_view TrimEnd(std::string_view text, bool (*pred)(char32_t));

}  // namespace steady::hf

#endif  // STEADY_MODEL_TEXT_HF_UNICODE_H_
