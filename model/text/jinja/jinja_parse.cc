// Jinja source to syntax tree. The lexing follows @huggingface/jinja (the renderer transformers.js
// uses), which is what chat templates are checked against: trim_blocks and lstrip_blocks on, one
// trailing newline dropped, "{%-" / "-%}" trimming whitespace on their side.
#include <cctype>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/text/jinja/jinja_ast.h"

namespace steady::jinja {
namespace {

struct SyntaxError : std::runtime_error {
  int line;
  SyntaxError(int l, const std::string& m) : std::runtime_error(m), line(l) {}
};

enum TokType { kTextTok, kOpenStmt, kCloseStmt, kOpenExpr, kCloseExpr, kCommentTok, kIdent, kString, kNumber, kOp };
struct Token {
  TokType type;
  std::string text;
  int line;
};

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool IsWord(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

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

using NodePtr = std::unique_ptr<Node>;

NodePtr Make(Node::Type type, int line) {
  auto node = std::make_unique<Node>();
  node->type = type;
  node->line = line;
  return node;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  NodePtr Template() {
    std::string end;
    NodePtr root = Block({}, &end);
    return root;
  }

 private:
  const Token& Peek(size_t k = 0) const {
    static const Token kEnd{kCloseStmt, "<end>", 0};
    return pos_ + k < t_.size() ? t_[pos_ + k] : kEnd;
  }
  bool AtEnd() const { return pos_ >= t_.size(); }
  int Line() const { return AtEnd() ? (t_.empty() ? 1 : t_.back().line) : t_[pos_].line; }
  [[noreturn]] void Fail(const std::string& what) const { throw SyntaxError(Line(), what); }
  bool IsOp(const char* s, size_t k = 0) const { return Peek(k).type == kOp && Peek(k).text == s; }
  bool IsWordTok(const char* s, size_t k = 0) const { return Peek(k).type == kIdent && Peek(k).text == s; }
  void Expect(TokType type, const char* what) {
    if (AtEnd() || t_[pos_].type != type) Fail(absl::StrCat("expected ", what));
    ++pos_;
  }
  void ExpectOp(const char* s) {
    if (!IsOp(s)) Fail(absl::StrCat("expected '", s, "'"));
    ++pos_;
  }
  std::string Ident() {
    if (Peek().type != kIdent || AtEnd()) Fail("expected a name");
    return t_[pos_++].text;
  }

  // Statements until one of `ends` ("{% endif %}" ...); *end gets the keyword found ("" at the end).
  NodePtr Block(const std::vector<std::string>& ends, std::string* end) {
    NodePtr block = Make(Node::kBlock, Line());
    while (!AtEnd()) {
      const Token& tok = t_[pos_];
      if (tok.type == kTextTok) {
        NodePtr text = Make(Node::kText, tok.line);
        text->text = tok.text;
        block->kids.push_back(std::move(text));
        ++pos_;
      } else if (tok.type == kCommentTok) {
        ++pos_;
      } else if (tok.type == kOpenExpr) {
        ++pos_;
        NodePtr out = Make(Node::kOutput, tok.line);
        out->kids.push_back(Expression());
        Expect(kCloseExpr, "'}}'");
        block->kids.push_back(std::move(out));
      } else if (tok.type == kOpenStmt) {
        const std::string word = Peek(1).type == kIdent ? Peek(1).text : "";
        for (const std::string& e : ends) {
          if (word == e) {
            pos_ += 2;
            *end = word;
            return block;
          }
        }
        ++pos_;
        NodePtr s = Statement();
        if (s) block->kids.push_back(std::move(s));
      } else {
        Fail("unexpected '" + tok.text + "'");
      }
    }
    if (!ends.empty()) Fail(absl::StrCat("missing '{% ", ends.back(), " %}'"));
    *end = "";
    return block;
  }

  NodePtr Statement() {
    const int line = Line();
    const std::string word = Ident();
    std::string end;
    if (word == "if") {
      NodePtr node = Make(Node::kIf, line);
      node->kids.push_back(Expression());
      Expect(kCloseStmt, "'%}'");
      return IfRest(std::move(node));
    }
    if (word == "for") {
      NodePtr node = Make(Node::kFor, line);
      node->names.push_back(Ident());
      while (IsOp(",")) {
        ++pos_;
        node->names.push_back(Ident());
      }
      if (!IsWordTok("in")) Fail("expected 'in'");
      ++pos_;
      node->kids.push_back(Expression(/*ternary=*/false));
      NodePtr filter;
      if (IsWordTok("if")) {
        ++pos_;
        filter = Expression();
      }
      Expect(kCloseStmt, "'%}'");
      node->kids.push_back(Block({"else", "endfor"}, &end));
      if (end == "else") {
        Expect(kCloseStmt, "'%}'");
        node->kids.push_back(Block({"endfor"}, &end));
      } else {
        node->kids.push_back(Make(Node::kBlock, line));
      }
      Expect(kCloseStmt, "'%}'");
      node->kids.push_back(std::move(filter));
      return node;
    }
    if (word == "set") {
      NodePtr node = Make(Node::kSet, line);
      node->kids.push_back(Postfix(Primary()));
      if (IsOp("=")) {
        ++pos_;
        node->kids.push_back(Expression());
        Expect(kCloseStmt, "'%}'");
      } else {
        Expect(kCloseStmt, "'%}' or '='");
        node->kids.push_back(nullptr);
        node->kids.push_back(Block({"endset"}, &end));
        Expect(kCloseStmt, "'%}'");
      }
      return node;
    }
    if (word == "macro") {
      NodePtr node = Make(Node::kMacro, line);
      node->text = Ident();
      ExpectOp("(");
      std::vector<NodePtr> defaults;
      while (!IsOp(")")) {
        node->names.push_back(Ident());
        if (IsOp("=")) {
          ++pos_;
          defaults.push_back(Expression());
        } else {
          defaults.push_back(nullptr);
        }
        if (!IsOp(")")) ExpectOp(",");
      }
      ++pos_;
      Expect(kCloseStmt, "'%}'");
      node->kids.push_back(Block({"endmacro"}, &end));
      Expect(kCloseStmt, "'%}'");
      for (auto& d : defaults) node->kids.push_back(std::move(d));
      return node;
    }
    if (word == "filter") {
      NodePtr node = Make(Node::kFilterBlock, line);
      node->kids.push_back(FilterCall(nullptr));
      Expect(kCloseStmt, "'%}'");
      node->kids.push_back(Block({"endfilter"}, &end));
      Expect(kCloseStmt, "'%}'");
      return node;
    }
    if (word == "break" || word == "continue") {
      Expect(kCloseStmt, "'%}'");
      return Make(word == "break" ? Node::kBreak : Node::kContinue, line);
    }
    if (word == "generation" || word == "endgeneration") {  // transformers' assistant-mask markers
      Expect(kCloseStmt, "'%}'");
      return nullptr;
    }
    throw SyntaxError(line, absl::StrCat("unknown statement '", word, "'"));
  }

  NodePtr IfRest(NodePtr node) {
    std::string end;
    node->kids.push_back(Block({"elif", "else", "endif"}, &end));
    if (end == "elif") {
      NodePtr elif = Make(Node::kIf, Line());
      elif->kids.push_back(Expression());
      Expect(kCloseStmt, "'%}'");
      NodePtr rest = Make(Node::kBlock, elif->line);
      rest->kids.push_back(IfRest(std::move(elif)));
      node->kids.push_back(std::move(rest));
      return node;
    }
    if (end == "else") {
      Expect(kCloseStmt, "'%}'");
      node->kids.push_back(Block({"endif"}, &end));
    } else {
      node->kids.push_back(Make(Node::kBlock, node->line));
    }
    Expect(kCloseStmt, "'%}'");
    return node;
  }

  NodePtr Binary(const std::string& op, NodePtr left, NodePtr right) {
    NodePtr node = Make(Node::kBinary, left->line);
    node->text = op;
    node->kids.push_back(std::move(left));
    node->kids.push_back(std::move(right));
    return node;
  }

  NodePtr Expression(bool ternary = true) {
    NodePtr value = Or();
    if (ternary && IsWordTok("if")) {
      ++pos_;
      NodePtr node = Make(Node::kTernary, value->line);
      node->kids.push_back(std::move(value));
      node->kids.push_back(Or());
      if (IsWordTok("else")) {
        ++pos_;
        node->kids.push_back(Expression());
      } else {
        node->kids.push_back(nullptr);
      }
      return node;
    }
    return value;
  }
  NodePtr Or() {
    NodePtr left = And();
    while (IsWordTok("or")) {
      ++pos_;
      left = Binary("or", std::move(left), And());
    }
    return left;
  }
  NodePtr And() {
    NodePtr left = Not();
    while (IsWordTok("and")) {
      ++pos_;
      left = Binary("and", std::move(left), Not());
    }
    return left;
  }
  NodePtr Not() {
    if (IsWordTok("not")) {
      NodePtr node = Make(Node::kUnary, Line());
      ++pos_;
      node->text = "not";
      node->kids.push_back(Not());
      return node;
    }
    return Compare();
  }
  NodePtr Compare() {
    NodePtr left = Concat();
    for (;;) {
      if (Peek().type == kOp && (Peek().text == "==" || Peek().text == "!=" || Peek().text == "<" ||
                                 Peek().text == ">" || Peek().text == "<=" || Peek().text == ">=")) {
        const std::string op = t_[pos_++].text;
        left = Binary(op, std::move(left), Concat());
      } else if (IsWordTok("in")) {
        ++pos_;
        left = Binary("in", std::move(left), Concat());
      } else if (IsWordTok("not") && IsWordTok("in", 1)) {
        pos_ += 2;
        left = Binary("not in", std::move(left), Concat());
      } else {
        return left;
      }
    }
  }
  NodePtr Concat() {
    NodePtr left = Add();
    while (IsOp("~")) {
      ++pos_;
      left = Binary("~", std::move(left), Add());
    }
    return left;
  }
  NodePtr Add() {
    NodePtr left = Mul();
    while (IsOp("+") || IsOp("-")) {
      const std::string op = t_[pos_++].text;
      left = Binary(op, std::move(left), Mul());
    }
    return left;
  }
  NodePtr Mul() {
    NodePtr left = Unary();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const std::string op = t_[pos_++].text;
      left = Binary(op, std::move(left), Unary());
    }
    return left;
  }
  NodePtr Unary() {
    if (IsOp("-") || IsOp("+")) {
      NodePtr node = Make(Node::kUnary, Line());
      node->text = t_[pos_++].text;
      node->kids.push_back(Unary());
      return node;
    }
    return Postfix(Primary());
  }

  // Arguments after "(": positional and keyword (name=value), up to ")".
  void Arguments(Node* call) {
    ExpectOp("(");
    while (!IsOp(")")) {
      std::string keyword;
      if (Peek().type == kIdent && IsOp("=", 1)) {
        keyword = Ident();
        ++pos_;
      }
      call->names.push_back(keyword);
      call->kids.push_back(Expression());
      if (!IsOp(")")) ExpectOp(",");
    }
    ++pos_;
  }

  NodePtr FilterCall(NodePtr operand) {
    NodePtr node = Make(Node::kFilter, Line());
    node->text = Ident();
    node->kids.push_back(std::move(operand));
    node->names.push_back("");
    if (IsOp("(")) Arguments(node.get());
    return node;
  }

  NodePtr Postfix(NodePtr node) {
    for (;;) {
      if (IsOp(".")) {
        ++pos_;
        NodePtr attr = Make(Node::kAttr, node->line);
        attr->text = Ident();
        attr->kids.push_back(std::move(node));
        node = std::move(attr);
      } else if (IsOp("[")) {
        ++pos_;
        std::vector<NodePtr> parts(1);
        bool slice = false;
        while (!IsOp("]")) {
          if (IsOp(":")) {
            ++pos_;
            slice = true;
            parts.emplace_back();
          } else {
            if (parts.back()) Fail("expected ']'");
            parts.back() = Expression();
          }
        }
        ++pos_;
        if (parts.size() > 3) Fail("a slice has at most 3 parts");
        NodePtr index = Make(slice ? Node::kSlice : Node::kIndex, node->line);
        index->kids.push_back(std::move(node));
        if (!slice && !parts[0]) Fail("empty index");
        for (auto& part : parts) index->kids.push_back(std::move(part));
        if (slice) index->kids.resize(4);
        node = std::move(index);
      } else if (IsOp("(")) {
        NodePtr call = Make(Node::kCall, node->line);
        call->kids.push_back(std::move(node));
        call->names.push_back("");
        Arguments(call.get());
        node = std::move(call);
      } else if (IsOp("|")) {
        ++pos_;
        node = FilterCall(std::move(node));
      } else if (IsWordTok("is")) {
        ++pos_;
        NodePtr test = Make(Node::kTest, node->line);
        if (IsWordTok("not")) {
          ++pos_;
          test->negated = true;
        }
        test->text = Ident();
        test->kids.push_back(std::move(node));
        test->names.push_back("");
        if (IsOp("(")) {
          Arguments(test.get());
        } else if (Peek().type == kNumber || Peek().type == kString ||
                   (Peek().type == kIdent && !IsWordTok("and") && !IsWordTok("or") && !IsWordTok("else") &&
                    !IsWordTok("if") && !IsWordTok("in") && !IsWordTok("not") && !IsWordTok("is"))) {
          test->names.push_back("");
          test->kids.push_back(Primary());  // "is sameas false", "is equalto 2"
        }
        node = std::move(test);
      } else {
        return node;
      }
    }
  }

  NodePtr Primary() {
    const int line = Line();
    if (AtEnd()) Fail("unexpected end of template");
    const Token& tok = t_[pos_];
    if (tok.type == kString) {
      NodePtr node = Make(Node::kLiteral, line);
      node->value = Value::Str(tok.text);
      ++pos_;
      while (Peek().type == kString && !AtEnd()) node->value.s += t_[pos_++].text;  // "a" "b"
      return node;
    }
    if (tok.type == kNumber) {
      NodePtr node = Make(Node::kLiteral, line);
      ++pos_;
      if (tok.text.find('.') != std::string::npos) {
        node->value = Value::Float(std::stod(tok.text));
      } else {
        node->value = Value::Int(std::stoll(tok.text));
      }
      return node;
    }
    if (tok.type == kIdent) {
      ++pos_;
      NodePtr node = Make(Node::kLiteral, line);
      if (tok.text == "true" || tok.text == "True") {
        node->value = Value::Bool(true);
      } else if (tok.text == "false" || tok.text == "False") {
        node->value = Value::Bool(false);
      } else if (tok.text == "none" || tok.text == "None") {
        node->value = Value::None();
      } else {
        node->type = Node::kName;
        node->text = tok.text;
      }
      return node;
    }
    if (IsOp("(")) {
      ++pos_;
      NodePtr inner = Expression();
      if (IsOp(",")) {  // a tuple, as a list
        NodePtr list = Make(Node::kList, line);
        list->kids.push_back(std::move(inner));
        while (IsOp(",")) {
          ++pos_;
          if (IsOp(")")) break;
          list->kids.push_back(Expression());
        }
        inner = std::move(list);
      }
      ExpectOp(")");
      return inner;
    }
    if (IsOp("[")) {
      ++pos_;
      NodePtr list = Make(Node::kList, line);
      while (!IsOp("]")) {
        list->kids.push_back(Expression());
        if (!IsOp("]")) ExpectOp(",");
      }
      ++pos_;
      return list;
    }
    if (IsOp("{")) {
      ++pos_;
      NodePtr dict = Make(Node::kDict, line);
      while (!IsOp("}")) {
        dict->kids.push_back(Expression());
        ExpectOp(":");
        dict->kids.push_back(Expression());
        if (!IsOp("}")) ExpectOp(",");
      }
      ++pos_;
      return dict;
    }
    Fail(absl::StrCat("unexpected '", tok.text, "'"));
  }

  std::vector<Token> t_;
  size_t pos_ = 0;
};

}  // namespace

std::unique_ptr<Node> Parse(const std::string& source, std::string* error) {
  try {
    return Parser(Lex(source)).Template();
  } catch (const SyntaxError& e) {
    *error = absl::StrCat("line ", e.line, ": ", e.what());
    return nullptr;
  }
}

}  // namespace steady::jinja
