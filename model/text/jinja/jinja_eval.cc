// Rendering a parsed template: statements, expressions, and the filters, tests, methods and globals
// chat templates use, with @huggingface/jinja's semantics where it differs from Python's Jinja (it is
// the reference the tests compare with). Errors are thrown inside and become a Status at Render().
#include <algorithm>
#include <cmath>
#include <ctime>
#include <stdexcept>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "model/text/jinja/jinja.h"
#include "model/text/jinja/jinja_ast.h"

namespace steady {
namespace jinja {
namespace {

struct RenderError : std::runtime_error {
  int line;
  RenderError(int l, const std::string& m) : std::runtime_error(m), line(l) {}
};

const char* KindName(const Value& v) {
  static const char* kNames[] = {"undefined", "none", "boolean", "integer", "float", "string", "list", "dict",
                                 "namespace", "macro"};
  return kNames[v.kind];
}

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

std::string Strip(const std::string& s, const Value* chars, bool left, bool right) {
  const std::string set = chars && chars->kind == Value::kString ? chars->s : " \t\n\r\f\v";
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e && set.find(s[b]) != std::string::npos) ++b;
  }
  if (right) {
    while (e > b && set.find(s[e - 1]) != std::string::npos) --e;
  }
  return s.substr(b, e - b);
}

std::string Replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  if (from.empty()) return s;
  std::string out;
  size_t p = 0;
  for (int64_t done = 0; count < 0 || done < count; ++done) {
    const size_t q = s.find(from, p);
    if (q == std::string::npos) break;
    out += s.substr(p, q - p) + to;
    p = q + from.size();
  }
  return out + s.substr(p);
}

std::string Case(std::string s, bool upper) {
  for (char& c : s) c = upper ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c));
  return s;
}

std::string Title(const std::string& s) {
  std::string out = s;
  bool start = true;
  for (char& c : out) {
    const bool space = c == ' ' || c == '\t' || c == '\n';
    c = start ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c));
    start = space;
  }
  return out;
}

std::string StrFTimeNow(const std::string& format) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  std::string out;
  char buf[64];
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%' || i + 1 == format.size() || std::string("YmdbBHM%").find(format[i + 1]) == std::string::npos) {
      out += format[i];
      continue;
    }
    const char spec[3] = {'%', format[++i], 0};
    std::strftime(buf, sizeof buf, spec, &tm);
    out += buf;
  }
  return out;
}

// What the reference's "~" and string "+" make of a value: JavaScript's toString() of the raw value
// (2.0 is "2", a list joins its items with ",", a dict is "[object Map]").
std::string JsText(const Value& v) {
  if (v.kind == Value::kFloat) return NumberText(v.f);
  if (v.IsObject()) return "[object Map]";
  if (v.kind == Value::kArray) {
    std::string out;
    for (size_t k = 0; k < v.array->size(); ++k) out += (k ? "," : "") + ToText((*v.array)[k]);
    return out;
  }
  return ToText(v);
}

class Renderer {
 public:
  explicit Renderer(Value globals) { frames_.push_back(std::move(globals)); }

  void Block(const Node& block, std::string& out) {
    for (const auto& s : block.kids) {
      if (flow_ != kNormal) return;
      Statement(*s, out);
    }
  }

 private:
  enum Flow { kNormal, kBreak, kContinue };

  [[noreturn]] static void Fail(const Node& at, const std::string& what) { throw RenderError(at.line, what); }

  Value Lookup(const std::string& name) const {
    for (size_t i = frames_.size(); i-- > 0;) {
      if (const Value* v = frames_[i].Find(name)) return *v;
    }
    return Value();
  }

  void Statement(const Node& s, std::string& out) {
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

  void For(const Node& s, std::string& out) {
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

  void Set(const Node& s) {
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

  Args EvalArgs(const Node& call, size_t first) {
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

  Value Eval(const Node& e) {
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

  Value Member(const Node& e, const Value& object, const Value& key) {
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

  Value Slice(const Node& e) {
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

  Value Binary(const Node& e) {
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

  Value Call(const Node& e) {
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

  Value CallMacro(const Node& e, const Node& macro, const Args& args) {
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

  Value Method(const Node& e, const Value& object, const std::string& name, const Args& args) {
    const Value* a0 = args.positional.size() > 0 ? &args.positional[0] : nullptr;
    const Value* a1 = args.positional.size() > 1 ? &args.positional[1] : nullptr;
    if (object.kind == Value::kString) {
      const std::string& s = object.s;
      if (name == "startswith" || name == "endswith") {
        if (!a0 || a0->kind != Value::kString) Fail(e, name + "() takes a string");
        const std::string& x = a0->s;
        const bool ok = x.size() <= s.size() &&
                        (name == "startswith" ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0);
        return Value::Bool(ok);
      }
      // @huggingface/jinja strips whitespace whatever the argument (Python would strip its characters).
      if (name == "strip") return Value::Str(Strip(s, nullptr, true, true));
      if (name == "lstrip") return Value::Str(Strip(s, nullptr, true, false));
      if (name == "rstrip") return Value::Str(Strip(s, nullptr, false, true));
      if (name == "upper") return Value::Str(Case(s, true));
      if (name == "lower") return Value::Str(Case(s, false));
      if (name == "title") return Value::Str(Title(s));
      if (name == "capitalize") return Value::Str(s.empty() ? s : Case(s.substr(0, 1), true) + s.substr(1));
      if (name == "replace") {
        if (!a0 || !a1) Fail(e, "replace() takes 2 strings");
        const Value* count = args.Get(2, "count");
        return Value::Str(Replace(s, ToText(*a0), ToText(*a1), count ? count->i : -1));
      }
      if (name == "split") {
        Value::Array parts;
        const Value* max = args.Get(1, "maxsplit");
        int64_t left = max && max->kind == Value::kInt ? max->i : -1;
        if (!a0 || a0->kind == Value::kNone) {  // on whitespace runs
          size_t p = 0;
          while (p < s.size()) {
            while (p < s.size() && std::isspace(static_cast<unsigned char>(s[p]))) ++p;
            if (p >= s.size()) break;
            if (left == 0) {
              parts.push_back(Value::Str(Strip(s.substr(p), nullptr, false, true)));
              break;
            }
            size_t q = p;
            while (q < s.size() && !std::isspace(static_cast<unsigned char>(s[q]))) ++q;
            parts.push_back(Value::Str(s.substr(p, q - p)));
            --left;
            p = q;
          }
          return Value::Arr(std::move(parts));
        }
        const std::string sep = ToText(*a0);
        if (sep.empty()) Fail(e, "split() with an empty separator");
        size_t p = 0;
        for (;;) {
          const size_t q = left == 0 ? std::string::npos : s.find(sep, p);
          if (q == std::string::npos) break;
          parts.push_back(Value::Str(s.substr(p, q - p)));
          p = q + sep.size();
          --left;
        }
        parts.push_back(Value::Str(s.substr(p)));
        return Value::Arr(std::move(parts));
      }
    }
    if (object.IsObject()) {
      if (name == "get") {
        const Value* v = a0 ? object.Find(ToText(*a0)) : nullptr;
        return v ? *v : (a1 ? *a1 : Value::None());
      }
      if (name == "items" || name == "keys" || name == "values") {
        Value::Array a;
        for (const auto& [k, v] : *object.object) {
          if (name == "items") a.push_back(Value::Arr({Value::Str(k), v}));
          if (name == "keys") a.push_back(Value::Str(k));
          if (name == "values") a.push_back(v);
        }
        return Value::Arr(std::move(a));
      }
      const Value* member = object.Find(name);
      if (member && member->kind == Value::kMacro) return CallMacro(e, *member->macro, args);
    }
    Fail(e, absl::StrCat("unknown method '", name, "' of a ", KindName(object)));
  }

  Value Filter(const Node& e, const Value& v);
  bool Test(const Node& e, const Value& v);
  bool TestByName(const Node& e, const std::string& name, const Value& v, const Value* arg);

  std::vector<Value> frames_;
  Flow flow_ = kNormal;
};

bool Renderer::TestByName(const Node& e, const std::string& name, const Value& v, const Value* arg) {
  if (name == "defined") return v.kind != Value::kUndefined;
  if (name == "undefined") return v.kind == Value::kUndefined;
  if (name == "none") return v.kind == Value::kNone;
  if (name == "string") return v.kind == Value::kString;
  if (name == "number") return v.IsNumber();
  if (name == "integer") return v.kind == Value::kInt;
  if (name == "float") return v.kind == Value::kFloat;
  if (name == "boolean") return v.kind == Value::kBool;
  if (name == "true") return v.kind == Value::kBool && v.b;
  if (name == "false") return v.kind == Value::kBool && !v.b;
  if (name == "mapping") return v.IsObject();
  if (name == "iterable" || name == "sequence") return v.kind == Value::kArray || v.kind == Value::kString || v.IsObject();
  if (name == "callable") return v.kind == Value::kMacro;
  if (name == "odd" || name == "even") {
    if (v.kind != Value::kInt) Fail(e, "'" + name + "' tests an integer");
    return (v.i % 2 != 0) == (name == "odd");
  }
  if (name == "lower") return v.kind == Value::kString && Case(v.s, false) == v.s;
  if (name == "upper") return v.kind == Value::kString && Case(v.s, true) == v.s;
  if (name == "equalto" || name == "eq" || name == "==" || name == "sameas") return arg && Equal(v, *arg);
  if (name == "ne" || name == "!=") return arg && !Equal(v, *arg);
  if (name == "in") {
    if (!arg) return false;
    if (arg->kind == Value::kArray) {
      for (const Value& x : *arg->array) {
        if (Equal(v, x)) return true;
      }
      return false;
    }
    if (arg->kind == Value::kString && v.kind == Value::kString) return arg->s.find(v.s) != std::string::npos;
    return arg->IsObject() && arg->Find(ToText(v));
  }
  Fail(e, "unknown test '" + name + "'");
}

bool Renderer::Test(const Node& e, const Value& v) {
  Args args = EvalArgs(e, 1);
  return TestByName(e, e.text, v, args.positional.empty() ? nullptr : &args.positional[0]);
}

Value Renderer::Filter(const Node& e, const Value& v) {
  Args args = EvalArgs(e, 1);
  const std::string& name = e.text;
  const Value* a0 = args.positional.empty() ? nullptr : &args.positional[0];
  auto need_array = [&] {
    if (v.kind != Value::kArray) Fail(e, absl::StrCat("filter '", name, "' on a ", KindName(v)));
  };
  if (name == "length" || name == "count") {
    if (v.kind == Value::kString) return Value::Int(int64_t(v.s.size()));
    if (v.kind == Value::kArray) return Value::Int(int64_t(v.array->size()));
    if (v.IsObject()) return Value::Int(int64_t(v.object->size()));
    Fail(e, absl::StrCat("length of a ", KindName(v)));
  }
  if (name == "safe") return v;
  const bool string_filter = name == "trim" || name == "upper" || name == "lower" || name == "title" ||
                             name == "capitalize" || name == "replace" || name == "indent";
  if (string_filter && v.kind != Value::kString) {  // as the reference, which has them for strings only
    Fail(e, absl::StrCat("cannot apply filter '", name, "' to a ", KindName(v)));
  }
  if (name == "string") return Value::Str(ToText(v));
  if (name == "trim") return Value::Str(Strip(ToText(v), nullptr, true, true));
  if (name == "upper") return Value::Str(Case(ToText(v), true));
  if (name == "lower") return Value::Str(Case(ToText(v), false));
  if (name == "title") return Value::Str(Title(ToText(v)));
  if (name == "capitalize") {
    const std::string s = ToText(v);
    return Value::Str(s.empty() ? s : Case(s.substr(0, 1), true) + s.substr(1));  // the rest kept, as the reference
  }
  if (name == "tojson") {
    const Value* indent = args.Get(0, "indent");
    return Value::Str(ToJson(v, indent && indent->kind == Value::kInt ? int(indent->i) : 0, 0, true));
  }
  if (name == "default" || name == "d") {
    const Value* boolean = args.Get(1, "boolean");
    const bool use_default = (boolean && Truthy(*boolean)) ? !Truthy(v) : v.kind == Value::kUndefined;
    return use_default ? (a0 ? *a0 : Value::Str("")) : v;
  }
  if (name == "items") {
    if (!v.IsObject()) Fail(e, absl::StrCat("items of a ", KindName(v)));
    Value::Array a;
    for (const auto& [k, x] : *v.object) a.push_back(Value::Arr({Value::Str(k), x}));
    return Value::Arr(std::move(a));
  }
  if (name == "list") {
    if (v.kind == Value::kArray) return v;
    if (v.kind == Value::kString) {
      Value::Array a;
      for (char c : v.s) a.push_back(Value::Str(std::string(1, c)));
      return Value::Arr(std::move(a));
    }
    if (v.IsObject()) {
      Value::Array a;
      for (const auto& [k, x] : *v.object) a.push_back(Value::Str(k));
      return Value::Arr(std::move(a));
    }
    Fail(e, absl::StrCat("list of a ", KindName(v)));
  }
  if (name == "first" || name == "last") {
    if (v.kind == Value::kString) return v.s.empty() ? Value() : Value::Str(name == "first" ? v.s.substr(0, 1) : v.s.substr(v.s.size() - 1));
    need_array();
    if (v.array->empty()) return Value();
    return name == "first" ? v.array->front() : v.array->back();
  }
  if (name == "reverse") {
    if (v.kind == Value::kString) return Value::Str(std::string(v.s.rbegin(), v.s.rend()));
    need_array();
    return Value::Arr(Value::Array(v.array->rbegin(), v.array->rend()));
  }
  if (name == "join") {
    need_array();
    const Value* attribute = args.Get(1, "attribute");
    std::string out;
    for (size_t k = 0; k < v.array->size(); ++k) {
      if (k && a0) out += ToText(*a0);
      const Value& x = (*v.array)[k];
      out += ToText(attribute && x.IsObject() && x.Find(ToText(*attribute)) ? *x.Find(ToText(*attribute)) : x);
    }
    return Value::Str(out);
  }
  if (name == "replace") {
    if (args.positional.size() < 2) Fail(e, "replace takes 2 strings");
    const Value* count = args.Get(2, "count");
    return Value::Str(Replace(ToText(v), ToText(args.positional[0]), ToText(args.positional[1]), count ? count->i : -1));
  }
  if (name == "abs") {
    if (!v.IsNumber()) Fail(e, "abs of a non-number");
    return v.kind == Value::kInt ? Value::Int(std::llabs(v.i)) : Value::Float(std::fabs(v.f));
  }
  if (name == "int") {
    if (v.kind == Value::kInt) return v;
    if (v.kind == Value::kFloat) return Value::Int(int64_t(v.f));
    if (v.kind == Value::kString) {
      try { return Value::Int(std::stoll(v.s)); } catch (...) { return a0 ? *a0 : Value::Int(0); }
    }
    return a0 ? *a0 : Value::Int(0);
  }
  if (name == "unique") {
    need_array();
    Value::Array a;
    for (const Value& x : *v.array) {
      if (std::none_of(a.begin(), a.end(), [&](const Value& y) { return Equal(x, y); })) a.push_back(x);
    }
    return Value::Arr(std::move(a));
  }
  if (name == "selectattr" || name == "rejectattr" || name == "select" || name == "reject") {
    need_array();
    const bool by_attr = name == "selectattr" || name == "rejectattr";
    const bool keep_true = name == "selectattr" || name == "select";
    const size_t test_at = by_attr ? 1 : 0;
    Value::Array a;
    for (const Value& x : *v.array) {
      Value subject = x;
      if (by_attr) {
        if (!a0) Fail(e, name + " needs an attribute");
        const Value* member = x.IsObject() ? x.Find(ToText(*a0)) : nullptr;
        subject = member ? *member : Value();
      }
      bool result;
      if (args.positional.size() > test_at) {
        const Value* arg = args.positional.size() > test_at + 1 ? &args.positional[test_at + 1] : nullptr;
        result = TestByName(e, ToText(args.positional[test_at]), subject, arg);
      } else {
        result = Truthy(subject);
      }
      if (result == keep_true) a.push_back(x);
    }
    return Value::Arr(std::move(a));
  }
  if (name == "map") {
    need_array();
    const Value* attribute = args.Get(99, "attribute");
    Value::Array a;
    for (const Value& x : *v.array) {
      if (attribute) {
        const Value* member = x.IsObject() ? x.Find(ToText(*attribute)) : nullptr;
        const Value* fallback = args.Get(99, "default");
        a.push_back(member ? *member : (fallback ? *fallback : Value()));
      } else {
        if (!a0) Fail(e, "map needs a filter or attribute=");
        Node call;
        call.type = Node::kFilter;
        call.line = e.line;
        call.text = ToText(*a0);
        call.names.push_back("");
        call.kids.push_back(nullptr);
        a.push_back(Filter(call, x));
      }
    }
    return Value::Arr(std::move(a));
  }
  if (name == "indent") {
    const Value* width = args.Get(0, "width");
    const Value* first = args.Get(1, "first");
    const std::string pad = width && width->kind == Value::kString ? width->s : std::string(width ? size_t(width->i) : 4, ' ');
    const std::string s = ToText(v);
    std::string out;
    for (size_t k = 0; k < s.size(); ++k) {
      out += s[k];
      if (s[k] == '\n' && k + 1 < s.size() && s[k + 1] != '\n') out += pad;
    }
    return Value::Str((first && Truthy(*first) ? pad : "") + out);
  }
  Fail(e, "unknown filter '" + name + "'");
}

}  // namespace
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
