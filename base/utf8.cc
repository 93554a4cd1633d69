#include "base/utf8.h"

namespace steady {
namespace {

// The WHATWG decoder's state for one sequence: how many continuation bytes are still needed and
// the range the next one must fall in (narrower after E0, ED, F0, F4: no overlongs, no surrogates).
struct Utf8Step {
  int needed = 0;
  char32_t code = 0;
  unsigned char lower = 0x80, upper = 0xBF;
};

// Feeds one byte. Returns 1 when a code point is complete (*out set), 0 when more bytes are needed,
// -1 when the sequence so far is ill-formed (the byte is to be fed again after the U+FFFD, unless it
// started the sequence: *reprocess says which).
int Feed(Utf8Step& s, unsigned char b, char32_t* out, bool* reprocess) {
  *reprocess = false;
  if (s.needed == 0) {
    if (b < 0x80) {
      *out = b;
      return 1;
    }
    if (b >= 0xC2 && b <= 0xDF) {
      s.needed = 1;
      s.code = b & 0x1F;
    } else if (b >= 0xE0 && b <= 0xEF) {
      if (b == 0xE0) s.lower = 0xA0;
      if (b == 0xED) s.upper = 0x9F;
      s.needed = 2;
      s.code = b & 0x0F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      if (b == 0xF0) s.lower = 0x90;
      if (b == 0xF4) s.upper = 0x8F;
      s.needed = 3;
      s.code = b & 0x07;
    } else {
      return -1;
    }
    return 0;
  }
  if (b < s.lower || b > s.upper) {
    s = Utf8Step();
    *reprocess = true;
    return -1;
  }
  s.lower = 0x80;
  s.upper = 0xBF;
  s.code = (s.code << 6) | (b & 0x3F);
  if (--s.needed > 0) return 0;
  *out = s.code;
  s = Utf8Step();
  return 1;
}

}  // namespace

bool IsValidUtf8(std::string_view text) {
  Utf8Step s;
  for (unsigned char b : text) {
    char32_t c;
    bool again;
    if (Feed(s, b, &c, &again) < 0) return false;
  }
  return s.needed == 0;
}

char32_t DecodeUtf8At(std::string_view text, size_t at, size_t* length) {
  Utf8Step s;
  for (size_t i = at; i < text.size(); ++i) {
    char32_t c;
    bool again;
    const int r = Feed(s, static_cast<unsigned char>(text[i]), &c, &again);
    if (r == 1) {
      *length = i - at + 1;
      return c;
    }
    if (r < 0) break;
  }
  *length = 1;
  return kReplacementChar;
}

void AppendUtf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(char(c));
  } else if (c < 0x800) {
    out->push_back(char(0xC0 | (c >> 6)));
    out->push_back(char(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(char(0xE0 | (c >> 12)));
    out->push_back(char(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(char(0x80 | (c & 0x3F)));
  } else {
    out->push_back(char(0xF0 | (c >> 18)));
    out->push_back(char(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(char(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(char(0x80 | (c & 0x3F)));
  }
}

std::string Utf8Lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  Utf8Step s;
  size_t start = 0;  // first byte of the sequence in progress
  for (size_t i = 0; i < bytes.size(); ++i) {
    char32_t c;
    bool again;
    const int r = Feed(s, static_cast<unsigned char>(bytes[i]), &c, &again);
    if (r == 1) {
      out.append(bytes.substr(start, i + 1 - start));
      start = i + 1;
    } else if (r < 0) {
      AppendUtf8(kReplacementChar, &out);
      if (again) --i;  // the byte that broke the sequence starts the next one
      start = i + 1;
    }
  }
  if (s.needed > 0) AppendUtf8(kReplacementChar, &out);
  return out;
}

bool EndsInPartialUtf8(std::string_view text) {
  for (size_t back = 1; back <= 4 && back <= text.size(); ++back) {
    const unsigned char c = text[text.size() - back];
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    const size_t need = (c & 0x80) == 0 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4;
    return need > back;
  }
  return false;
}

}  // namespace steady
