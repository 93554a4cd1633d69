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
  int file = 0;  // which of the set's files holds it (SafeTensors::file_name)

  int64_t NumElements() const;
};

// Parsed safetensors: one file, or the shards a model.safetensors.index.json names, seen as one set
// of tensors. Immutable after Open/Parse; copies share the same bytes. Open memory-maps each file
// (read-only, private): nothing is read until a tensor's bytes are, so a loader can keep tensors in
// place (RawData, Owner) instead of copying them. The files must not change while mapped.
class SafeTensors {
 public:
  // Maps and validates one file.
  static absl::StatusOr<SafeTensors> Open(const std::string& path);
  // Validates `bytes` (a whole file's contents). `display_name` is used in error messages.
  static absl::StatusOr<SafeTensors> Parse(std::string bytes, std::string display_name);
  // A sharded checkpoint: the index (`{"weight_map": {tensor: shard file}, "metadata": {...}}`) and
  // every shard it names, in the index's directory. Refused, naming the index, the shard and the
  // tensor: a shard that is missing or fails to parse (a short one does), a tensor the index places
  // in a shard that lacks it, a shard holding a tensor the index does not place there, a tensor in
  // two shards, a shard name that is not a plain file name.
  static absl::StatusOr<SafeTensors> OpenIndex(const std::string& index_path);
  // `dir`/model.safetensors.index.json when it exists, else `dir`/model.safetensors.
  static absl::StatusOr<SafeTensors> OpenDirectory(const std::string& dir);

  // The file (or the index) the set was opened from.
  const std::string& display_name() const { return display_name_; }
  // Every tensor: file by file, in each file's order (by data offset).
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // The first file's __metadata__.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // nullptr when absent.
  const TensorInfo* Find(std::string_view name) const;
  // The path (or display name) of file `index`: the one error messages about its tensors name.
  const std::string& file_name(int index) const;
  int file_count() const { return int(files_->size()); }
  // Total bytes of the files (headers included).
  uint64_t FileBytes() const;

  // Converts the tensor to float / double (from F64, F32, F16 or BF16). If `expected_shape` is
  // non-empty the tensor's shape must equal it. Non-finite values are refused unless allow_nonfinite.
  absl::StatusOr<std::vector<float>> ReadFloat(std::string_view name,
                                               const std::vector<int64_t>& expected_shape = {},
                                               bool allow_nonfinite = false) const;
  absl::StatusOr<std::vector<double>> ReadDouble(std::string_view name,
                                                 const std::vector<int64_t>& expected_shape = {},
                                                 bool allow_nonfinite = false) const;
  // The tensor in place, without conversion: it must exist, have a float dtype (F64, F32, F16,
  // BF16), the expected shape when one is given, and only finite values (checked here, once). The
  // bytes stay valid while Owner() (or this object) lives.
  absl::StatusOr<const TensorInfo*> CheckedTensor(std::string_view name,
                                                  const std::vector<int64_t>& expected_shape = {}) const;
  // Raw bytes of a tensor's data (possibly unaligned).
  std::string_view RawData(const TensorInfo& info) const;
  // Whether the tensor's bytes are in a read-only mapping of its file (Open) rather than a buffer of
  // the set's own (Parse): only a mapping's pages may be released and read back from the file
  // (WeightMatrix::View's `mapped`).
  bool Mapped(const TensorInfo& info) const;
  // Keeps every file's bytes (mapping or buffer) alive, for views that outlive this object.
  std::shared_ptr<const void> Owner() const { return files_; }

 private:
  struct File;  // one file's bytes (a mapping or a buffer), its name, where its data section starts
  using Files = std::vector<std::unique_ptr<File>>;
  // Parses every file's header into one set; names must be unique across files.
  static absl::StatusOr<SafeTensors> FromFiles(Files files, std::string display_name);

  std::string display_name_;
  std::shared_ptr<const Files> files_;  // shared by copies and by Owner()'s holders
  std::vector<TensorInfo> tensors_;  // file by file, each sorted by data offset (file order)
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
