// JSON Schema -> GBNF (json_schema.h). Each object and array schema, and each $defs entry, becomes
// a rule named after where it is; scalars are written inline. Whitespace between tokens is bounded
// and numbers have at most 16 digits, so a model cannot wander off in either.
#include "model/constrain/json_schema.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/constrain/grammar.h"

namespace steady {
namespace {

using Json = nlohmann::ordered_json;

constexpr char kCommonRules[] = R"(ws ::= | " " | "\n"{1,2} [ \t]{0,20}
char ::= [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
string ::= "\"" char* "\""
integer ::= "-"? ("0" | [1-9] [0-9]{0,15})
number ::= integer ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?
boolean ::= "true" | "false"
null ::= "null"
value ::= object | array | string | number | boolean | null
object ::= "{" ws (string ws ":" ws value (ws "," ws string ws ":" ws value)* ws)? "}"
array ::= "[" ws (value (ws "," ws value)* ws)? "]"
)";

// A GBNF literal for `text` (UTF-8).
std::string Literal(std::string_view text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20 || c == 0x7F) {
      out += absl::StrCat("\\x", absl::Hex(c, absl::kZeroPad2));
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

// ---- Integer ranges as GBNF: decimal strings without leading zeros.
std::string Nines(size_t n) { return std::string(n, '9'); }

// Same-length decimal strings a <= x <= b.
std::string SameLength(const std::string& a, const std::string& b) {
  if (a.empty()) return "";
  const size_t rest = a.size() - 1;
  auto tail = [&](const std::string& lo, const std::string& hi) {
    std::string t = SameLength(lo, hi);
    return t.empty() ? "" : " " + t;
  };
  if (a[0] == b[0]) return absl::StrCat("\"", std::string(1, a[0]), "\"", tail(a.substr(1), b.substr(1)));
  const bool a_rest_zero = a.find_first_not_of('0', 1) == std::string::npos;
  const bool b_rest_nine = b.find_first_not_of('9', 1) == std::string::npos;
  std::string any_rest = rest > 0 ? absl::StrCat(" [0-9]{", rest, "}") : "";
  if (a_rest_zero && b_rest_nine) return absl::StrCat("[", std::string(1, a[0]), "-", std::string(1, b[0]), "]", any_rest);
  std::vector<std::string> alts;
  alts.push_back(absl::StrCat("\"", std::string(1, a[0]), "\"", tail(a.substr(1), Nines(rest))));
  if (a[0] + 1 <= b[0] - 1) {
    alts.push_back(absl::StrCat("[", std::string(1, char(a[0] + 1)), "-", std::string(1, char(b[0] - 1)), "]", any_rest));
  }
  alts.push_back(absl::StrCat("\"", std::string(1, b[0]), "\"", tail(std::string(rest, '0'), b.substr(1))));
  return "(" + absl::StrJoin(alts, " | ") + ")";
}

std::string NonNegativeRange(int64_t lo, int64_t hi) {
  std::vector<std::string> alts;
  const std::string los = std::to_string(lo), his = std::to_string(hi);
  for (size_t d = los.size(); d <= his.size(); ++d) {
    int64_t first = 1;
    for (size_t i = 1; i < d; ++i) first *= 10;
    if (d == 1) first = 0;
    const int64_t a = std::max(lo, first);
    const int64_t b = d == his.size() ? hi : first * 10 - 1 + (d == 1 ? 10 : 0);
    if (a > b) continue;
    alts.push_back(SameLength(std::to_string(a), std::to_string(b)));
  }
  return alts.size() == 1 ? alts[0] : "(" + absl::StrJoin(alts, " | ") + ")";
}

constexpr int64_t kMaxInteger = 9999999999999999;  // 16 digits, as the generic integer rule

std::string IntegerRange(int64_t lo, int64_t hi) {
  if (lo >= 0) return NonNegativeRange(lo, hi);
  if (hi < 0) return "\"-\" " + NonNegativeRange(-hi, -lo);
  return absl::StrCat("(\"-\" ", NonNegativeRange(1, -lo), " | ", NonNegativeRange(0, hi), ")");
}

// ---- Regular expressions (a pattern's subset) as GBNF, over a JSON string's content.
constexpr char kStringChar[] = R"([^"\\\x7F\x00-\x1F])";

class PatternConverter {
 public:
  explicit PatternConverter(std::string_view p) : p_(p) {}
  absl::StatusOr<std::string> Convert() {
    bool anchored_start = false, anchored_end = false;
    if (!p_.empty() && p_[0] == '^') {
      anchored_start = true;
      p_.remove_prefix(1);
    }
    if (!p_.empty() && p_.back() == '$' && (p_.size() < 2 || p_[p_.size() - 2] != '\\')) {
      anchored_end = true;
      p_.remove_suffix(1);
    }
    std::string body = Alternatives();
    if (!error_.empty()) return absl::InvalidArgumentError(error_);
    if (i_ < p_.size()) return absl::InvalidArgumentError(absl::StrCat("unexpected `", std::string(1, p_[i_]), "`"));
    // JSON Schema patterns are unanchored: without ^ or $ any text may come before or after.
    return absl::StrCat(anchored_start ? "" : "char* ", "(", body, ")", anchored_end ? "" : " char*");
  }

 private:
  std::string Alternatives() {
    std::vector<std::string> alts = {Sequence()};
    while (i_ < p_.size() && p_[i_] == '|') {
      ++i_;
      alts.push_back(Sequence());
    }
    return absl::StrJoin(alts, " | ");
  }
  std::string Sequence() {
    std::vector<std::string> items;
    while (i_ < p_.size() && p_[i_] != '|' && p_[i_] != ')' && error_.empty()) {
      std::string atom = Atom();
      if (i_ < p_.size()) {
        const char q = p_[i_];
        if (q == '*' || q == '+' || q == '?') {
          atom = "(" + atom + ")" + std::string(1, q);
          ++i_;
        } else if (q == '{') {
          const size_t close = p_.find('}', i_);
          if (close == std::string_view::npos) {
            error_ = "unterminated {";
            break;
          }
          atom = absl::StrCat("(", atom, ")", std::string(p_.substr(i_, close - i_ + 1)));
          i_ = close + 1;
        }
        if (i_ < p_.size() && (p_[i_] == '?' || p_[i_] == '+')) error_ = "lazy and possessive quantifiers are not supported";
      }
      items.push_back(std::move(atom));
    }
    return items.empty() ? "\"\"" : absl::StrJoin(items, " ");
  }
  std::string Atom() {
    const char c = p_[i_++];
    switch (c) {
      case '(': {
        if (p_.substr(i_, 2) == "?:") i_ += 2;
        else if (i_ < p_.size() && p_[i_] == '?') error_ = "lookaround and named groups are not supported";
        std::string inner = Alternatives();
        if (i_ >= p_.size() || p_[i_] != ')') error_ = "unbalanced (";
        ++i_;
        return "(" + inner + ")";
      }
      case '.': return kStringChar;
      case '[': return Class();
      case '\\': return Escape(false);
      case '^': case '$': error_ = "^ and $ only at the pattern's ends"; return "";
      default: return CharLiteral(uint8_t(c));
    }
  }
  // One byte of the pattern as it appears inside a JSON string (quote and backslash escaped).
  static std::string CharLiteral(uint8_t c) {
    if (c == '"') return R"("\\\"")";
    if (c == '\\') return R"("\\\\")";
    return Literal(std::string(1, char(c)));
  }
  std::string Escape(bool in_class) {
    if (i_ >= p_.size()) {
      error_ = "a trailing backslash";
      return "";
    }
    const char e = p_[i_++];
    switch (e) {
      case 'd': return in_class ? "0-9" : "[0-9]";
      case 'w': return in_class ? "a-zA-Z0-9_" : "[a-zA-Z0-9_]";
      case 's': return in_class ? " " : "\" \"";  // inside a JSON string only the space needs no escape
      case 'D': case 'W': case 'S': error_ = "\\D, \\W and \\S are not supported"; return "";
      default:
        if (std::isalnum(static_cast<unsigned char>(e))) {
          error_ = absl::StrCat("the escape \\", std::string(1, e), " is not supported");
          return "";
        }
        if (in_class) return (e == ']' || e == '\\' || e == '-' || e == '^') ? std::string("\\") + e : std::string(1, e);
        return CharLiteral(uint8_t(e));
    }
  }
  std::string Class() {
    std::string out = "[";
    if (i_ < p_.size() && p_[i_] == '^') {
      error_ = "negated classes [^...] are not supported in a pattern";
      return "";
    }
    while (i_ < p_.size() && p_[i_] != ']' && error_.empty()) {
      const char c = p_[i_++];
      if (c == '\\') {
        out += Escape(true);
      } else if (c == '"' || uint8_t(c) < 0x20) {
        error_ = "a quote or control character in a class";
      } else if (c == '[' || c == ']') {
        out += std::string("\\") + c;
      } else {
        out += c;
      }
    }
    if (i_ >= p_.size()) error_ = "unterminated [";
    ++i_;
    return out + "]";
  }

  std::string_view p_;
  size_t i_ = 0;
  std::string error_;
};

// ---- The schema walk.
class SchemaConverter {
 public:
  explicit SchemaConverter(const Json& root) : root_(root) {}

  absl::StatusOr<std::string> Convert() {
    const std::string top = Visit(root_, "");
    if (!error_.ok()) return error_;
    std::string out = absl::StrCat("root ::= ", top, "\n");
    for (const auto& [name, body] : rules_) absl::StrAppend(&out, name, " ::= ", body, "\n");
    return out + kCommonRules;
  }

 private:
  void Fail(const std::string& path, const std::string& what) {
    if (error_.ok()) error_ = absl::InvalidArgumentError(absl::StrCat("schema: ", path.empty() ? "/" : path, ": ", what));
  }

  std::string NewRule(const std::string& path, std::string body) {
    std::string name = "s";
    for (char c : path) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
    while (rules_.count(name) || name == "root") name += "-x";
    rules_[name] = std::move(body);
    return name;
  }

  // The expression for `schema` at `path` (a JSON pointer).
  std::string Visit(const Json& schema, const std::string& path) {
    if (!error_.ok()) return "value";
    if (schema.is_boolean()) {
      if (!schema.get<bool>()) Fail(path, "the schema `false` matches nothing");
      return "value";
    }
    if (!schema.is_object()) return Fail(path, "a schema must be an object or a boolean"), "value";
    static const std::set<std::string> kAnnotations = {
        "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated",
        "readOnly", "writeOnly", "$defs", "definitions", "name", "strict"};
    static const std::set<std::string> kKeywords = {
        "type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems", "maxItems",
        "enum", "const", "minLength", "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
        "exclusiveMaximum", "anyOf", "oneOf", "allOf", "$ref", "nullable"};
    for (const auto& [key, value] : schema.items()) {
      if (!kAnnotations.count(key) && !kKeywords.count(key)) {
        Fail(path, absl::StrCat("unsupported keyword `", key, "`"));
        return "value";
      }
    }
    if (schema.contains("$ref")) return Ref(schema["$ref"], path);
    if (schema.contains("const")) return Literal(schema["const"].dump());
    if (schema.contains("enum")) {
      const Json& e = schema["enum"];
      if (!e.is_array() || e.empty()) return Fail(path + "/enum", "must be a non-empty array"), "value";
      std::vector<std::string> alts;
      for (const Json& v : e) alts.push_back(Literal(v.dump()));
      return "(" + absl::StrJoin(alts, " | ") + ")";
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!schema.contains(key)) continue;
      const Json& list = schema[key];
      if (!list.is_array() || list.empty()) return Fail(path + "/" + key, "must be a non-empty array"), "value";
      std::vector<std::string> alts;
      for (size_t i = 0; i < list.size(); ++i) alts.push_back(Visit(list[i], absl::StrCat(path, "/", key, "/", i)));
      return "(" + absl::StrJoin(alts, " | ") + ")";
    }
    if (schema.contains("allOf")) {
      const Json& list = schema["allOf"];
      if (!list.is_array() || list.size() != 1) return Fail(path + "/allOf", "only an allOf of one schema is supported"), "value";
      return Visit(list[0], path + "/allOf/0");
    }
    std::vector<std::string> types;
    if (schema.contains("type")) {
      const Json& t = schema["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array()) {
        for (const Json& x : t) {
          if (!x.is_string()) return Fail(path + "/type", "must be a string or a list of strings"), "value";
          types.push_back(x.get<std::string>());
        }
      } else {
        return Fail(path + "/type", "must be a string or a list of strings"), "value";
      }
    } else if (schema.contains("properties") || schema.contains("additionalProperties")) {
      types.push_back("object");
    } else if (schema.contains("items") || schema.contains("prefixItems")) {
      types.push_back("array");
    } else {
      return "value";  // {} and annotation-only schemas: any JSON value
    }
    if (schema.value("nullable", false)) types.push_back("null");
    std::vector<std::string> alts;
    for (const std::string& t : types) alts.push_back(Typed(schema, t, path));
    return alts.size() == 1 ? alts[0] : "(" + absl::StrJoin(alts, " | ") + ")";
  }

  std::string Ref(const Json& ref, const std::string& path) {
    if (!ref.is_string()) return Fail(path + "/$ref", "must be a string"), "value";
    const std::string r = ref.get<std::string>();
    if (r == "#") return "root";
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      const std::string p = prefix;
      if (r.compare(0, p.size(), p) != 0) continue;
      const std::string name = r.substr(p.size());
      const std::string defs = p.substr(2, p.size() - 3);
      if (!root_.contains(defs) || !root_[defs].contains(name)) {
        return Fail(path + "/$ref", absl::StrCat("`", r, "` names no definition")), "value";
      }
      auto it = def_rules_.find(r);
      if (it != def_rules_.end()) return it->second;
      std::string rule = "d";
      for (char c : name) rule += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
      while (rules_.count(rule)) rule += "-x";
      def_rules_[r] = rule;
      rules_[rule] = "";  // reserved: a recursive reference finds the name
      rules_[rule] = Visit(root_[defs][name], absl::StrCat("/", defs, "/", name));
      return rule;
    }
    return Fail(path + "/$ref", absl::StrCat("`", r, "`: only #, #/$defs/NAME and #/definitions/NAME are supported")), "value";
  }

  std::string Typed(const Json& schema, const std::string& type, const std::string& path) {
    if (type == "object") return Object(schema, path);
    if (type == "array") return Array(schema, path);
    if (type == "string") return String(schema, path);
    if (type == "integer") return Integer(schema, path);
    if (type == "number") {
      for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
        if (schema.contains(k)) return Fail(path + "/" + k, "bounds are supported on integers only"), "value";
      }
      return "number";
    }
    if (type == "boolean") return "boolean";
    if (type == "null") return "null";
    Fail(path + "/type", absl::StrCat("unknown type `", type, "`"));
    return "value";
  }

  bool Count(const Json& schema, const char* key, const std::string& path, int64_t* out) {
    if (!schema.contains(key)) return false;
    const Json& v = schema[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 100000) {
      Fail(path + "/" + key, "must be an integer in [0, 100000]");
      return false;
    }
    *out = v.get<int64_t>();
    return true;
  }

  std::string Repeat(const std::string& item, int64_t min, int64_t max) {
    if (max < 0) return absl::StrCat("(", item, "){", min, ",}");
    return absl::StrCat("(", item, "){", min, ",", max, "}");
  }

  std::string Object(const Json& schema, const std::string& path) {
    struct Property {
      std::string key, value;
      bool required;
    };
    std::vector<Property> props;
    std::set<std::string> required;
    if (schema.contains("required")) {
      const Json& r = schema["required"];
      if (!r.is_array()) return Fail(path + "/required", "must be a list of names"), "object";
      for (const Json& k : r) {
        if (!k.is_string()) return Fail(path + "/required", "must be a list of names"), "object";
        required.insert(k.get<std::string>());
      }
    }
    if (schema.contains("properties")) {
      const Json& p = schema["properties"];
      if (!p.is_object()) return Fail(path + "/properties", "must be an object"), "object";
      for (const auto& [key, sub] : p.items()) {
        props.push_back({key, Visit(sub, path + "/properties/" + key), required.count(key) > 0});
        required.erase(key);
      }
    }
    if (!required.empty()) {
      return Fail(path + "/required", absl::StrCat("`", *required.begin(), "` is not among the properties")), "object";
    }
    std::string additional;  // the value schema of other keys; empty: none allowed
    if (!schema.contains("additionalProperties")) {
      additional = "value";  // JSON Schema's default (OpenAI's strict mode asks for false)
    } else if (schema["additionalProperties"].is_boolean()) {
      additional = schema["additionalProperties"].get<bool>() ? "value" : "";
    } else {
      additional = Visit(schema["additionalProperties"], path + "/additionalProperties");
    }
    const std::string extra = additional.empty() ? "" : absl::StrCat("string ws \":\" ws ", additional);
    // members(i, first): the properties from i on, `first` when nothing was written yet (no comma).
    std::vector<std::string> names(2 * (props.size() + 1));
    auto name_of = [&](size_t i, bool first) -> std::string& { return names[2 * i + (first ? 1 : 0)]; };
    for (size_t i = props.size() + 1; i-- > 0;) {
      for (bool first : {false, true}) {
        std::string body;
        if (i == props.size()) {
          if (extra.empty()) {
            body = "\"\"";
          } else if (first) {
            body = absl::StrCat("(", extra, " (ws \",\" ws ", extra, ")*)?");
          } else {
            body = absl::StrCat("(ws \",\" ws ", extra, ")*");
          }
        } else {
          const Property& p = props[i];
          const std::string kv = absl::StrCat(first ? "" : "ws \",\" ws ", Literal(Json(p.key).dump()), " ws \":\" ws ",
                                              p.value, " ", name_of(i + 1, false));
          body = p.required ? kv : absl::StrCat(kv, " | ", name_of(i + 1, first));
        }
        name_of(i, first) = NewRule(absl::StrCat(path, "-m", i, first ? "f" : "n"), body);
      }
    }
    return NewRule(path + "-obj", absl::StrCat("\"{\" ws ", name_of(0, true), " ws \"}\""));
  }

  std::string Array(const Json& schema, const std::string& path) {
    int64_t min = 0, max = -1;
    Count(schema, "minItems", path, &min);
    Count(schema, "maxItems", path, &max);
    if (max >= 0 && max < min) return Fail(path + "/maxItems", "is below minItems"), "array";
    std::vector<std::string> prefix;
    if (schema.contains("prefixItems")) {
      const Json& p = schema["prefixItems"];
      if (!p.is_array()) return Fail(path + "/prefixItems", "must be a list of schemas"), "array";
      for (size_t i = 0; i < p.size(); ++i) prefix.push_back(Visit(p[i], absl::StrCat(path, "/prefixItems/", i)));
    }
    std::string item = "value";
    bool more = true;
    if (schema.contains("items")) {
      if (schema["items"].is_boolean() && !schema["items"].get<bool>()) {
        more = false;
      } else {
        item = Visit(schema["items"], path + "/items");
      }
    }
    // Items i = 0, 1, ...: the prefix's schemas, then `item`; at least min, at most max.
    std::vector<std::string> seq;  // item expressions, each but the first after a comma
    const int64_t fixed = std::max<int64_t>(int64_t(prefix.size()), min);
    std::string body;
    std::string tail;  // optional remainder, built from the back
    const int64_t limit = more ? max : std::min<int64_t>(max < 0 ? int64_t(prefix.size()) : max, int64_t(prefix.size()));
    if (!more && min > int64_t(prefix.size())) return Fail(path + "/minItems", "exceeds prefixItems with items: false"), "array";
    auto item_at = [&](int64_t i) { return i < int64_t(prefix.size()) ? prefix[i] : item; };
    auto sep = [](int64_t i) { return i == 0 ? std::string() : std::string("ws \",\" ws "); };
    // Optional items from `fixed` on.
    if (limit < 0) {
      tail = fixed == 0 ? absl::StrCat("(", item, " (ws \",\" ws ", item, ")*)?") : absl::StrCat("(ws \",\" ws ", item, ")*");
    } else {
      for (int64_t i = limit; i-- > fixed;) tail = absl::StrCat("(", sep(i), item_at(i), " ", tail, ")?");
    }
    for (int64_t i = 0; i < fixed; ++i) absl::StrAppend(&body, sep(i), item_at(i), " ");
    return NewRule(path + "-arr", absl::StrCat("\"[\" ws ", body, tail, " ws \"]\""));
  }

  std::string String(const Json& schema, const std::string& path) {
    if (schema.contains("pattern")) {
      if (!schema["pattern"].is_string()) return Fail(path + "/pattern", "must be a string"), "string";
      auto converted = PatternConverter(schema["pattern"].get<std::string>()).Convert();
      if (!converted.ok()) return Fail(path + "/pattern", std::string(converted.status().message())), "string";
      return absl::StrCat("\"\\\"\" ", *converted, " \"\\\"\"");
    }
    if (schema.contains("format")) {
      const std::string f = schema["format"].is_string() ? schema["format"].get<std::string>() : "";
      static const std::map<std::string, std::string> kFormats = {
          {"date", R"([0-9]{4} "-" ("0" [1-9] | "1" [0-2]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]))"},
          {"time", R"(([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,6})? ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9]))"},
          {"uuid", R"([0-9a-f]{8} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{12})"},
      };
      if (f == "date-time") return absl::StrCat("\"\\\"\" ", kFormats.at("date"), " \"T\" ", kFormats.at("time"), " \"\\\"\"");
      auto it = kFormats.find(f);
      if (it == kFormats.end()) return Fail(path + "/format", absl::StrCat("unsupported format `", f, "` (date, time, date-time, uuid)")), "string";
      return absl::StrCat("\"\\\"\" ", it->second, " \"\\\"\"");
    }
    int64_t min = 0, max = -1;
    const bool has_min = Count(schema, "minLength", path, &min);
    const bool has_max = Count(schema, "maxLength", path, &max);
    if (!has_min && !has_max) return "string";
    if (max >= 0 && max < min) return Fail(path + "/maxLength", "is below minLength"), "string";
    return absl::StrCat("\"\\\"\" ", Repeat("char", min, max), " \"\\\"\"");
  }

  std::string Integer(const Json& schema, const std::string& path) {
    int64_t lo = -kMaxInteger, hi = kMaxInteger;
    bool bounded = false;
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
      if (!schema.contains(k)) continue;
      const Json& v = schema[k];
      if (!v.is_number()) return Fail(path + "/" + k, "must be a number"), "integer";
      const double d = v.get<double>();
      if (d < -double(kMaxInteger) || d > double(kMaxInteger)) return Fail(path + "/" + k, "is beyond 16 digits"), "integer";
      const std::string key = k;
      if (key == "minimum") lo = std::max(lo, int64_t(std::ceil(d)));
      if (key == "exclusiveMinimum") lo = std::max(lo, int64_t(std::floor(d)) + 1);
      if (key == "maximum") hi = std::min(hi, int64_t(std::floor(d)));
      if (key == "exclusiveMaximum") hi = std::min(hi, int64_t(std::ceil(d)) - 1);
      bounded = true;
    }
    if (!bounded) return "integer";
    if (lo > hi) return Fail(path, "no integer lies within the bounds"), "integer";
    return IntegerRange(lo, hi);
  }

  const Json& root_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> def_rules_;  // $ref -> rule
  absl::Status error_;
};

}  // namespace

std::string JsonObjectGbnf() { return std::string("root ::= object\n") + kCommonRules; }

absl::StatusOr<std::string> JsonSchemaToGbnf(std::string_view schema_json) {
  Json schema = Json::parse(schema_json.begin(), schema_json.end(), nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return absl::InvalidArgumentError("schema: not valid JSON");
  return SchemaConverter(schema).Convert();
}

}  // namespace steady
