// Typed reads of tokenizer.json / tokenizer_config.json fields. Every error names the field's path
// ("pre_tokenizer.pretokenizers[0].pattern.Regex: expected a string, got 3"); the loader puts the
// file's name in front.
#ifndef STEADY_MODEL_TEXT_HF_JSON_FIELDS_H_
#define STEADY_MODEL_TEXT_HF_JSON_FIELDS_H_

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace steady::hf {

using Json = nlohmann::json;

// Debian's absl has its own string_view, which std::string_view does not convert to.
inline absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

inline std::string Child(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : absl::StrCat(path, ".", Av(key));
}
inline std::string Index(const std::string& path, size_t i) { return absl::StrCat(path, "[", i, "]"); }

inline absl::Status FieldError(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}
inline absl::Status FieldError(const std::string& path, std::string_view what) { return FieldError(path, Av(what)); }
inline absl::Status FieldError(const std::string& path, const char* what) { return FieldError(path, absl::string_view(what)); }
inline absl::Status FieldError(const std::string& path, const std::string& what) { return FieldError(path, absl::string_view(what)); }
inline absl::Status Unexpected(const std::string& path, std::string_view expected, const Json& got) {
  std::string shown = got.dump();
  if (shown.size() > 80) shown = shown.substr(0, 77) + "...";
  return FieldError(path, absl::StrCat("expected ", Av(expected), ", got ", shown));
}

// The parsed text; INVALID_ARGUMENT "NAME: not valid JSON: parse error at line L, column C: ...".
inline absl::StatusOr<Json> ParseJsonText(std::string_view text, const std::string& name) {
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {
    std::string what = e.what();  // "[json.exception.parse_error.101] parse error at line 1, ..."
    if (size_t close = what.find("] "); close != std::string::npos) what = what.substr(close + 2);
    return absl::InvalidArgumentError(absl::StrCat(name, ": not valid JSON: ", what));
  }
}

// The member, or null when absent or JSON null.
inline const Json* Find(const Json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

inline absl::StatusOr<std::string> ReadString(const Json& obj, const std::string& path, const char* key,
                                              const char* fallback = nullptr) {
  const Json* v = Find(obj, key);
  if (!v) {
    if (fallback) return std::string(fallback);
    return FieldError(Child(path, key), "missing");
  }
  if (!v->is_string()) return Unexpected(Child(path, key), "a string", *v);
  return v->get<std::string>();
}

inline absl::StatusOr<bool> ReadBool(const Json& obj, const std::string& path, const char* key, bool fallback) {
  const Json* v = Find(obj, key);
  if (!v) return fallback;
  if (!v->is_boolean()) return Unexpected(Child(path, key), "true or false", *v);
  return v->get<bool>();
}

inline absl::StatusOr<int64_t> ReadInt(const Json& obj, const std::string& path, const char* key, int64_t fallback,
                                       int64_t lo, int64_t hi) {
  const Json* v = Find(obj, key);
  if (!v) return fallback;
  if (!v->is_number_integer() || v->get<int64_t>() < lo || v->get<int64_t>() > hi) {
    return Unexpected(Child(path, key), absl::StrCat("an integer in [", lo, ", ", hi, "]"), *v);
  }
  return v->get<int64_t>();
}

// The object's "type" (a required string).
inline absl::StatusOr<std::string> ReadType(const Json& obj, const std::string& path) {
  if (!obj.is_object()) return Unexpected(path, "an object", obj);
  return ReadString(obj, path, "type");
}

}  // namespace steady::hf

#endif  // STEADY_MODEL_TEXT_HF_JSON_FIELDS_H_
