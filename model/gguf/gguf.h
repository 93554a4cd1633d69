// A strict reader for GGUF version 3 files (llama.cpp's format; ggml's docs/gguf.md): a header
// (magic "GGUF", version, tensor count, metadata count), typed metadata key/value pairs, one info
// record per tensor (name, dimensions innermost first, ggml type, data offset), padding to
// `general.alignment`, then the tensor data. Everything little-endian.
//
// The file is memory-mapped, never copied. The reader refuses anything it cannot prove well formed:
// a truncated header, absurd counts or string lengths, unknown value or tensor types, nested arrays,
// duplicate keys or tensor names, shapes whose byte count overflows, rows that are not whole blocks,
// misaligned offsets, data past the end of the file, overlapping tensors. Every error names the file,
// the key or tensor (where there is one) and the reason.
//
// Dequantization of the tensor types to fp32 lives in model/gguf/dequantize.h. Mapping a GGUF file's
// names to the Model is not here.
#ifndef STEADY_MODEL_GGUF_GGUF_H_
#define STEADY_MODEL_GGUF_GGUF_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace steady {

// gguf_metadata_value_type.
enum class GgufValueType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5, kFloat32 = 6, kBool = 7,
  kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};
// "uint32", "string", ... ; "type N" for a number that is not one.
std::string GgufValueTypeName(GgufValueType type);

// ggml_type: the tensor types whose block layout the reader knows (sizes below). Other numbers are
// refused by number ("ggml type 16 is unknown or not supported").
enum class GgmlType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ8_1 = 9,
  kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kQ8_K = 15, kIQ4_NL = 20, kIQ4_XS = 23,
  kI8 = 24, kI16 = 25, kI32 = 26, kI64 = 27, kF64 = 28, kBF16 = 30,
};
struct GgmlTypeTraits {
  const char* name;        // "Q4_K"
  uint32_t block_elements; // values per block (1 for plain types)
  uint32_t block_bytes;    // bytes per block
};
// False for a number the reader does not know.
bool LookUpGgmlType(uint32_t type, GgmlTypeTraits* traits);
// "Q4_K"; "type N" for an unknown number.
std::string GgmlTypeName(uint32_t type);

// One metadata value. Scalars use the field of their kind; arrays hold their elements (all of
// `element_type`; arrays of arrays are refused).
struct GgufValue {
  GgufValueType type = GgufValueType::kUint8;
  uint64_t u = 0;    // uint8/16/32/64, bool (0 or 1)
  int64_t i = 0;     // int8/16/32/64
  double f = 0;      // float32/64
  std::string s;     // string
  GgufValueType element_type = GgufValueType::kUint8;  // arrays
  std::vector<GgufValue> elements;                     // arrays

  bool is_unsigned() const;
  bool is_signed() const;
  bool is_float() const;
  // A short human form: 7, -3, 0.5, true, "text", [1, 2, ... (150000 strings)].
  std::string ToString(size_t max_elements = 8, size_t max_chars = 80) const;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> dims;  // GGUF order: innermost (contiguous) first, as ggml's ne[]
  uint32_t type = 0;           // a GgmlType that LookUpGgmlType knows
  uint64_t offset = 0;         // into the data section, a multiple of the alignment
  uint64_t bytes = 0;          // dims' product / block_elements * block_bytes

  uint64_t NumElements() const;
  // PyTorch's order (outermost first): "[4096, 11008]" for ggml's ne = {11008, 4096}.
  std::vector<int64_t> Shape() const;
};

// A parsed GGUF file. Immutable after Open/Parse; movable.
class GgufFile {
 public:
  // Maps and validates the file.
  static absl::StatusOr<GgufFile> Open(const std::string& path);
  // Validates `bytes` (a whole file's contents; kept). `display_name` is used in error messages.
  static absl::StatusOr<GgufFile> Parse(std::string bytes, std::string display_name);

  const std::string& display_name() const { return display_name_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t file_size() const { return size_; }
  uint64_t data_offset() const { return data_offset_; }  // where the data section starts
  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  // Tensors in file (info record) order.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  // nullptr when absent.
  const GgufValue* FindValue(std::string_view key) const;
  const GgufTensorInfo* FindTensor(std::string_view name) const;

  // Typed metadata: NOT_FOUND naming the key when absent, INVALID_ARGUMENT naming the key and both
  // types when it has another type (GetUint accepts every unsigned type, and a signed value >= 0).
  absl::StatusOr<std::string> GetString(std::string_view key) const;
  absl::StatusOr<uint64_t> GetUint(std::string_view key) const;
  absl::StatusOr<double> GetFloat(std::string_view key) const;  // float32 or float64

  // Whether the bytes are a read-only mapping of the file (Open) rather than bytes of its own (Parse):
  // only a mapping's pages may be released and read back from the file (WeightMatrix::View's
  // `mapped`).
  bool mapped() const { return mapped_; }
  // Keeps the mapping (or the owned bytes) alive, for views of RawData that outlive this object.
  std::shared_ptr<const void> Owner() const { return storage_; }
  // The tensor's bytes in the mapped file.
  std::string_view RawData(const GgufTensorInfo& info) const;
  // The tensor dequantized to fp32, in ggml's element order (innermost first, which is row-major
  // in Shape()). INVALID_ARGUMENT naming the tensor for a type model/gguf/dequantize.h lacks.
  absl::StatusOr<std::vector<float>> ReadFloat(std::string_view name) const;

 private:
  std::string display_name_;
  std::shared_ptr<const void> storage_;  // the mapping (or the owned bytes) that data_ points into
  const char* data_ = nullptr;
  bool mapped_ = false;
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::map<std::string, size_t, std::less<>> metadata_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;

  absl::Status ParseAll();
};

}  // namespace steady

#endif  // STEADY_MODEL_GGUF_GGUF_H_
