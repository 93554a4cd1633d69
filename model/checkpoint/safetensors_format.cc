// The safetensors format's vocabulary: dtypes, shapes, names in messages, half-precision
// conversions; shared by the reader and the writer.
#include "model/checkpoint/safetensors_format.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/check.h"

namespace steady {
namespace safetensors_format {

const char* DTypeCStr(DType dtype) {
  switch (dtype) {
    case DType::kF64: return "F64";
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kI64: return "I64";
    case DType::kI32: return "I32";
    case DType::kI16: return "I16";
    case DType::kI8: return "I8";
    case DType::kU8: return "U8";
    case DType::kBool: return "BOOL";
  }
  STEADY_CHECK(false && "unknown DType");
  return "";
}

bool IsFloatDType(DType d) {
  return d == DType::kF64 || d == DType::kF32 || d == DType::kF16 || d == DType::kBF16;
}

std::string Quoted(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20 || c == 0x7f) {
      absl::StrAppend(&out, "\\x", absl::Hex(c, absl::kZeroPad2));
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

// Spelled out because an out-of-range floating conversion is undefined behaviour in C++.
float NarrowToFloat(double v) {
  constexpr double kFloatMax = std::numeric_limits<float>::max();
  constexpr double kRoundsToInf = 0x1.ffffffp127;  // FLT_MAX + half an ulp: ties go to inf (even)
  if (!std::isfinite(v) || std::fabs(v) <= kFloatMax) return float(v);
  return std::copysign(std::fabs(v) < kRoundsToInf ? std::numeric_limits<float>::max()
                                                   : std::numeric_limits<float>::infinity(),
                       float(v > 0 ? 1 : -1));
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

bool CheckedByteCount(const std::vector<int64_t>& shape, uint64_t element_size, uint64_t* elements,
                      uint64_t* bytes) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, uint64_t(d), &n)) return false;
  }
  if (n > uint64_t(std::numeric_limits<int64_t>::max())) return false;
  *elements = n;
  return !__builtin_mul_overflow(n, element_size, bytes);
}


}  // namespace safetensors_format

using safetensors_format::DTypeCStr;

std::string_view DTypeName(DType dtype) { return DTypeCStr(dtype); }

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF64: case DType::kI64: return 8;
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF16: case DType::kBF16: case DType::kI16: return 2;
    case DType::kI8: case DType::kU8: case DType::kBool: return 1;
  }
  STEADY_CHECK(false && "unknown DType");
  return 0;
}

int64_t TensorInfo::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // cannot overflow: Parse checked the product
  return n;
}

// ---------------------------------------------------------------------------------------------
// Half-precision conversions
// ---------------------------------------------------------------------------------------------

float HalfToFloat(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1f;
  const uint32_t mantissa = h & 0x3ff;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000 | (mantissa << 13);  // inf, or NaN with its payload
  } else if (exponent != 0) {
    bits = sign | ((exponent - 15 + 127) << 23) | (mantissa << 13);
  } else {
    const float magnitude = std::ldexp(float(mantissa), -24);  // zero or subnormal: exact
    return sign ? -magnitude : magnitude;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000);
  const uint32_t abs = x & 0x7fffffff;
  if (abs > 0x7f800000) return sign | 0x7e00 | uint16_t((abs >> 13) & 0x3ff);  // NaN stays a quiet NaN
  const int exponent = int(abs >> 23) - 127;
  if (exponent > 15) return sign | 0x7c00;  // |f| >= 2^16, or inf: beyond 65504 rounds to inf
  // Drop the low `shift` bits of the significand, rounding to nearest, ties to even. A carry out of
  // the mantissa bumps the exponent, which is the right result (up to inf).
  uint32_t significand, high, shift;
  if (exponent >= -14) {  // normal half: exponent field and the top 10 mantissa bits
    significand = abs & 0x7fffff;
    high = uint32_t(exponent + 15) << 10;
    shift = 13;
  } else if (exponent >= -25) {  // subnormal half: units of 2^-24, implicit bit made explicit
    significand = (abs & 0x7fffff) | 0x800000;
    high = 0;
    shift = uint32_t(-exponent - 1);  // 14..24
  } else {
    return sign;  // below half the smallest subnormal (float subnormals and zero included)
  }
  uint32_t kept = high | (significand >> shift);
  const uint32_t rest = significand & ((1u << shift) - 1);
  const uint32_t half_way = 1u << (shift - 1);
  if (rest > half_way || (rest == half_way && (kept & 1))) ++kept;
  return sign | uint16_t(kept);
}

float BFloat16ToFloat(uint16_t b) {
  const uint32_t bits = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToBFloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000) return uint16_t((x >> 16) | 0x0040);  // NaN stays a quiet NaN
  // Round to nearest even; a carry into the exponent is correct, up to inf.
  return uint16_t((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

}  // namespace steady
