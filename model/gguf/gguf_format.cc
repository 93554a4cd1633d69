// GGUF's vocabulary: value and tensor type names, ggml's block sizes, values in human form.
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "model/checkpoint/safetensors_format.h"
#include "model/gguf/gguf.h"

namespace steady {

std::string GgufValueTypeName(GgufValueType type) {
  static constexpr const char* kNames[] = {"uint8",  "int8",   "uint16", "int16", "uint32", "int32",  "float32",
                                           "bool",   "string", "array",  "uint64", "int64", "float64"};
  const uint32_t t = uint32_t(type);
  return t < std::size(kNames) ? kNames[t] : absl::StrCat("type ", t);
}

bool LookUpGgmlType(uint32_t type, GgmlTypeTraits* traits) {
  // Block sizes from ggml's ggml-common.h (QK_K = 256, K_SCALE_SIZE = 12).
  switch (GgmlType(type)) {
    case GgmlType::kF32: *traits = {"F32", 1, 4}; return true;
    case GgmlType::kF16: *traits = {"F16", 1, 2}; return true;
    case GgmlType::kBF16: *traits = {"BF16", 1, 2}; return true;
    case GgmlType::kF64: *traits = {"F64", 1, 8}; return true;
    case GgmlType::kI8: *traits = {"I8", 1, 1}; return true;
    case GgmlType::kI16: *traits = {"I16", 1, 2}; return true;
    case GgmlType::kI32: *traits = {"I32", 1, 4}; return true;
    case GgmlType::kI64: *traits = {"I64", 1, 8}; return true;
    case GgmlType::kQ4_0: *traits = {"Q4_0", 32, 2 + 16}; return true;
    case GgmlType::kQ4_1: *traits = {"Q4_1", 32, 4 + 16}; return true;
    case GgmlType::kQ5_0: *traits = {"Q5_0", 32, 2 + 4 + 16}; return true;
    case GgmlType::kQ5_1: *traits = {"Q5_1", 32, 4 + 4 + 16}; return true;
    case GgmlType::kQ8_0: *traits = {"Q8_0", 32, 2 + 32}; return true;
    case GgmlType::kQ8_1: *traits = {"Q8_1", 32, 4 + 32}; return true;
    case GgmlType::kQ2_K: *traits = {"Q2_K", 256, 16 + 64 + 4}; return true;
    case GgmlType::kQ3_K: *traits = {"Q3_K", 256, 32 + 64 + 12 + 2}; return true;
    case GgmlType::kQ4_K: *traits = {"Q4_K", 256, 4 + 12 + 128}; return true;
    case GgmlType::kQ5_K: *traits = {"Q5_K", 256, 4 + 12 + 32 + 128}; return true;
    case GgmlType::kQ6_K: *traits = {"Q6_K", 256, 128 + 64 + 16 + 2}; return true;
    case GgmlType::kQ8_K: *traits = {"Q8_K", 256, 4 + 256 + 32}; return true;
    case GgmlType::kIQ4_NL: *traits = {"IQ4_NL", 32, 2 + 16}; return true;
    case GgmlType::kIQ4_XS: *traits = {"IQ4_XS", 256, 2 + 2 + 4 + 128}; return true;
  }
  return false;
}

std::string GgmlTypeName(uint32_t type) {
  GgmlTypeTraits traits;
  return LookUpGgmlType(type, &traits) ? traits.name : absl::StrCat("type ", type);
}

bool GgufValue::is_unsigned() const {
  return type == GgufValueType::kUint8 || type == GgufValueType::kUint16 || type == GgufValueType::kUint32 ||
         type == GgufValueType::kUint64;
}
bool GgufValue::is_signed() const {
  return type == GgufValueType::kInt8 || type == GgufValueType::kInt16 || type == GgufValueType::kInt32 ||
         type == GgufValueType::kInt64;
}
bool GgufValue::is_float() const { return type == GgufValueType::kFloat32 || type == GgufValueType::kFloat64; }

std::string GgufValue::ToString(size_t max_elements, size_t max_chars) const {
  if (is_unsigned()) return absl::StrCat(u);
  if (is_signed()) return absl::StrCat(i);
  if (type == GgufValueType::kBool) return u ? "true" : "false";
  if (is_float()) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.9g", f);
    return buf;
  }
  if (type == GgufValueType::kString) {
    std::string text = safetensors_format::Quoted(s.size() > max_chars ? s.substr(0, max_chars) : s);
    if (s.size() > max_chars) absl::StrAppend(&text, "... (", s.size(), " bytes)");
    return text;
  }
  std::string out = "[";
  for (size_t e = 0; e < elements.size() && e < max_elements; ++e) {
    absl::StrAppend(&out, e ? ", " : "", elements[e].ToString(max_elements, max_chars / 2));
  }
  if (elements.size() > max_elements) {
    absl::StrAppend(&out, ", ... (", elements.size(), " ", GgufValueTypeName(element_type), "s)");
  }
  return out + "]";
}

uint64_t GgufTensorInfo::NumElements() const {
  uint64_t n = 1;
  for (uint64_t d : dims) n *= d;  // cannot overflow: the reader checked the product
  return n;
}

std::vector<int64_t> GgufTensorInfo::Shape() const {
  return std::vector<int64_t>(dims.rbegin(), dims.rend());
}

}  // namespace steady
