// The Jinja renderer's insides, shared by its parser (jinja_parse.cc) and its evaluator
// (jinja_eval.cc): runtime values and the syntax tree. Not for use outside model/text/jinja/.
#ifndef STEADY_MODEL_TEXT_JINJA_JINJA_AST_H_
#define STEADY_MODEL_TEXT_JINJA_JINJA_AST_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace steady::jinja {

struct Node;

// A runtime value. Arrays and objects are shared, as in Jinja (a namespace is an object whose
// attributes `set` may change); objects keep their keys' insertion order (tojson writes it).
struct Value {
  enum Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kArray, kObject, kNamespace, kMacro };
  using Array = std::vector<Value>;
  using Object = std::vector<std::pair<std::string, Value>>;

  Kind kind = kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::shared_ptr<Array> array;
  std::shared_ptr<Object> object;
  const Node* macro = nullptr;

  static Value None() { Value v; v.kind = kNone; return v; }
  static Value Bool(bool x) { Value v; v.kind = kBool; v.b = x; return v; }
  static Value Int(int64_t x) { Value v; v.kind = kInt; v.i = x; return v; }
  static Value Float(double x) { Value v; v.kind = kFloat; v.f = x; return v; }
  static Value Str(std::string x) { Value v; v.kind = kString; v.s = std::move(x); return v; }
  static Value Arr(Array a = {}) { Value v; v.kind = kArray; v.array = std::make_shared<Array>(std::move(a)); return v; }
  static Value Obj(Object o = {}, Kind kind = kObject) {
    Value v; v.kind = kind; v.object = std::make_shared<Object>(std::move(o)); return v;
  }

  bool IsObject() const { return kind == kObject || kind == kNamespace; }
  bool IsNumber() const { return kind == kInt || kind == kFloat; }
  double Number() const { return kind == kInt ? double(i) : f; }
  // An object's member, nullptr when absent.
  const Value* Find(const std::string& key) const;
  void Set(const std::string& key, Value v);
};

// The syntax tree: one node type, told apart by `type`; `kids` and `text` mean what each type says.
struct Node {
  enum Type {
    // Statements
    kText,       // text: the template text
    kOutput,     // kids[0]: the expression printed
    kIf,         // kids: test, then-block, else-block (an elif is an If inside the else-block)
    kFor,        // names: loop variables; kids: iterable, body, else-block, filter (or null)
    kSet,        // kids: target, value (or null with a body: kids[2])
    kMacro,      // text: name; names: parameters; kids: body, then the parameters' defaults (or null)
    kBlock,      // kids: statements
    kBreak, kContinue,
    kFilterBlock,  // kids: filter call (kFilter with null operand), body
    // Expressions
    kLiteral,    // value
    kName,       // text
    kAttr,       // kids[0].text
    kIndex,      // kids: object, index
    kSlice,      // kids: object, start, stop, step (each may be null)
    kCall,       // kids[0]: callee; kids[1..]: arguments; names: keyword per argument ("" positional)
    kFilter,     // text: filter name; kids: operand, arguments...; names: keywords
    kTest,       // text: test name; b: negated; kids: operand, arguments...
    kUnary,      // text: "not" or "-" or "+"; kids: operand
    kBinary,     // text: operator; kids: left, right
    kTernary,    // kids: value, test, otherwise (or null)
    kList,       // kids: items
    kDict,       // kids: key, value, key, value...
  };
  Type type;
  int line = 0;
  std::string text;
  bool negated = false;
  Value value;
  std::vector<std::string> names;
  std::vector<std::unique_ptr<Node>> kids;
};

Value FromJson(const nlohmann::ordered_json& j);
// Text as @huggingface/jinja prints a value ({{ x }}, ~, string): true/false, 2.0, JSON for
// lists and dicts; none prints as nothing.
std::string ToText(const Value& v);
// tojson: JSON.stringify's escaping, ", " and ": " separators (or "," and newlines with an indent).
std::string ToJson(const Value& v, int indent, int depth, bool undefined_as_null);
std::string NumberText(double d);
// Python's repr(), as transformers' Jinja2 prints a dict, list or None with `string` (which
// @huggingface/jinja refuses for those): {'a': [True, None, 1.5]}.
std::string PythonRepr(const Value& v);
bool Truthy(const Value& v);
bool Equal(const Value& a, const Value& b);

// Parses a template as @huggingface/jinja lexes it (trim_blocks and lstrip_blocks on, one trailing
// newline dropped). Errors name the line: "line 3: expected '%}'". Returns the root block or sets
// *error.
std::unique_ptr<Node> Parse(const std::string& source, std::string* error);

}  // namespace steady::jinja

#endif  // STEADY_MODEL_TEXT_JINJA_JINJA_AST_H_
