// Jinja values: conversion from JSON, to text and to JSON (as @huggingface/jinja's toString and
// tojson write them), truthiness and equality.
#include "model/text/jinja/jinja_ast.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace steady::jinja {

const Value* Value::Find(const std::string& key) const {
  if (!object) return nullptr;
  for (const auto& [k, v] : *object) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Value::Set(const std::string& key, Value v) {
  for (auto& [k, old] : *object) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  object->emplace_back(key, std::move(v));
}

Value FromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::None();
    case nlohmann::ordered_json::value_t::boolean: return Value::Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned: return Value::Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float: {
      // JSON.parse makes 2.0 the number 2, an integer to the reference.
      const double d = j.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) return Value::Int(int64_t(d));
      return Value::Float(d);
    }
    case nlohmann::ordered_json::value_t::string: return Value::Str(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      Value::Array a;
      for (const auto& x : j) a.push_back(FromJson(x));
      return Value::Arr(std::move(a));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value::Object o;
      for (const auto& [k, v] : j.items()) o.emplace_back(k, FromJson(v));
      return Value::Obj(std::move(o));
    }
    default: return Value();
  }
}

std::string NumberText(double d) {  // JavaScript's Number.prototype.toString for finite numbers
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d);
  std::string s(buf, end);
  const size_t e = s.find('e');
  if (e != std::string::npos) {  // "1e-07" -> "1e-7", "1e+21" stays
    std::string exp = s.substr(e + 1);
    const char sign = exp[0] == '-' ? '-' : '+';
    if (exp[0] == '-' || exp[0] == '+') exp = exp.substr(1);
    while (exp.size() > 1 && exp[0] == '0') exp = exp.substr(1);
    s = s.substr(0, e) + "e" + sign + exp;
  }
  return s;
}

std::string JsonString(const std::string& s) {  // JSON.stringify of a string: non-ASCII kept
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += char(c);
        }
    }
  }
  return out + "\"";
}

std::string ToJson(const Value& v, int indent, int depth, bool undefined_as_null) {
  const std::string item_sep = indent > 0 ? "," : ", ";
  switch (v.kind) {
    case Value::kUndefined: return undefined_as_null ? "null" : "undefined";
    case Value::kNone: return "null";
    case Value::kBool: return v.b ? "true" : "false";
    case Value::kInt: return std::to_string(v.i);
    case Value::kFloat: return NumberText(v.f);
    case Value::kString: return JsonString(v.s);
    case Value::kMacro: return "null";
    default: break;
  }
  const std::string pad = indent > 0 ? "\n" + std::string(size_t(indent) * depth, ' ') : "";
  const std::string child_pad = indent > 0 ? pad + std::string(size_t(indent), ' ') : "";
  std::vector<std::string> core;
  if (v.kind == Value::kArray) {
    for (const Value& x : *v.array) core.push_back(ToJson(x, indent, depth + 1, undefined_as_null));
  } else {
    for (const auto& [k, x] : *v.object) {
      core.push_back(child_pad + JsonString(k) + ": " + ToJson(x, indent, depth + 1, undefined_as_null));
    }
  }
  std::string joined;
  for (size_t i = 0; i < core.size(); ++i) {
    if (i) joined += item_sep;
    if (v.kind == Value::kArray && indent > 0) joined += child_pad;
    joined += core[i];
  }
  const bool open = indent > 0 && !core.empty();
  return v.kind == Value::kArray ? "[" + joined + (open ? pad : "") + "]" : "{" + joined + (open ? pad : "") + "}";
}

namespace {

// Python's str.isprintable() for the characters chat text holds: false for controls (C0, DEL, C1),
// format characters and separators other than the space. Unassigned code points count as printable
// here (Python escapes them; telling them apart needs Unicode's tables).
bool PythonPrintable(char32_t c) {
  if (c < 0x20 || (c >= 0x7f && c <= 0xa0) || c == 0xad) return false;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200f) || (c >= 0x2028 && c <= 0x202f)) return false;
  if ((c >= 0x205f && c <= 0x2064) || (c >= 0x2066 && c <= 0x206f) || c == 0x3000 || c == 0xfeff) return false;
  if (c == 0x061c || c == 0x180e || (c >= 0xfff9 && c <= 0xfffb) || (c >= 0xe000 && c <= 0xf8ff)) return false;
  return true;
}

std::string PythonStringRepr(const std::string& s) {
  const char quote = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    const unsigned char b = s[i];
    const size_t n = b < 0x80 ? 1 : b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
    char32_t c = n == 1 ? b : b & (0x3f >> (n - 1));
    for (size_t k = 1; k < n && i + k < s.size(); ++k) c = (c << 6) | (s[i + k] & 0x3f);
    if (c == '\\' || c == char32_t(quote)) {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (PythonPrintable(c)) {
      out.append(s, i, n);
    } else {
      char buf[16];
      std::snprintf(buf, sizeof buf, c < 0x100 ? "\\x%02x" : c < 0x10000 ? "\\u%04x" : "\\U%08x", unsigned(c));
      out += buf;
    }
    i += n;
  }
  return out + quote;
}

std::string PythonFloatRepr(double d) {  // repr(float): the shortest round trip, exponent past 1e16
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  const std::string sci(buf, end);  // "-1.2345e+17"
  const size_t e = sci.find('e');
  const int exp = std::stoi(sci.substr(e + 1));
  const std::string sign = d < 0 ? "-" : "";
  std::string digits;
  for (size_t i = 0; i < e; ++i) {
    if (std::isdigit(static_cast<unsigned char>(sci[i]))) digits += sci[i];
  }
  std::string out = sign;
  if (exp < -4 || exp >= 16) {
    out.append(digits, 0, 1);
    if (digits.size() > 1) out.append(".").append(digits, 1);
    std::snprintf(buf, sizeof buf, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return out.append(buf);
  }
  if (exp < 0) return out.append("0.").append(size_t(-exp - 1), '0').append(digits);
  const size_t whole = size_t(exp) + 1;
  if (digits.size() <= whole) return out.append(digits).append(whole - digits.size(), '0').append(".0");
  return out.append(digits, 0, whole).append(".").append(digits, whole);
}

}  // namespace

std::string PythonRepr(const Value& v) {
  switch (v.kind) {
    case Value::kUndefined: case Value::kNone: case Value::kMacro: return "None";
    case Value::kBool: return v.b ? "True" : "False";
    case Value::kInt: return std::to_string(v.i);
    case Value::kFloat: return PythonFloatRepr(v.f);
    case Value::kString: return PythonStringRepr(v.s);
    default: break;
  }
  std::string out;
  if (v.kind == Value::kArray) {
    for (const Value& x : *v.array) out += (out.empty() ? "" : ", ") + PythonRepr(x);
    return "[" + out + "]";
  }
  for (const auto& [k, x] : *v.object) out += (out.empty() ? "" : ", ") + PythonStringRepr(k) + ": " + PythonRepr(x);
  return v.kind == Value::kNamespace ? "<Namespace {" + out + "}>" : "{" + out + "}";
}

std::string ToText(const Value& v) {
  switch (v.kind) {
    case Value::kUndefined: case Value::kNone: return "";  // the reference prints none as nothing
    case Value::kBool: return v.b ? "true" : "false";
    case Value::kInt: return std::to_string(v.i);
    case Value::kFloat:
      if (v.f == 0 && std::signbit(v.f)) return "-0.0";
      if (std::isfinite(v.f) && v.f == std::floor(v.f) && std::fabs(v.f) < 1e21) return NumberText(v.f) + ".0";
      return NumberText(v.f);
    case Value::kString: return v.s;
    case Value::kMacro: return "";
    default: return ToJson(v, 0, 0, false);
  }
}

bool Truthy(const Value& v) {
  switch (v.kind) {
    case Value::kUndefined: case Value::kNone: return false;
    case Value::kBool: return v.b;
    case Value::kInt: return v.i != 0;
    case Value::kFloat: return v.f != 0;
    case Value::kString: return !v.s.empty();
    case Value::kArray: return !v.array->empty();
    case Value::kObject: return !v.object->empty();
    default: return true;
  }
}

bool Equal(const Value& a, const Value& b) {
  if (a.IsNumber() && b.IsNumber()) return a.Number() == b.Number();
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::kUndefined: case Value::kNone: return true;
    case Value::kBool: return a.b == b.b;
    case Value::kString: return a.s == b.s;
    case Value::kArray:
      if (a.array->size() != b.array->size()) return false;
      for (size_t i = 0; i < a.array->size(); ++i) {
        if (!Equal((*a.array)[i], (*b.array)[i])) return false;
      }
      return true;
    case Value::kObject: case Value::kNamespace:
      if (a.object->size() != b.object->size()) return false;
      for (const auto& [k, x] : *a.object) {
        const Value* y = b.Find(k);
        if (!y || !Equal(x, *y)) return false;
      }
      return true;
    default: return a.macro == b.macro;
  }
}

}  // namespace steady::jinja
