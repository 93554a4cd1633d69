// The GBNF parser (grammar.h): a recursive descent over the text, with llama.cpp's layout rules
// (a rule ends at a newline unless inside parentheses or right after `|` or `::=`).
#include <algorithm>
#include <cctype>

#include "absl/strings/str_cat.h"
#include "model/constrain/grammar.h"

namespace steady {

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(char(cp));
  } else if (cp < 0x800) {
    out->push_back(char(0xC0 | (cp >> 6)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(char(0xE0 | (cp >> 12)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(char(0xF0 | (cp >> 18)));
    out->push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  }
}

int Grammar::RuleIndex(std::string_view name) {
  for (size_t i = 0; i < rule_names.size(); ++i) {
    if (rule_names[i] == name) return int(i);
  }
  rule_names.emplace_back(name);
  rule_body.push_back(-1);
  return int(rule_names.size()) - 1;
}

namespace {

GrammarNode NodeOf(GrammarNode::Kind kind) {
  GrammarNode n;
  n.kind = kind;
  return n;
}

bool IsWordChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

class GbnfParser {
 public:
  explicit GbnfParser(std::string_view text) : text_(text) {}

  absl::StatusOr<Grammar> Parse() {
    SkipSpace(true);
    while (pos_ < text_.size() && error_.ok()) {
      ParseRule();
      SkipSpace(true);
    }
    if (!error_.ok()) return error_;
    for (size_t r = 0; r < g_.rule_names.size(); ++r) {
      if (g_.rule_body[r] < 0) {
        return absl::InvalidArgumentError(absl::StrCat("grammar: rule `", g_.rule_names[r], "` is used but not defined"));
      }
    }
    auto root = std::find(g_.rule_names.begin(), g_.rule_names.end(), "root");
    if (root == g_.rule_names.end()) return absl::InvalidArgumentError("grammar: no `root` rule (where the text starts)");
    g_.root = int(root - g_.rule_names.begin());
    return std::move(g_);
  }

 private:
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek(size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }

  void Fail(const std::string& what) {
    if (!error_.ok()) return;
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    error_ = absl::InvalidArgumentError(absl::StrCat("grammar: line ", line, ", column ", col, ": ", what));
    pos_ = text_.size();
  }

  // Spaces, tabs and # comments; newlines too where a rule may continue.
  void SkipSpace(bool newlines) {
    while (!AtEnd()) {
      const char c = Peek();
      if (c == ' ' || c == '\t' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (!AtEnd() && Peek() != '\n') ++pos_;
      } else if (c == '\n' && newlines) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  std::string_view Name() {
    const size_t begin = pos_;
    while (!AtEnd() && IsWordChar(Peek())) ++pos_;
    return text_.substr(begin, pos_ - begin);
  }

  void ParseRule() {
    std::string_view name = Name();
    if (name.empty()) return Fail(absl::StrCat("expected a rule name, found `", std::string(1, Peek()), "`"));
    SkipSpace(false);
    if (text_.substr(pos_, 3) != "::=") return Fail(absl::StrCat("expected `::=` after `", std::string(name), "`"));
    pos_ += 3;
    SkipSpace(true);
    const int rule = g_.RuleIndex(name);
    if (g_.rule_body[rule] >= 0) return Fail(absl::StrCat("rule `", std::string(name), "` is defined twice"));
    const int body = ParseAlternatives(false);
    if (!error_.ok()) return;
    g_.rule_body[rule] = body;
    if (!AtEnd() && Peek() != '\n') return Fail(absl::StrCat("unexpected `", std::string(1, Peek()), "` in rule `", std::string(name), "`"));
  }

  int ParseAlternatives(bool nested) {
    GrammarNode alt = NodeOf(GrammarNode::Kind::kAlternatives);
    alt.children.push_back(ParseSequence(nested));
    while (error_.ok() && Peek() == '|') {
      ++pos_;
      SkipSpace(true);
      alt.children.push_back(ParseSequence(nested));
    }
    if (alt.children.size() == 1) return alt.children[0];
    return g_.AddNode(std::move(alt));
  }

  int ParseSequence(bool nested) {
    GrammarNode seq = NodeOf(GrammarNode::Kind::kSequence);
    while (error_.ok() && !AtEnd()) {
      const char c = Peek();
      int element = -1;
      if (c == '"') {
        element = ParseLiteral();
      } else if (c == '[') {
        element = ParseClass();
      } else if (c == '.') {
        ++pos_;
        GrammarNode any = NodeOf(GrammarNode::Kind::kClass);
        any.ranges = {{0, kMaxCodepoint}};
        element = g_.AddNode(std::move(any));
      } else if (c == '(') {
        ++pos_;
        SkipSpace(true);
        element = ParseAlternatives(true);
        if (error_.ok() && Peek() != ')') Fail("expected `)`");
        ++pos_;
      } else if (IsWordChar(c)) {
        // A name followed by `::=` begins the next rule (a rule may end at a newline inside no group).
        const size_t save = pos_;
        std::string_view name = Name();
        size_t after = pos_;
        while (after < text_.size() && (text_[after] == ' ' || text_[after] == '\t')) ++after;
        if (text_.substr(after, 3) == "::=") {
          pos_ = save;
          break;
        }
        GrammarNode ref = NodeOf(GrammarNode::Kind::kRule);
        ref.rule = g_.RuleIndex(name);
        element = g_.AddNode(std::move(ref));
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (seq.children.empty()) return Fail(absl::StrCat("`", std::string(1, c), "` follows nothing")), -1;
        const int last = seq.children.back();
        seq.children.back() = ParseRepeat(last);
        SkipSpace(nested);
        continue;
      } else {
        break;
      }
      if (!error_.ok()) return -1;
      seq.children.push_back(element);
      SkipSpace(nested);
    }
    if (seq.children.size() == 1) return seq.children[0];
    return g_.AddNode(std::move(seq));
  }

  int ParseRepeat(int child) {
    GrammarNode rep = NodeOf(GrammarNode::Kind::kRepeat);
    rep.children = {child};
    const char c = Peek();
    ++pos_;
    if (c == '*') {
      rep.min = 0, rep.max = kUnbounded;
    } else if (c == '+') {
      rep.min = 1, rep.max = kUnbounded;
    } else if (c == '?') {
      rep.min = 0, rep.max = 1;
    } else {
      SkipSpace(false);
      rep.min = ParseNumber();
      SkipSpace(false);
      rep.max = rep.min;
      if (Peek() == ',') {
        ++pos_;
        SkipSpace(false);
        rep.max = std::isdigit(static_cast<unsigned char>(Peek())) ? ParseNumber() : kUnbounded;
        SkipSpace(false);
      }
      if (error_.ok() && Peek() != '}') Fail("expected `}` to close a repetition");
      ++pos_;
      if (error_.ok() && rep.max != kUnbounded && rep.max < rep.min) Fail("a repetition's maximum is below its minimum");
    }
    return g_.AddNode(std::move(rep));
  }

  int ParseNumber() {
    int64_t n = 0;
    const size_t begin = pos_;
    while (std::isdigit(static_cast<unsigned char>(Peek())) && n < 1000000) n = n * 10 + (text_[pos_++] - '0');
    if (pos_ == begin) Fail("expected a number in a repetition");
    if (n >= 1000000) Fail("a repetition count above 999999");
    return int(n);
  }

  // One code point of a literal or class, decoding escapes and UTF-8.
  uint32_t ParseChar() {
    const unsigned char c = static_cast<unsigned char>(Peek());
    if (c == '\\') {
      ++pos_;
      const char e = Peek();
      ++pos_;
      switch (e) {
        case 'n': return '\n';
        case 't': return '\t';
        case 'r': return '\r';
        case '\\': case '"': case '[': case ']': case '-': case '^': case '/': return uint32_t(e);
        case 'x': return ParseHex(2);
        case 'u': return ParseHex(4);
        case 'U': return ParseHex(8);
        default: Fail(absl::StrCat("unknown escape `\\", std::string(1, e), "`")); return 0;
      }
    }
    // UTF-8 of the grammar text itself.
    const int len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (len == 0 || pos_ + len > text_.size()) {
      Fail("the grammar is not valid UTF-8");
      return 0;
    }
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text_[pos_ + k]) & 0x3F);
    pos_ += len;
    return cp;
  }

  uint32_t ParseHex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char h = Peek();
      int d = (h >= '0' && h <= '9') ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
      if (d < 0) {
        Fail(absl::StrCat("expected ", digits, " hex digits in an escape"));
        return 0;
      }
      v = v * 16 + uint32_t(d);
      ++pos_;
    }
    if (v > kMaxCodepoint) Fail("an escape above U+10FFFF");
    return v;
  }

  int ParseLiteral() {
    ++pos_;  // "
    GrammarNode lit = NodeOf(GrammarNode::Kind::kLiteral);
    while (error_.ok() && Peek() != '"') {
      if (AtEnd() || Peek() == '\n') return Fail("unterminated literal"), -1;
      AppendUtf8(ParseChar(), &lit.bytes);
    }
    ++pos_;
    return g_.AddNode(std::move(lit));
  }

  int ParseClass() {
    ++pos_;  // [
    bool negated = false;
    if (Peek() == '^') {
      negated = true;
      ++pos_;
    }
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    while (error_.ok() && Peek() != ']') {
      if (AtEnd() || Peek() == '\n') return Fail("unterminated character class"), -1;
      const uint32_t lo = ParseChar();
      uint32_t hi = lo;
      if (Peek() == '-' && Peek(1) != ']' && Peek(1) != '\0' && Peek(1) != '\n') {
        ++pos_;
        hi = ParseChar();
        if (hi < lo) return Fail("a character range runs backwards"), -1;
      }
      ranges.push_back({lo, hi});
    }
    ++pos_;
    GrammarNode cls = NodeOf(GrammarNode::Kind::kClass);
    cls.ranges = NormalizeRanges(std::move(ranges), negated);
    return g_.AddNode(std::move(cls));
  }

 public:
  // Sorted, merged; complemented within [0, kMaxCodepoint] when negated.
  static std::vector<std::pair<uint32_t, uint32_t>> NormalizeRanges(std::vector<std::pair<uint32_t, uint32_t>> in,
                                                                    bool negated) {
    std::sort(in.begin(), in.end());
    std::vector<std::pair<uint32_t, uint32_t>> merged;
    for (const auto& r : in) {
      if (!merged.empty() && r.first <= merged.back().second + 1) {
        merged.back().second = std::max(merged.back().second, r.second);
      } else {
        merged.push_back(r);
      }
    }
    if (!negated) return merged;
    std::vector<std::pair<uint32_t, uint32_t>> out;
    uint32_t next = 0;
    for (const auto& r : merged) {
      if (r.first > next) out.push_back({next, r.first - 1});
      next = r.second + 1;
    }
    if (next <= kMaxCodepoint) out.push_back({next, kMaxCodepoint});
    return out;
  }

 private:
  std::string_view text_;
  size_t pos_ = 0;
  Grammar g_;
  absl::Status error_;
};

}  // namespace

absl::StatusOr<Grammar> ParseGbnf(std::string_view text) { return GbnfParser(text).Parse(); }

}  // namespace steady
