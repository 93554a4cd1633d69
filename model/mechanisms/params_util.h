// Reading mechanism parameters from a config.json "attention" object: typed, range-checked,
// errors naming the key.
#ifndef STEADY_MODEL_MECHANISMS_PARAMS_UTIL_H_
#define STEADY_MODEL_MECHANISMS_PARAMS_UTIL_H_

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/checkpoint/safetensors.h"
#include "model/mechanisms/common.h"

namespace steady {

// Reads integer `key` (default `def` when absent) and checks lo <= value <= hi.
inline absl::Status GetInt(const nlohmann::json& j, const char* key, int def, int lo, int hi, int* out) {
  *out = def;
  if (!j.contains(key)) return absl::OkStatus();
  const nlohmann::json& v = j.at(key);
  if (!v.is_number_integer()) {
    return absl::InvalidArgumentError(absl::StrCat("attention.", key, ": expected an integer, got ", v.dump()));
  }
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention.", key, ": ", x, " is out of range [", lo, ", ", hi, "]"));
  }
  *out = int(x);
  return absl::OkStatus();
}

// Reads finite number `key` (default `def`) and checks lo <= value <= hi.
inline absl::Status GetDouble(const nlohmann::json& j, const char* key, double def, double lo, double hi,
                              double* out) {
  *out = def;
  if (!j.contains(key)) return absl::OkStatus();
  const nlohmann::json& v = j.at(key);
  if (!v.is_number()) {
    return absl::InvalidArgumentError(absl::StrCat("attention.", key, ": expected a number, got ", v.dump()));
  }
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention.", key, ": ", x, " is not finite or out of range [", lo, ", ", hi, "]"));
  }
  *out = x;
  return absl::OkStatus();
}

// The attention logit scale: config "scale", default 1/sqrt(head_dim).
inline absl::Status ParseScale(const nlohmann::json& j, const AttnShape& s, double* scale) {
  return GetDouble(j, "scale", 1.0 / std::sqrt(double(s.head_dim)), 1e-6, 1e6, scale);
}

// Reads a mechanism's fixed tensor with the expected shape; the error names the tensor.
inline absl::Status ReadTensor(const SafeTensors& st, const std::string& name, const std::vector<int64_t>& shape,
                        std::vector<float>* out) {
  absl::StatusOr<std::vector<float>> t = st.ReadFloat(name, shape);
  if (!t.ok()) {
    const std::string msg(t.status().message());  // Debian's absl has its own string_view
    if (msg.find(name) != std::string::npos) return t.status();
    return absl::Status(t.status().code(), absl::StrCat(name, ": ", msg));
  }
  *out = *std::move(t);
  return absl::OkStatus();
}

}  // namespace steady

#endif  // STEADY_MODEL_MECHANISMS_PARAMS_UTIL_H_
