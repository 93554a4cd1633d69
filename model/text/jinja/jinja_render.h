// The renderer of model/text/jinja/ inside the library (not part of jinja.h's interface): its
// statements and expressions are in jinja_eval.cc, the methods, filters and tests chat templates call
// (with the helpers they share) in jinja_builtins.cc. Errors are thrown as RenderError inside and
// become a Status at JinjaTemplate::Render().
#ifndef STEADY_MODEL_TEXT_JINJA_JINJA_RENDER_H_
#define STEADY_MODEL_TEXT_JINJA_JINJA_RENDER_H_

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "model/text/jinja/jinja_ast.h"

namespace steady::jinja {

struct RenderError : std::runtime_error {
  int line;
  RenderError(int l, const std::string& m) : std::runtime_error(m), line(l) {}
};


const char* KindName(const Value& v);

struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  const Value* Get(size_t index, const char* name) const {
    for (const auto& [k, v] : keyword) {
      if (k == name) return &v;
    }
    return index < positional.size() ? &positional[index] : nullptr;
  }
};


std::string Strip(const std::string& s, const Value* chars, bool left, bool right);
std::string Replace(const std::string& s, const std::string& from, const std::string& to, int64_t count);
std::string Case(std::string s, bool upper);
std::string Title(const std::string& s);
std::string StrFTimeNow(const std::string& format);
// What the reference's "~" and string "+" make of a value: JavaScript's toString() of the raw value
// (2.0 is "2", a list joins its items with ",", a dict is "[object Map]").
std::string JsText(const Value& v);

class Renderer {
 public:
  explicit Renderer(Value globals) { frames_.push_back(std::move(globals)); }

  void Block(const Node& block, std::string& out);

 private:
  enum Flow { kNormal, kBreak, kContinue };

  [[noreturn]] static void Fail(const Node& at, const std::string& what) { throw RenderError(at.line, what); }

  Value Lookup(const std::string& name) const;
  // Statements (jinja_eval.cc).
  void Statement(const Node& s, std::string& out);
  void For(const Node& s, std::string& out);
  void Set(const Node& s);
  // Expressions (jinja_eval.cc).
  Args EvalArgs(const Node& call, size_t first);
  Value Eval(const Node& e);
  Value Member(const Node& e, const Value& object, const Value& key);
  Value Slice(const Node& e);
  Value Binary(const Node& e);
  Value Call(const Node& e);
  Value CallMacro(const Node& e, const Node& macro, const Args& args);
  // Methods, filters and tests (jinja_builtins.cc).
  Value Method(const Node& e, const Value& object, const std::string& name, const Args& args);
  Value Filter(const Node& e, const Value& v);
  bool Test(const Node& e, const Value& v);
  bool TestByName(const Node& e, const std::string& name, const Value& v, const Value* arg);

  std::vector<Value> frames_;
  Flow flow_ = kNormal;
};

}  // namespace steady::jinja

#endif  // STEADY_MODEL_TEXT_JINJA_JINJA_RENDER_H_
