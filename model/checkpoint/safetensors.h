// Strict reader and atomic writer for the safetensors format
// (8-byte little-endian header length, JSON header, raw little-endian tensor data).
//
// The reader refuses anything it cannot prove well formed: header length and JSON, dtypes, shapes,
// data offsets inside the file, no overlapping or unused ranges, no integer overflow in
// shape * element size. Every error names the file, the tensor (where there is one) and the reason.
#ifndef STEADY_MODEL_CHECKPOINT_SAFETENSORS_H_
#define STEADY_MODEL_CHECKPOINT_SAFETENSORS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace steady {

enum class DType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

// "F32", "BF16", ... as written in the header.
std::string_view DTypeName(DType dtype);
size_t DTypeSize(DType dtype);

struct TensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // offsets into the data section (after the header), [begin, end)
  uint64_t end = 0;

  int64_t NumElements() const;
};

// A parsed safetensors file held in memory. Immutable after Parse/Open.
class SafeTensors {
 public:
  // Reads and validates the whole file.
  static absl::StatusOr<SafeTensors> Open(const std::string& path);
  // Validates `bytes` (a whole file's contents). `display_name` is used in error messages.
  static absl::StatusOr<SafeTensors> Parse(std::string bytes, std::string display_name);

  const std::string& display_name() const { return display_name_; }
  // In file order (by data offset).
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // nullptr when absent.
  const TensorInfo* Find(std::string_view name) const;

  // Converts the tensor to float / double (from F64, F32, F16 or BF16). If `expected_shape` is
  // non-empty the tensor's shape must equal it. Non-finite values are refused unless allow_nonfinite.
  absl::StatusOr<std::vector<float>> ReadFloat(std::string_view name,
                                               const std::vector<int64_t>& expected_shape = {},
                                               bool allow_nonfinite = false) const;
  absl::StatusOr<std::vector<double>> ReadDouble(std::string_view name,
                                                 const std::vector<int64_t>& expected_shape = {},
                                                 bool allow_nonfinite = false) const;
  // Raw bytes of a tensor's data.
  std::string_view RawData(const TensorInfo& info) const;

 private:
  std::string display_name_;
  std::string bytes_;         // the whole file
  uint64_t data_offset_ = 0;  // 8 + header length
  std::vector<TensorInfo> tensors_;  // sorted by data offset (file order)
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

// A tensor to write. Data is converted from the given float values to `dtype` (F32, F64, F16, BF16).
struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<double> values;  // row-major, NumElements(shape) values
};

// Writes a safetensors file atomically: temp file in the same directory, fsync, rename.
// On error nothing is left at `path` (an existing file there is untouched).
absl::Status WriteSafeTensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

// Half-precision conversions (round to nearest even), exposed for tests and the writer.
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float BFloat16ToFloat(uint16_t b);
uint16_t FloatToBFloat16(float f);

}  // namespace steady

#endif  // STEADY_MODEL_CHECKPOINT_SAFETENSORS_H_
