// The lexer of model/text/jinja/ (inside the library): Jinja source to tokens, as @huggingface/jinja
// lexes it (the renderer transformers.js uses, which chat templates are checked against):
// trim_blocks and lstrip_blocks on, one trailing newline dropped, "{%-" / "-%}" trimming whitespace
// on their side. jinja_parse.cc makes the syntax tree of the tokens.
#ifndef STEADY_MODEL_TEXT_JINJA_JINJA_LEX_H_
#define STEADY_MODEL_TEXT_JINJA_JINJA_LEX_H_

#include <cctype>
#include <stdexcept>
#include <string>
#include <vector>

namespace steady::jinja {

// Thrown by the lexer and the parser; Parse() turns it into "line N: ...".
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

inline bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
inline bool IsWord(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
inline bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Throws SyntaxError naming the line.
std::vector<Token> Lex(const std::string& source);

}  // namespace steady::jinja

#endif  // STEADY_MODEL_TEXT_JINJA_JINJA_LEX_H_
