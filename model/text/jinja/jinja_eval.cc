// Rendering a parsed template: statements and expressions, with @huggingface/jinja's semantics where
// it differs from Python's Jinja (it is the reference the tests compare with). The methods, filters
// and tests are in jinja_builtins.cc.
#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "model/text/jinja/jinja.h"
#include "model/text/jinja/jinja_render.h"

namespace steady {
namespace jinja {

void Renderer::Block(const Node& block, std::string& out) {
  for (const auto& s : block.kids) {
    if (flow_ != kNormal) return;
    Statement(*s, out);
  }
}

Value Renderer::Lookup(const std::string& name) const {
  for (size_t i = frames_.size(); i-- > 0;) {
    if (const Value* v = frames_[i].Find(name)) return *v;
  }
  return Value();
}

void Renderer::Statement(const Node& s, std::string& out) {
  switch (s.type) {
    case Node::kText: out += s.text; return;
    case Node::kOutput: out += ToText(Eval(*s.kids[0])); return;
    case Node::kBlock: Block(s, out); return;
    case Node::kIf: Block(Truthy(Eval(*s.kids[0])) ? *s.kids[1] : *s.kids[2], out); return;
    case Node::kFor: For(s, out); return;
    case Node::kSet: Set(s); return;
    case Node::kMacro: {
      Value m;
      m.kind = Value::kMacro;
      m.macro = &s;
      frames_.back().Set(s.text, m);
      return;
    }
    case Node::kBreak: flow_ = kBreak; return;
    case Node::kContinue: flow_ = kContinue; return;
    case Node::kFilterBlock: {
      std::string body;
      Block(*s.kids[1], body);
      out += ToText(Filter(*s.kids[0], Value::Str(body)));
      return;
    }
    default: Fail(s, "not a statement");
  }
}

void Renderer::For(const Node& s, std::string& out) {
  const Value iterable = Eval(*s.kids[0]);
  Value::Array items;
  if (iterable.kind == Value::kArray) {
    items = *iterable.array;
  } else if (iterable.IsObject()) {
    for (const auto& [k, v] : *iterable.object) items.push_back(Value::Str(k));
  } else if (iterable.kind == Value::kString) {
    for (char c : iterable.s) items.push_back(Value::Str(std::string(1, c)));
  } else if (iterable.kind != Value::kUndefined && iterable.kind != Value::kNone) {
    Fail(s, absl::StrCat("cannot iterate over a ", KindName(iterable)));
  }
  auto bind = [&](Value& frame, const Value& item) {
    if (s.names.size() == 1) {
      frame.Set(s.names[0], item);
      return;
    }
    if (item.kind != Value::kArray || item.array->size() != s.names.size()) {
      Fail(s, "cannot unpack a loop item into " + std::to_string(s.names.size()) + " names");
    }
    for (size_t k = 0; k < s.names.size(); ++k) frame.Set(s.names[k], (*item.array)[k]);
  };
  if (const Node* filter = s.kids[3].get()) {
    Value::Array kept;
    for (const Value& item : items) {
      frames_.push_back(Value::Obj());
      bind(frames_.back(), item);
      const bool keep = Truthy(Eval(*filter));
      frames_.pop_back();
      if (keep) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    Block(*s.kids[2], out);
    return;
  }
  const int64_t n = int64_t(items.size());
  for (int64_t i = 0; i < n; ++i) {
    Value frame = Value::Obj();
    Value loop = Value::Obj({{"index", Value::Int(i + 1)}, {"index0", Value::Int(i)},
                             {"revindex", Value::Int(n - i)}, {"revindex0", Value::Int(n - i - 1)},
                             {"first", Value::Bool(i == 0)}, {"last", Value::Bool(i == n - 1)},
                             {"length", Value::Int(n)},
                             {"previtem", i > 0 ? items[size_t(i - 1)] : Value()},
                             {"nextitem", i + 1 < n ? items[size_t(i + 1)] : Value()}});
    frame.Set("loop", loop);
    bind(frame, items[size_t(i)]);
    frames_.push_back(std::move(frame));
    Block(*s.kids[1], out);
    frames_.pop_back();
    if (flow_ == kBreak) {
      flow_ = kNormal;
      break;
    }
    flow_ = kNormal;
  }
}

void Renderer::Set(const Node& s) {
  Value value;
  if (s.kids[1]) {
    value = Eval(*s.kids[1]);
  } else {
    std::string body;
    Block(*s.kids[2], body);
    value = Value::Str(body);
  }
  const Node& target = *s.kids[0];
  if (target.type == Node::kName) {
    frames_.back().Set(target.text, std::move(value));
  } else if (target.type == Node::kAttr) {
    Value object = Eval(*target.kids[0]);
    if (object.kind != Value::kNamespace) Fail(s, "only a namespace's attributes can be set");
    object.Set(target.text, std::move(value));
  } else if (target.type == Node::kList) {
    if (value.kind != Value::kArray || value.array->size() != target.kids.size()) Fail(s, "cannot unpack");
    for (size_t k = 0; k < target.kids.size(); ++k) frames_.back().Set(target.kids[k]->text, (*value.array)[k]);
  } else {
    Fail(s, "cannot assign to this expression");
  }
}

Args Renderer::EvalArgs(const Node& call, size_t first) {
  Args args;
  for (size_t k = first; k < call.kids.size(); ++k) {
    Value v = Eval(*call.kids[k]);
    if (call.names[k].empty()) {
      args.positional.push_back(std::move(v));
    } else {
      args.keyword.emplace_back(call.names[k], std::move(v));
    }
  }
  return args;
}

Value Renderer::Eval(const Node& e) {
  switch (e.type) {
    case Node::kLiteral: return e.value;
    case Node::kName: return Lookup(e.text);
    case Node::kList: {
      Value::Array a;
      for (const auto& k : e.kids) a.push_back(Eval(*k));
      return Value::Arr(std::move(a));
    }
    case Node::kDict: {
      Value d = Value::Obj();
      for (size_t k = 0; k + 1 < e.kids.size(); k += 2) d.Set(ToText(Eval(*e.kids[k])), Eval(*e.kids[k + 1]));
      return d;
    }
    case Node::kAttr: return Member(e, Eval(*e.kids[0]), Value::Str(e.text));
    case Node::kIndex: return Member(e, Eval(*e.kids[0]), Eval(*e.kids[1]));
    case Node::kSlice: return Slice(e);
    case Node::kCall: return Call(e);
    case Node::kFilter: return Filter(e, Eval(*e.kids[0]));
    case Node::kTest: {
      const bool result = Test(e, Eval(*e.kids[0]));
      return Value::Bool(result != e.negated);
    }
    case Node::kUnary: {
      const Value v = Eval(*e.kids[0]);
      if (e.text == "not") return Value::Bool(!Truthy(v));
      if (!v.IsNumber()) Fail(e, absl::StrCat("unary ", e.text, " on a ", KindName(v)));
      if (e.text == "+") return v;
      return v.kind == Value::kInt ? Value::Int(-v.i) : Value::Float(-v.f);
    }
    case Node::kTernary: {
      if (Truthy(Eval(*e.kids[1]))) return Eval(*e.kids[0]);
      return e.kids[2] ? Eval(*e.kids[2]) : Value();
    }
    case Node::kBinary: return Binary(e);
    default: Fail(e, "not an expression");
  }
}

Value Renderer::Member(const Node& e, const Value& object, const Value& key) {
  if (object.kind == Value::kUndefined) Fail(e, absl::StrCat("cannot read '", ToText(key), "' of undefined"));
  if (object.IsObject()) {
    const Value* v = object.Find(ToText(key));
    return v ? *v : Value();
  }
  if ((object.kind == Value::kArray || object.kind == Value::kString) && key.kind == Value::kInt) {
    const int64_t n = object.kind == Value::kArray ? int64_t(object.array->size()) : int64_t(object.s.size());
    int64_t i = key.i < 0 ? key.i + n : key.i;
    if (i < 0 || i >= n) return Value();
    return object.kind == Value::kArray ? (*object.array)[size_t(i)] : Value::Str(object.s.substr(size_t(i), 1));
  }
  if (key.kind == Value::kString && key.s == "length" && object.kind == Value::kArray) {
    return Value::Int(int64_t(object.array->size()));
  }
  if (key.kind == Value::kString && key.s == "length" && object.kind == Value::kString) {
    return Value::Int(int64_t(object.s.size()));
  }
  return Value();
}

Value Renderer::Slice(const Node& e) {
  const Value object = Eval(*e.kids[0]);
  auto part = [&](int k, int64_t fallback) {
    if (!e.kids[k]) return fallback;
    const Value v = Eval(*e.kids[k]);
    if (v.kind == Value::kNone || v.kind == Value::kUndefined) return fallback;
    if (v.kind != Value::kInt) Fail(e, "slice indices must be integers");
    return v.i;
  };
  int64_t n;
  if (object.kind == Value::kArray) {
    n = int64_t(object.array->size());
  } else if (object.kind == Value::kString) {
    n = int64_t(object.s.size());
  } else {
    Fail(e, absl::StrCat("cannot slice a ", KindName(object)));
  }
  const int64_t step = part(3, 1);
  if (step == 0) Fail(e, "slice step cannot be zero");
  auto clamp = [&](int64_t i, bool is_start) {
    if (i < 0) i += n;
    if (step > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
    (void)is_start;
  };
  const int64_t start = clamp(part(1, step > 0 ? 0 : n - 1), true);
  const int64_t stop = e.kids[2] ? clamp(part(2, step > 0 ? n : -1 - n), false) : (step > 0 ? n : -1);
  Value::Array a;
  std::string s;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (object.kind == Value::kArray) {
      a.push_back((*object.array)[size_t(i)]);
    } else {
      s += object.s[size_t(i)];
    }
  }
  return object.kind == Value::kArray ? Value::Arr(std::move(a)) : Value::Str(s);
}

Value Renderer::Binary(const Node& e) {
  const std::string& op = e.text;
  Value left = Eval(*e.kids[0]);
  if (op == "and") return Truthy(left) ? Eval(*e.kids[1]) : left;
  if (op == "or") return Truthy(left) ? left : Eval(*e.kids[1]);
  const Value right = Eval(*e.kids[1]);
  if (op == "==") return Value::Bool(Equal(left, right));
  if (op == "!=") return Value::Bool(!Equal(left, right));
  // The reference refuses any other operation on undefined or none, but "x in undefined".
  if (left.kind == Value::kUndefined || right.kind == Value::kUndefined) {
    if (right.kind == Value::kUndefined && (op == "in" || op == "not in")) return Value::Bool(op == "not in");
    Fail(e, "'" + op + "' on an undefined value");
  }
  if (left.kind == Value::kNone || right.kind == Value::kNone) Fail(e, "'" + op + "' on none");
  if (op == "~") return Value::Str(JsText(left) + JsText(right));
  if (op == "in" || op == "not in") {
    bool found = false;
    if (right.kind == Value::kString) {
      if (left.kind != Value::kString) Fail(e, "'in <string>' needs a string on the left");
      found = right.s.find(left.s) != std::string::npos;
    } else if (right.kind == Value::kArray) {
      for (const Value& x : *right.array) found = found || Equal(left, x);
    } else if (right.IsObject()) {
      found = right.Find(ToText(left)) != nullptr;
    } else if (right.kind != Value::kUndefined && right.kind != Value::kNone) {
      Fail(e, absl::StrCat("'in' on a ", KindName(right)));
    }
    return Value::Bool(found == (op == "in"));
  }
  if (op == "+") {
    if (left.kind == Value::kString || right.kind == Value::kString) return Value::Str(JsText(left) + JsText(right));
    if (left.kind == Value::kArray && right.kind == Value::kArray) {
      Value::Array a = *left.array;
      a.insert(a.end(), right.array->begin(), right.array->end());
      return Value::Arr(std::move(a));
    }
  }
  if (op == "*" && left.kind == Value::kString && right.kind == Value::kInt) {
    std::string s;
    for (int64_t k = 0; k < right.i; ++k) s += left.s;
    return Value::Str(s);
  }
  if (left.kind == Value::kString && right.kind == Value::kString) {
    if (op == "<") return Value::Bool(left.s < right.s);
    if (op == ">") return Value::Bool(left.s > right.s);
    if (op == "<=") return Value::Bool(left.s <= right.s);
    if (op == ">=") return Value::Bool(left.s >= right.s);
  }
  if (!left.IsNumber() || !right.IsNumber()) {
    Fail(e, absl::StrCat("'", op, "' on a ", KindName(left), " and a ", KindName(right)));
  }
  const bool ints = left.kind == Value::kInt && right.kind == Value::kInt;
  const double a = left.Number(), b = right.Number();
  if (op == "<") return Value::Bool(a < b);
  if (op == ">") return Value::Bool(a > b);
  if (op == "<=") return Value::Bool(a <= b);
  if (op == ">=") return Value::Bool(a >= b);
  if (op == "+") return ints ? Value::Int(left.i + right.i) : Value::Float(a + b);
  if (op == "-") return ints ? Value::Int(left.i - right.i) : Value::Float(a - b);
  if (op == "*") return ints ? Value::Int(left.i * right.i) : Value::Float(a * b);
  if (op == "/") return Value::Float(a / b);
  if ((op == "//" || op == "%") && b == 0) Fail(e, "division by zero");
  if (op == "//") return ints ? Value::Int(int64_t(std::floor(a / b))) : Value::Float(std::floor(a / b));
  if (op == "%") {
    if (ints) return Value::Int(((left.i % right.i) + right.i) % right.i);
    return Value::Float(a - b * std::floor(a / b));
  }
  Fail(e, "unknown operator " + op);
}

Value Renderer::Call(const Node& e) {
  const Node& callee = *e.kids[0];
  Args args = EvalArgs(e, 1);
  if (callee.type == Node::kAttr) {
    const Value object = Eval(*callee.kids[0]);
    return Method(e, object, callee.text, args);
  }
  const Value f = Eval(callee);
  if (f.kind == Value::kMacro) return CallMacro(e, *f.macro, args);
  if (callee.type != Node::kName || f.kind != Value::kUndefined) Fail(e, "not callable");
  const std::string& name = callee.text;
  if (name == "raise_exception") {
    Fail(e, args.positional.empty() ? "raise_exception" : ToText(args.positional[0]));
  }
  if (name == "namespace") {
    Value ns = Value::Obj({}, Value::kNamespace);
    for (auto& [k, v] : args.keyword) ns.Set(k, v);
    return ns;
  }
  if (name == "range") {
    std::vector<int64_t> r;
    for (const Value& v : args.positional) {
      if (v.kind != Value::kInt) Fail(e, "range() takes integers");
      r.push_back(v.i);
    }
    if (r.empty() || r.size() > 3) Fail(e, "range() takes 1 to 3 arguments");
    const int64_t start = r.size() == 1 ? 0 : r[0], stop = r.size() == 1 ? r[0] : r[1], step = r.size() == 3 ? r[2] : 1;
    if (step == 0) Fail(e, "range() step cannot be zero");
    Value::Array a;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) a.push_back(Value::Int(i));
    return Value::Arr(std::move(a));
  }
  if (name == "strftime_now") {
    const Value* format = args.Get(0, "format");
    return Value::Str(StrFTimeNow(format ? ToText(*format) : ""));
  }
  Fail(e, "unknown function '" + name + "'");
}

Value Renderer::CallMacro(const Node& e, const Node& macro, const Args& args) {
  Value frame = Value::Obj();
  for (size_t k = 0; k < macro.names.size(); ++k) {
    const Value* given = args.Get(k, macro.names[k].c_str());
    if (given) {
      frame.Set(macro.names[k], *given);
    } else if (macro.kids[k + 1]) {
      frame.Set(macro.names[k], Eval(*macro.kids[k + 1]));
    } else {
      frame.Set(macro.names[k], Value());
    }
  }
  (void)e;
  std::vector<Value> saved(frames_.begin() + 1, frames_.end());
  frames_.resize(1);
  frames_.push_back(std::move(frame));
  std::string out;
  Block(*macro.kids[0], out);
  flow_ = kNormal;
  frames_.resize(1);
  frames_.insert(frames_.end(), saved.begin(), saved.end());
  return Value::Str(out);
}

}  // namespace jinja

absl::StatusOr<JinjaTemplate> JinjaTemplate::Parse(const std::string& source, const std::string& where) {
  std::string error;
  std::unique_ptr<jinja::Node> root = jinja::Parse(source, &error);
  if (!root) return absl::InvalidArgumentError(absl::StrCat(where, ": ", error));
  JinjaTemplate t;
  t.root_ = std::move(root);
  t.where_ = where;
  return t;
}

absl::StatusOr<std::string> JinjaTemplate::Render(const nlohmann::ordered_json& context) const {
  if (!context.is_object()) return absl::InvalidArgumentError(where_ + ": the context must be a JSON object");
  try {
    jinja::Renderer r(jinja::FromJson(context));
    std::string out;
    r.Block(*root_, out);
    return out;
  } catch (const jinja::RenderError& e) {
    return absl::InvalidArgumentError(absl::StrCat(where_, ": line ", e.line, ": ", e.what()));
  }
}

}  // namespace steady
