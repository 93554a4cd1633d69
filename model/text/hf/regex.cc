#include "model/text/hf/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cctype>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/utf8.h"

namespace steady::hf {
namespace {

// JavaScript's notion of a word character in the port (UNICODE_WORD_CHARS): inside a class the
// superscript digits and vulgar fractions are left out, as the port does.
constexpr char kWordInClass[] = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}";
constexpr char kWordOutside[] = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}";
constexpr char kHexDigits[] = "0-9A-Fa-f";

std::string WordClass(bool negated) { return absl::StrCat(negated ? "[^" : "[", kWordOutside, "]"); }

std::string WordBoundary(bool non_boundary) {
  const std::string w = WordClass(false);
  return non_boundary ? absl::StrCat("(?:(?<!", w, ")(?!", w, ")|(?<=", w, ")(?=", w, "))")
                      : absl::StrCat("(?:(?<!", w, ")(?=", w, ")|(?<=", w, ")(?!", w, "))");
}

bool IsHex(std::string_view s) {
  for (char c : s) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return !s.empty();
}

bool IsAsciiLetter(char32_t c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }

std::string Folded(char32_t c) {
  const char lower = char(std::tolower(int(c))), upper = char(std::toupper(int(c)));
  return absl::StrCat("[", std::string(1, lower), std::string(1, upper), "]");
}

// An escape's code point when it names one: \x{H..}, \xHH, \uHHHH; `len` gets the escape's length.
bool HexEscape(std::string_view p, size_t at, char32_t* c, size_t* len) {
  if (at + 1 >= p.size()) return false;
  const char kind = p[at + 1];
  std::string_view hex;
  if (kind == 'x' && at + 2 < p.size() && p[at + 2] == '{') {
    const size_t close = p.find('}', at + 3);
    if (close == std::string_view::npos) return false;
    hex = p.substr(at + 3, close - at - 3);
    *len = close + 1 - at;
  } else if (kind == 'x' && at + 4 <= p.size()) {
    hex = p.substr(at + 2, 2);
    *len = 4;
  } else if (kind == 'u' && at + 6 <= p.size()) {
    hex = p.substr(at + 2, 4);
    *len = 6;
  } else {
    return false;
  }
  if (!IsHex(hex) || hex.size() > 6) return false;
  *c = char32_t(std::stoul(std::string(hex), nullptr, 16));
  return true;
}

std::string CodePointEscape(char32_t c) { return absl::StrCat("\\x{", absl::Hex(uint32_t(c)), "}"); }

// The one-character escapes whose meaning is the same inside and outside a class; empty if `c` is
// not one of them.
std::string SimpleEscape(char32_t c) {
  switch (c) {
    case '\n': case 'n': return "\\n";
    case '\r': case 'r': return "\\r";
    case '\t': case 't': return "\\t";
    case '\f': case 'f': return "\\f";
    case '\v': case 'v': return "\\x{0B}";  // PCRE2's \v is a class (vertical space)
    case 'a': return "\\x{07}";
    case 'e': return "\\x{1B}";
  }
  return "";
}

absl::Status Unsupported(const char* what, size_t at) {
  return absl::InvalidArgumentError(absl::StrCat("regex: ", what, " at offset ", at, " is not supported"));
}

class Translator {
 public:
  explicit Translator(std::string_view p) : p_(p) {}

  absl::StatusOr<std::string> Run() {
    for (size_t i = 0; i < p_.size();) {
      size_t len = 0;
      const char32_t c = DecodeUtf8At(p_, i, &len);
      if (c == '\\' || c == '(') {
        if (absl::Status st = c == '\\' ? Escape(&i) : OpenGroup(&i); !st.ok()) return st;
        continue;
      }
      if (c == '[') {
        auto cls = Class(&i);
        if (!cls.ok()) return cls.status();
        EmitAtom(*cls);
        continue;
      }
      if (c == '{') {
        Brace(&i);
        continue;
      }
      switch (c) {
        case ']': EmitAtom("\\]"); break;
        case '.': EmitAtom("[^\\n]"); break;
        case '^': EmitAtom("(?:\\A|(?<=\\n))"); break;
        case '$': EmitAtom("(?:(?=\\n)|\\z)"); break;
        case ')':
          out_ += ')';
          if (groups_.empty()) return absl::InvalidArgumentError(absl::StrCat("regex: unbalanced ')' at offset ", i));
          atom_start_ = groups_.back().first;
          fold_ = groups_.back().second;
          groups_.pop_back();
          last_quantifier_ = false;
          break;
        case '|':
          out_ += '|';
          atom_start_ = -1;
          last_quantifier_ = false;
          break;
        case '}': EmitAtom("\\}"); break;
        case '+':
          if (!last_quantifier_) {  // a possessive '+' after a quantifier is dropped, as the port does
            out_ += '+';
            last_quantifier_ = true;
          }
          break;
        case '*': case '?':
          out_ += char(c);
          last_quantifier_ = true;
          break;
        default:
          EmitAtom(fold_ && IsAsciiLetter(c) ? Folded(c) : std::string(p_.substr(i, len)));
      }
      i += len;
    }
    if (!groups_.empty()) return absl::InvalidArgumentError("regex: unbalanced '('");
    return out_;
  }

 private:
  void EmitAtom(std::string_view text) {
    atom_start_ = int64_t(out_.size());
    out_ += text;
    last_quantifier_ = false;
  }

  absl::Status Escape(size_t* i) {
    const size_t at = *i;
    if (at + 1 >= p_.size()) return absl::InvalidArgumentError("regex: a trailing backslash");
    char32_t cp;
    size_t len;
    if ((p_[at + 1] == 'p' || p_[at + 1] == 'P') && at + 2 < p_.size() && p_[at + 2] == '{') {
      const size_t close = p_.find('}', at);
      if (close == std::string_view::npos) return absl::InvalidArgumentError("regex: unterminated \\p{");
      const std::string_view body = p_.substr(at + 3, close - at - 3);
      EmitAtom(body == "Word" ? WordClass(p_[at + 1] == 'P') : std::string(p_.substr(at, close + 1 - at)));
      *i = close + 1;
      return absl::OkStatus();
    }
    if (HexEscape(p_, at, &cp, &len)) {
      EmitAtom(fold_ && IsAsciiLetter(cp) ? Folded(cp) : CodePointEscape(cp));
      *i = at + len;
      return absl::OkStatus();
    }
    const char32_t next = DecodeUtf8At(p_, at + 1, &len);
    *i = at + 1 + len;
    if (next == 'G') return absl::OkStatus();
    if (std::string e = SimpleEscape(next); !e.empty()) {
      EmitAtom(e);
      return absl::OkStatus();
    }
    switch (next) {
      case 'A': EmitAtom("\\A"); return absl::OkStatus();
      case 'z': EmitAtom("\\z"); return absl::OkStatus();
      case 'Z': EmitAtom("\\Z"); return absl::OkStatus();
      case 'h': EmitAtom(absl::StrCat("[", kHexDigits, "]")); return absl::OkStatus();
      case 'H': EmitAtom(absl::StrCat("[^", kHexDigits, "]")); return absl::OkStatus();
      case 'w': EmitAtom(WordClass(false)); return absl::OkStatus();
      case 'W': EmitAtom(WordClass(true)); return absl::OkStatus();
      case 'd': EmitAtom("\\p{Nd}"); return absl::OkStatus();
      case 'D': EmitAtom("\\P{Nd}"); return absl::OkStatus();
      case 's': EmitAtom("\\p{White_Space}"); return absl::OkStatus();
      case 'S': EmitAtom("\\P{White_Space}"); return absl::OkStatus();
      case 'b': EmitAtom(WordBoundary(false)); return absl::OkStatus();
      case 'B': EmitAtom(WordBoundary(true)); return absl::OkStatus();
    }
    if (next < 0x80 && std::isalnum(int(next))) {
      EmitAtom(absl::StrCat("\\", std::string(1, char(next))));  // back references, \k<...>
    } else if (next < 0x80 && std::ispunct(int(next))) {
      EmitAtom(absl::StrCat("\\", std::string(1, char(next))));
    } else {
      EmitAtom(Utf8(next));
    }
    return absl::OkStatus();
  }

  absl::Status OpenGroup(size_t* i) {
    const std::string_view rest = p_.substr(*i);
    std::string_view prefix = "(";
    std::string_view emitted = "(";
    const bool inline_fold = rest.substr(0, 4) == "(?i:";
    if (inline_fold) {
      prefix = "(?i:";
      emitted = "(?:";
    } else {
      for (std::string_view candidate : {"(?<=", "(?<!", "(?:", "(?=", "(?!", "(?>"}) {
        if (rest.substr(0, candidate.size()) == candidate) {
          prefix = candidate;
          emitted = candidate == "(?>" ? std::string_view("(?:") : candidate;  // no atomic groups in the port
          break;
        }
      }
      if (prefix == "(" && rest.substr(0, 3) == "(?<") {  // a named group: (?<name>
        const size_t close = rest.find('>');
        if (close == std::string_view::npos) return Unsupported("a group", *i);
        prefix = emitted = rest.substr(0, close + 1);
      }
    }
    groups_.push_back({int64_t(out_.size()), fold_});
    if (inline_fold) fold_ = true;
    out_ += emitted;
    last_quantifier_ = false;
    *i += prefix.size();
    return absl::OkStatus();
  }

  // {n}, {n,}, {n,m}, {,m}: a quantifier when it follows an atom, else literal braces.
  void Brace(size_t* i) {
    const size_t close = p_.find('}', *i);
    std::string body = close == std::string_view::npos ? "" : std::string(p_.substr(*i + 1, close - *i - 1));
    bool ok = !body.empty() && atom_start_ >= 0;
    int commas = 0;
    for (char c : body) {
      if (c == ',') ++commas;
      else if (!std::isdigit(static_cast<unsigned char>(c))) ok = false;
    }
    ok = ok && commas <= 1 && body != ",";
    if (!ok) {
      EmitAtom("\\{");
      ++*i;
      return;
    }
    if (body[0] == ',') body = "0" + body;
    *i = close + 1;
    if (*i < p_.size() && (p_[*i] == '+' || p_[*i] == '*')) {
      // Oniguruma reads X{n,m}+ as (X{n,m})+, where PCRE2 would read a possessive quantifier.
      out_ = absl::StrCat(out_.substr(0, atom_start_), "(?:", out_.substr(atom_start_), "{", body, "})",
                          std::string(1, p_[*i]));
      ++*i;
    } else {
      absl::StrAppend(&out_, "{", body, "}");
    }
    last_quantifier_ = true;
  }

  absl::StatusOr<std::string> Class(size_t* i) {
    const size_t start = *i;
    size_t at = start + 1;
    const bool negated = at < p_.size() && p_[at] == '^';
    if (negated) ++at;
    const size_t first = at;
    std::string body;
    while (at < p_.size()) {
      size_t len = 0;
      const char32_t c = DecodeUtf8At(p_, at, &len);
      if (c == ']' && at != first) {
        *i = at + 1;
        if (fold_) AddFoldedLetters(&body);
        return absl::StrCat(negated ? "[^" : "[", body, "]");
      }
      if (c == ']') {
        body += "\\]";
      } else if (c == '\\') {
        auto piece = ClassEscape(&at);
        if (!piece.ok()) return piece.status();
        body += *piece;
        continue;
      } else if (c == '[') {
        static const std::pair<std::string_view, std::string_view> kPosix[] = {
            {"[:alpha:]", "\\p{Alphabetic}"}, {"[:alnum:]", "\\p{Alphabetic}\\p{Nd}"}, {"[:digit:]", "\\p{Nd}"},
            {"[:lower:]", "\\p{Lowercase}"},  {"[:upper:]", "\\p{Uppercase}"},         {"[:space:]", "\\p{White_Space}"},
            {"[:blank:]", "\\t\\p{Zs}"},      {"[:punct:]", "\\p{P}\\p{S}"},           {"[:cntrl:]", "\\p{Cc}"},
            {"[:xdigit:]", "0-9A-Fa-f"}};
        bool found = false;
        for (const auto& [name, replacement] : kPosix) {
          if (p_.substr(at, name.size()) == name) {
            body += replacement;
            at += name.size();
            found = true;
            break;
          }
        }
        if (!found) return Unsupported("a nested character class", at);
        continue;
      } else if (c == '&' && p_.substr(at, 2) == "&&") {
        return Unsupported("a class intersection (&&)", at);
      } else if (c == '^') {
        body += "\\^";
      } else {
        body += p_.substr(at, len);
      }
      at += len;
    }
    return absl::InvalidArgumentError(absl::StrCat("regex: unterminated character class at offset ", start));
  }

  absl::StatusOr<std::string> ClassEscape(size_t* at) {
    const size_t from = *at;
    if (from + 1 >= p_.size()) return absl::InvalidArgumentError("regex: a trailing backslash");
    char32_t cp;
    size_t len;
    if ((p_[from + 1] == 'p' || p_[from + 1] == 'P') && from + 2 < p_.size() && p_[from + 2] == '{') {
      const size_t close = p_.find('}', from);
      if (close == std::string_view::npos) return absl::InvalidArgumentError("regex: unterminated \\p{");
      const std::string_view body = p_.substr(from + 3, close - from - 3);
      *at = close + 1;
      if (body == "Word") {
        if (p_[from + 1] == 'P') return Unsupported("\\P{Word} inside a class", from);
        return std::string(kWordInClass);
      }
      return std::string(p_.substr(from, close + 1 - from));
    }
    if (HexEscape(p_, from, &cp, &len)) {
      *at = from + len;
      return CodePointEscape(cp);
    }
    const char32_t next = DecodeUtf8At(p_, from + 1, &len);
    *at = from + 1 + len;
    if (std::string e = SimpleEscape(next); !e.empty()) return e;
    switch (next) {
      case 'h': return std::string(kHexDigits);
      case 'w': return std::string(kWordInClass);
      case 'd': return std::string("\\p{Nd}");
      case 'D': return std::string("\\P{Nd}");
      case 's': return std::string("\\p{White_Space}");
      case 'S': return std::string("\\P{White_Space}");
      case 'W': case 'H': return Unsupported("a negated shorthand inside a class", from);
    }
    if (next < 0x80 && (std::isalnum(int(next)) || std::ispunct(int(next)))) {
      return absl::StrCat("\\", std::string(1, char(next)));
    }
    return Utf8(next);
  }

  // Inside (?i:...) a class also matches the other case of every ASCII letter it matches (the
  // port's ASCII-only folding): tests each letter against the class as written.
  void AddFoldedLetters(std::string* body) {
    auto cls = Regex::Compile(absl::StrCat("^[", *body, "]$"));
    if (!cls.ok()) return;  // the full pattern's compile reports the error
    std::string additions;
    for (char upper = 'A'; upper <= 'Z'; ++upper) {
      const char lower = char(upper - 'A' + 'a');
      bool has_upper = false, has_lower = false;
      (void)cls->ForEachMatch(std::string(1, upper), [&](size_t, size_t) { has_upper = true; });
      (void)cls->ForEachMatch(std::string(1, lower), [&](size_t, size_t) { has_lower = true; });
      if (has_upper != has_lower) additions += has_upper ? lower : upper;
    }
    *body += additions;
  }

  const std::string_view p_;
  std::string out_;
  int64_t atom_start_ = -1;  // where the last atom begins in out_ (for X{n,m}+)
  bool last_quantifier_ = false;
  bool fold_ = false;  // inside (?i:...)
  std::vector<std::pair<int64_t, bool>> groups_;  // open groups: (their start in out_, fold_ outside)
};

// One JIT stack per thread, larger than PCRE2's 32 KiB default: patterns like \s+(?!\S) over a long
// run of spaces recurse deeply.
pcre2_match_context_8* ThreadMatchContext() {
  struct Holder {
    pcre2_jit_stack_8* stack = pcre2_jit_stack_create_8(32 * 1024, 8 * 1024 * 1024, nullptr);
    pcre2_match_context_8* context = pcre2_match_context_create_8(nullptr);
    Holder() { pcre2_jit_stack_assign_8(context, nullptr, stack); }
    ~Holder() {
      pcre2_match_context_free_8(context);
      pcre2_jit_stack_free_8(stack);
    }
  };
  thread_local Holder holder;
  return holder.context;
}

}  // namespace

struct Regex::Code {
  pcre2_code_8* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free_8(code); }
};

absl::StatusOr<std::string> TranslatePattern(std::string_view oniguruma) { return Translator(oniguruma).Run(); }

std::string Regex::Quote(std::string_view literal) {
  std::string out;
  for (size_t i = 0; i < literal.size();) {
    size_t len;
    const char32_t c = DecodeUtf8At(literal, i, &len);
    if (c < 0x80 && !std::isalnum(int(c))) {
      out += CodePointEscape(c);
    } else {
      out.append(literal.substr(i, len));
    }
    i += len;
  }
  return out;
}

absl::StatusOr<Regex> Regex::Compile(const std::string& pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  auto code = std::make_shared<Code>();
  code->code = pcre2_compile_8(reinterpret_cast<PCRE2_SPTR8>(pattern.data()), pattern.size(), PCRE2_UTF, &error,
                               &offset, nullptr);
  if (!code->code) {
    PCRE2_UCHAR8 message[256];
    pcre2_get_error_message_8(error, message, sizeof(message));
    return absl::InvalidArgumentError(absl::StrCat("regex: ", reinterpret_cast<const char*>(message), " at offset ",
                                                   offset, " of ", pattern));
  }
  code->jit = pcre2_jit_compile_8(code->code, PCRE2_JIT_COMPLETE) == 0;
  Regex r;
  r.code_ = std::move(code);
  return r;
}

absl::Status Regex::ForEachMatch(std::string_view text, const std::function<void(size_t, size_t)>& on_match) const {
  pcre2_match_data_8* md = pcre2_match_data_create_from_pattern_8(code_->code, nullptr);
  pcre2_match_context_8* context = ThreadMatchContext();
  const auto* subject = reinterpret_cast<PCRE2_SPTR8>(text.data());
  absl::Status status;
  for (size_t pos = 0; pos <= text.size();) {
    // The tokenizer checks UTF-8 once per text; the per-search check would cost a pass each time.
    const int rc = code_->jit ? pcre2_jit_match_8(code_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, context)
                              : pcre2_match_8(code_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR8 message[256];
      pcre2_get_error_message_8(rc, message, sizeof(message));
      status = absl::InternalError(absl::StrCat("regex: matching failed: ", reinterpret_cast<const char*>(message)));
      break;
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer_8(md);
    const size_t begin = ovector[0], end = ovector[1];
    on_match(begin, end);
    if (end > begin) {
      pos = end;
    } else if (end >= text.size()) {
      break;
    } else {
      size_t len;
      DecodeUtf8At(text, end, &len);
      pos = end + len;
    }
  }
  pcre2_match_data_free_8(md);
  return status;
}

}  // namespace steady::hf
