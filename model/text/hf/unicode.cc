#include "model/text/hf/unicode.h"

#include <utf8proc.h>

#include <cstdlib>

#include "base/utf8.h"

namespace steady::hf {
namespace {

utf8proc_category_t Category(char32_t c) { return utf8proc_category(utf8proc_int32_t(c)); }

bool IsCased(char32_t c) {
  const auto cat = Category(c);
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}

// Unicode's Case_Ignorable, from the general categories plus the word-internal punctuation that
// Word_Break gives it (apostrophes, periods, colons, middle dots).
bool IsCaseIgnorable(char32_t c) {
  switch (Category(c)) {
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_SK:
      return true;
    default:
      break;
  }
  return c == 0x27 || c == 0x2E || c == 0x3A || c == 0xB7 || c == 0x387 || c == 0x2018 || c == 0x2019 ||
         c == 0x2024 || c == 0x2027;
}

// Final_Sigma (Unicode 3.13): a cased letter before (skipping case-ignorables), none after.
bool FinalSigma(std::string_view text, size_t at, size_t len) {
  bool before = false;
  for (size_t i = at; i > 0;) {
    size_t start = i - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    size_t l;
    const char32_t c = DecodeUtf8At(text, start, &l);
    i = start;
    if (IsCaseIgnorable(c)) continue;
    before = IsCased(c);
    break;
  }
  if (!before) return false;
  for (size_t i = at + len; i < text.size();) {
    size_t l;
    const char32_t c = DecodeUtf8At(text, i, &l);
    i += l;
    if (IsCaseIgnorable(c)) continue;
    return !IsCased(c);
  }
  return true;
}

}  // namespace

namespace {

std::string MapForm(std::string_view text, int options) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          utf8proc_ssize_t(text.size()), &out, utf8proc_option_t(options));
  if (n < 0) return std::string(text);  // only for invalid UTF-8, which callers have refused
  std::string result(reinterpret_cast<const char*>(out), size_t(n));
  std::free(out);
  return result;
}

}  // namespace

std::string NormalizeForm(std::string_view text, NormalForm form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::kNFC: options |= UTF8PROC_COMPOSE; break;
    case NormalForm::kNFD: options |= UTF8PROC_DECOMPOSE; break;
    case NormalForm::kNFKC: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormalForm::kNFKD: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  // ASCII is unchanged by every form, and no character composes with the one before an ASCII
  // character or reorders across it: only the stretches that hold non-ASCII characters (with the
  // ASCII character before them, a possible base for combining marks) go through utf8proc.
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    size_t k = pos;
    while (k < text.size() && static_cast<unsigned char>(text[k]) < 0x80) ++k;
    if (k == text.size()) {
      out.append(text.substr(pos));
      break;
    }
    const size_t start = k > pos ? k - 1 : k;
    size_t end = k;
    while (end < text.size() && static_cast<unsigned char>(text[end]) >= 0x80) ++end;
    out.append(text.substr(pos, start - pos));
    out += MapForm(text.substr(start, end - start), options);
    pos = end;
  }
  return out;
}

char32_t UpperOf(char32_t c) { return char32_t(utf8proc_toupper(utf8proc_int32_t(c))); }
char32_t LowerOf(char32_t c) { return char32_t(utf8proc_tolower(utf8proc_int32_t(c))); }

std::string Lowercase(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    size_t len;
    const char32_t c = DecodeUtf8At(text, i, &len);
    if (c < 0x80) {
      out.push_back(c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : char(c));
    } else if (c == 0x130) {
      out += "i\xCC\x87";  // SpecialCasing: U+0130 -> U+0069 U+0307
    } else if (c == 0x3A3) {
      AppendUtf8(FinalSigma(text, i, len) ? 0x3C2 : 0x3C3, &out);
    } else {
      AppendUtf8(LowerOf(c), &out);
    }
    i += len;
  }
  return out;
}

std::string UppercaseSimple(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    size_t len;
    AppendUtf8(UpperOf(DecodeUtf8At(text, i, &len)), &out);
    i += len;
  }
  return out;
}

bool IsWhiteSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool IsJsWhiteSpace(char32_t c) {
  if (c == 0xFEFF) return true;
  if (c == 0x85) return false;
  return IsWhiteSpace(c) || Category(c) == UTF8PROC_CATEGORY_ZS;
}

bool IsAlphanumeric(char32_t c) {
  const auto cat = Category(c);
  return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
         (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}

bool IsNumeric(char32_t c) {
  const auto cat = Category(c);
  return cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO;
}

bool IsMark(char32_t c) {
  const auto cat = Category(c);
  return cat >= UTF8PROC_CATEGORY_MN && cat <= UTF8PROC_CATEGORY_ME;
}

bool IsPunctuation(char32_t c) {
  const auto cat = Category(c);
  return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}

std::string_view TrimStart(std::string_view text, bool (*pred)(char32_t)) {
  size_t i = 0;
  while (i < text.size()) {
    size_t len;
    if (!pred(DecodeUtf8At(text, i, &len))) break;
    i += len;
  }
  return text.substr(i);
}

std::string_view TrimEnd(std::string_view text, bool (*pred)(char32_t)) {
  size_t end = text.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    size_t len;
    if (!pred(DecodeUtf8At(text, start, &len))) break;
    end = start;
  }
  return text.substr(0, end);
}

}  // namespace steady::hf
