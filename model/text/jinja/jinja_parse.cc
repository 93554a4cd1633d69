// Jinja tokens (jinja_lex.h, lexed as @huggingface/jinja lexes) to the syntax tree: statements,
// expressions with their precedence, filters, tests and calls.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/text/jinja/jinja_ast.h"
#include "model/text/jinja/jinja_lex.h"

namespace steady::jinja {
namespace {

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
