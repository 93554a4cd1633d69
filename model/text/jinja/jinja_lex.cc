// Jinja source to tokens (jinja_lex.h).
#include <cctype>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/text/jinja/jinja_lex.h"

namespace steady::jinja {
namespace {

// @huggingface/jinja's preprocess(), keeping each kept character's source line.
void Preprocess(const std::string& in, std::string* out, std::vector<int>* lines) {
  std::string src = in;
  if (!src.empty() && src.back() == '\n') src.pop_back();
  int line = 1;
  bool line_start = true;
  for (size_t p = 0; p < src.size();) {
    if (line_start) {  // lstrip_blocks: blanks before "{%", "{#" (or "{-") at a line's start
      size_t q = p;
      while (q < src.size() && (src[q] == ' ' || src[q] == '\t')) ++q;
      if (q + 1 < src.size() && src[q] == '{' && (src[q + 1] == '%' || src[q + 1] == '#' || src[q + 1] == '-')) p = q;
      line_start = false;
      continue;
    }
    const char c = src[p];
    out->push_back(c);
    lines->push_back(line);
    ++p;
    if (c == '\n') {
      ++line;
      line_start = true;
    } else if (c == '}' && out->size() >= 2 && p < src.size() && src[p] == '\n') {
      const char before = (*out)[out->size() - 2];
      if (before == '#' || before == '%' || before == '-') {  // trim_blocks: the newline after a tag
        ++p;
        ++line;
        line_start = true;
      }
    }
  }
}

}  // namespace

std::vector<Token> Lex(const std::string& source) {
  std::string src;
  std::vector<int> lines;
  Preprocess(source, &src, &lines);
  std::vector<Token> tokens;
  size_t p = 0;
  const size_t n = src.size();
  auto line_at = [&](size_t q) { return lines.empty() ? 1 : lines[std::min(q, lines.size() - 1)]; };
  auto at = [&](size_t q) { return q < n ? src[q] : '\0'; };
  auto starts = [&](const char* s) { return src.compare(p, std::char_traits<char>::length(s), s) == 0; };
  auto strip_trailing = [&] {
    if (!tokens.empty() && tokens.back().type == kTextTok) {
      std::string& t = tokens.back().text;
      while (!t.empty() && IsSpace(t.back())) t.pop_back();
      if (t.empty()) tokens.pop_back();
    }
  };
  auto skip_space = [&] { while (p < n && IsSpace(src[p])) ++p; };
  int curly = 0;
  static const char* kOps[] = {"{%", "%}", "{{", "}}", "(", ")", "{", "}", "[", "]", ",", ".", ":", "|", "<=", ">=",
                               "==", "!=", "<", ">", "+", "-", "~", "**", "*", "//", "/", "%", "="};
  while (p < n) {
    const TokType last = tokens.empty() ? kCloseStmt : tokens.back().type;
    if (last == kCloseStmt || last == kCloseExpr || last == kCommentTok) {
      const size_t begin = p;
      while (p < n && !(src[p] == '{' && (at(p + 1) == '%' || at(p + 1) == '{' || at(p + 1) == '#'))) ++p;
      if (p > begin) {
        tokens.push_back({kTextTok, src.substr(begin, p - begin), line_at(begin)});
        continue;
      }
    }
    const int line = line_at(p);
    if (starts("{#")) {
      p += 2;
      const bool strip_before = at(p) == '-';
      if (strip_before) ++p;
      const size_t end = src.find("#}", p);
      if (end == std::string::npos) throw SyntaxError(line, "missing the end of a comment ('#}')");
      const bool strip_after = end > p && src[end - 1] == '-';
      if (strip_before) strip_trailing();
      tokens.push_back({kCommentTok, "", line});
      p = end + 2;
      if (strip_after) skip_space();
      continue;
    }
    if (starts("{%-") || starts("{{-")) {
      strip_trailing();
      tokens.push_back({src[p + 1] == '%' ? kOpenStmt : kOpenExpr, "", line});
      if (src[p + 1] == '{') curly = 0;
      p += 3;
      continue;
    }
    skip_space();
    if (p >= n) break;
    if (starts("-%}") || starts("-}}")) {
      tokens.push_back({src[p + 1] == '%' ? kCloseStmt : kCloseExpr, "", line});
      p += 3;
      skip_space();
      continue;
    }
    bool matched = false;
    for (const char* op : kOps) {
      const std::string s = op;
      if (s == "}}" && curly > 0) continue;
      if (src.compare(p, s.size(), s) != 0) continue;
      TokType type = kOp;
      if (s == "{%") type = kOpenStmt;
      if (s == "%}") type = kCloseStmt;
      if (s == "{{") type = kOpenExpr, curly = 0;
      if (s == "}}") type = kCloseExpr;
      if (s == "{") ++curly;
      if (s == "}") --curly;
      tokens.push_back({type, s, line});
      p += s.size();
      matched = true;
      break;
    }
    if (matched) continue;
    const char c = src[p];
    if (c == '\'' || c == '"') {
      std::string str;
      ++p;
      while (p < n && src[p] != c) {
        if (src[p] == '\\') {
          const char e = at(++p);
          ++p;
          switch (e) {
            case 'n': str += '\n'; break;
            case 't': str += '\t'; break;
            case 'r': str += '\r'; break;
            case 'b': str += '\b'; break;
            case 'f': str += '\f'; break;
            case 'v': str += '\v'; break;
            case '\'': case '"': case '\\': str += e; break;
            default: throw SyntaxError(line_at(p), absl::StrCat("unexpected escaped character '", std::string(1, e), "'"));
          }
          continue;
        }
        str += src[p++];
      }
      if (p >= n) throw SyntaxError(line, "unterminated string");
      ++p;
      tokens.push_back({kString, std::move(str), line});
      continue;
    }
    if (IsDigit(c)) {
      size_t q = p;
      while (q < n && IsDigit(src[q])) ++q;
      if (!(tokens.size() && tokens.back().text == ".") && at(q) == '.' && IsDigit(at(q + 1))) {
        ++q;
        while (q < n && IsDigit(src[q])) ++q;
      }
      tokens.push_back({kNumber, src.substr(p, q - p), line});
      p = q;
      continue;
    }
    if (IsWord(c)) {
      size_t q = p;
      while (q < n && IsWord(src[q])) ++q;
      tokens.push_back({kIdent, src.substr(p, q - p), line});
      p = q;
      continue;
    }
    throw SyntaxError(line, absl::StrCat("unexpected character '", std::string(1, c), "'"));
  }
  return tokens;
}
}  // namespace steady::jinja
