// The methods, filters, tests and globals chat templates call (string and dict methods, tojson,
// selectattr, map, strftime_now, ...), as @huggingface/jinja implements them.
#include <algorithm>
#include <cmath>
#include <ctime>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "model/text/jinja/jinja_render.h"

namespace steady::jinja {

const char* KindName(const Value& v) {
  static const char* kNames[] = {"undefined", "none", "boolean", "integer", "float", "string", "list", "dict",
                                 "namespace", "macro"};
  return kNames[v.kind];
}


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

std::string JsText(const Value& v) {
  if (v.kind == Value::kFloat) return NumberText(v.f);
  if (v.IsObject()) return "[object Map]";
  if (v.kind == Value::kArray) {
    std::string out;
    for (size_t k = 0; k < v.array->size(); ++k) {
      if (k) out += ',';
      out += ToText((*v.array)[k]);
    }
    return out;
  }
  return ToText(v);
}

Value Renderer::Method(const Node& e, const Value& object, const std::string& name, const Args& args) {
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
  if (name == "string") {
    // @huggingface/jinja refuses a dict or none here; Jinja2, which transformers renders with, writes
    // Python's repr (SmolLM3's template lists its tools so).
    return Value::Str(v.IsObject() || v.kind == Value::kNone ? PythonRepr(v) : ToText(v));
  }
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

}  // namespace steady::jinja
