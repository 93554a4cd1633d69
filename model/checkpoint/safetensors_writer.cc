// The atomic safetensors writer (model/checkpoint/safetensors.h).
#include <cmath>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/file_io.h"
#include "base/utf8.h"
#include "base/status.h"
#include "model/checkpoint/safetensors.h"
#include "model/checkpoint/safetensors_format.h"

namespace steady {
namespace {

using safetensors_format::DTypeCStr;
using safetensors_format::IsFloatDType;
using safetensors_format::Quoted;
using safetensors_format::NarrowToFloat;
using safetensors_format::ShapeString;
using safetensors_format::CheckedByteCount;

// The bytes of one tensor in its dtype, little-endian. Refuses finite values the dtype cannot hold.
absl::StatusOr<std::string> EncodeTensor(const TensorToWrite& t) {
  const size_t size = DTypeSize(t.dtype);
  std::string out(t.values.size() * size, '\0');
  for (size_t i = 0; i < t.values.size(); ++i) {
    const double v = t.values[i];
    char* p = out.data() + i * size;
    bool fits = true;
    switch (t.dtype) {
      case DType::kF64:
        std::memcpy(p, &v, 8);
        break;
      case DType::kF32: {
        const float f = NarrowToFloat(v);
        fits = std::isfinite(f) || !std::isfinite(v);
        std::memcpy(p, &f, 4);
        break;
      }
      case DType::kF16:
      case DType::kBF16: {
        // double -> float -> half rounds once in effect: float keeps more than 2 * 11 + 2 bits.
        const float f = NarrowToFloat(v);
        const uint16_t h = t.dtype == DType::kF16 ? FloatToHalf(f) : FloatToBFloat16(f);
        const float back = t.dtype == DType::kF16 ? HalfToFloat(h) : BFloat16ToFloat(h);
        fits = std::isfinite(back) || !std::isfinite(v);
        std::memcpy(p, &h, 2);
        break;
      }
      default:
        STEADY_CHECK(false && "EncodeTensor on a non-float dtype");
    }
    if (!fits) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", Quoted(t.name), ": value ", v, " at index ", i,
                                                     " is out of the range of ", DTypeCStr(t.dtype)));
    }
  }
  return out;
}

// The header JSON (tensors in order, contiguous offsets), padded with spaces to a multiple of 8.
absl::StatusOr<std::string> BuildHeader(const std::vector<TensorToWrite>& tensors,
                                        const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata) {
      if (!IsValidUtf8(key) || !IsValidUtf8(value)) {
        return absl::InvalidArgumentError(absl::StrCat("metadata ", Quoted(key), ": not valid UTF-8"));
      }
      m[key] = value;
    }
    header["__metadata__"] = std::move(m);
  }
  std::set<std::string_view> names;
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    const std::string where = absl::StrCat("tensor ", Quoted(t.name));
    if (t.name == "__metadata__" || !IsValidUtf8(t.name)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": not a valid tensor name"));
    }
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": name appears twice"));
    }
    if (!IsFloatDType(t.dtype)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": cannot write dtype ", DTypeCStr(t.dtype), " (F64, F32, F16 or BF16 only)"));
    }
    uint64_t elements = 0, bytes = 0;
    if (!CheckedByteCount(t.shape, DTypeSize(t.dtype), &elements, &bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": shape ", ShapeString(t.shape), " has a negative or overflowing dimension"));
    }
    if (elements != t.values.size()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": shape ", ShapeString(t.shape), " has ", elements,
                                                     " elements but ", t.values.size(), " values were given"));
    }
    header[t.name] = {{"dtype", DTypeCStr(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');
  return text;
}

}  // namespace

absl::Status WriteSafeTensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  auto header = BuildHeader(tensors, metadata);
  if (!header.ok()) return WithContext(header.status(), path);
  // Encode everything before touching the file system, so bad values leave nothing behind.
  std::vector<std::string> data;
  data.reserve(tensors.size());
  for (const TensorToWrite& t : tensors) {
    auto bytes = EncodeTensor(t);
    if (!bytes.ok()) return WithContext(bytes.status(), path);
    data.push_back(*std::move(bytes));
  }

  char length[8];
  for (int i = 0; i < 8; ++i) length[i] = char(uint64_t(header->size()) >> (8 * i));
  std::vector<std::string_view> pieces = {std::string_view(length, 8), *header};
  for (const std::string& d : data) pieces.push_back(d);
  return WriteFileAtomic(path, pieces);
}

}  // namespace steady
