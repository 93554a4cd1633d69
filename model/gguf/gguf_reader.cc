// The strict GGUF reader (model/gguf/gguf.h): maps the file and refuses anything it cannot prove
// well formed, naming the file, the key or tensor, and the byte where the problem is.
#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <numeric>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/check.h"
#include "base/file_io.h"
#include "base/status.h"
#include "model/checkpoint/safetensors_format.h"
#include "model/gguf/dequantize.h"
#include "model/gguf/gguf.h"

namespace steady {
namespace {

static_assert(std::endian::native == std::endian::little, "gguf_reader.cc assumes a little-endian host");

using safetensors_format::Quoted;

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
constexpr uint32_t kMaxDims = 4;         // GGML_MAX_DIMS
constexpr size_t kMaxNameBytes = 63;     // GGML_MAX_NAME (64) less its NUL
// An array longer than this is refused as absurd before anything is allocated for it: the largest
// real arrays are vocabularies and merge lists (a few hundred thousand entries).
constexpr uint64_t kMaxArrayElements = uint64_t{1} << 24;

// Bounded little-endian reads over the header; every failure says what was being read and where.
class Cursor {
 public:
  Cursor(const char* data, uint64_t size, const std::string& file) : data_(data), size_(size), file_(file) {}
  uint64_t position() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  absl::Status Truncated(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(file_, ": truncated: the file (", size_,
                                                   " bytes) ends inside ", what, " at byte ", pos_));
  }
  template <typename T>
  absl::Status Read(T* out, const std::string& what) {
    if (remaining() < sizeof(T)) return Truncated(what);
    std::memcpy(out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return absl::OkStatus();
  }
  absl::Status ReadString(std::string* out, const std::string& what) {
    uint64_t length = 0;
    if (absl::Status s = Read(&length, what); !s.ok()) return s;
    if (length > remaining()) {
      return absl::InvalidArgumentError(absl::StrCat(file_, ": ", what, " at byte ", pos_ - 8, " claims ", length,
                                                     " bytes but only ", remaining(), " remain in the file"));
    }
    out->assign(data_ + pos_, length);
    pos_ += length;
    return absl::OkStatus();
  }

 private:
  const char* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& file_;
};

bool IsKnownValueType(uint32_t t) { return t <= uint32_t(GgufValueType::kFloat64); }

// The fewest bytes one value of the type takes (so a count can be checked against what remains).
uint64_t MinValueBytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8: case GgufValueType::kInt8: case GgufValueType::kBool: return 1;
    case GgufValueType::kUint16: case GgufValueType::kInt16: return 2;
    case GgufValueType::kUint32: case GgufValueType::kInt32: case GgufValueType::kFloat32: return 4;
    case GgufValueType::kUint64: case GgufValueType::kInt64: case GgufValueType::kFloat64: return 8;
    case GgufValueType::kString: return 8;      // the length
    case GgufValueType::kArray: return 4 + 8;   // element type and count
  }
  return 1;
}

// Reads a T into *out (a wider field of GgufValue).
template <typename T, typename Out>
absl::Status ReadWidened(Cursor& in, const std::string& what, Out* out) {
  T x{};
  absl::Status s = in.Read(&x, what);
  *out = Out(x);
  return s;
}

// Reads one scalar or string of type `t` into *v. `what` names the key (and element) for errors.
absl::Status ReadScalar(Cursor& in, GgufValueType t, const std::string& what, const std::string& file, GgufValue* v) {
  v->type = t;
  switch (t) {
    case GgufValueType::kUint8: return ReadWidened<uint8_t>(in, what, &v->u);
    case GgufValueType::kUint16: return ReadWidened<uint16_t>(in, what, &v->u);
    case GgufValueType::kUint32: return ReadWidened<uint32_t>(in, what, &v->u);
    case GgufValueType::kUint64: return ReadWidened<uint64_t>(in, what, &v->u);
    case GgufValueType::kInt8: return ReadWidened<int8_t>(in, what, &v->i);
    case GgufValueType::kInt16: return ReadWidened<int16_t>(in, what, &v->i);
    case GgufValueType::kInt32: return ReadWidened<int32_t>(in, what, &v->i);
    case GgufValueType::kInt64: return ReadWidened<int64_t>(in, what, &v->i);
    case GgufValueType::kFloat32: return ReadWidened<float>(in, what, &v->f);
    case GgufValueType::kFloat64: return ReadWidened<double>(in, what, &v->f);
    case GgufValueType::kBool: {
      uint8_t x = 0;
      if (auto s = in.Read(&x, what); !s.ok()) return s;
      if (x > 1) {
        return absl::InvalidArgumentError(absl::StrCat(file, ": ", what, " at byte ", in.position() - 1,
                                                       ": bool value ", x, " is neither 0 nor 1"));
      }
      v->u = x;
      return absl::OkStatus();
    }
    case GgufValueType::kString: return in.ReadString(&v->s, what);
    case GgufValueType::kArray: break;
  }
  STEADY_CHECK(false && "ReadScalar on an array");
  return absl::InternalError("unreachable");
}

absl::Status ReadValue(Cursor& in, const std::string& key, const std::string& file, GgufValue* v) {
  const std::string where = absl::StrCat("metadata ", Quoted(key));
  uint32_t type = 0;
  if (auto s = in.Read(&type, where + "'s type"); !s.ok()) return s;
  if (!IsKnownValueType(type)) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", where, ": unknown value type ", type,
                                                   " at byte ", in.position() - 4, " (0..12 are defined)"));
  }
  if (GgufValueType(type) != GgufValueType::kArray) {
    return ReadScalar(in, GgufValueType(type), where, file, v);
  }
  v->type = GgufValueType::kArray;
  uint32_t element_type = 0;
  uint64_t count = 0;
  if (auto s = in.Read(&element_type, where + "'s array element type"); !s.ok()) return s;
  if (!IsKnownValueType(element_type)) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", where, ": unknown array element type ", element_type,
                                                   " at byte ", in.position() - 4, " (0..12 are defined)"));
  }
  if (GgufValueType(element_type) == GgufValueType::kArray) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", where, ": arrays of arrays are not supported"));
  }
  if (auto s = in.Read(&count, where + "'s array length"); !s.ok()) return s;
  v->element_type = GgufValueType(element_type);
  const uint64_t min_bytes = MinValueBytes(v->element_type);
  if (count > kMaxArrayElements || count > in.remaining() / min_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        file, ": ", where, ": array length ", count, " at byte ", in.position() - 8, " is absurd (",
        in.remaining(), " bytes remain, at least ", min_bytes, " per ", GgufValueTypeName(v->element_type),
        "; the limit is ", kMaxArrayElements, " elements)"));
  }
  v->elements.resize(count);
  for (uint64_t e = 0; e < count; ++e) {
    if (auto s = ReadScalar(in, v->element_type, absl::StrCat(where, "[", e, "]"), file, &v->elements[e]); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// Product of dims (ggml order) and the tensor's byte count; errors name the tensor.
absl::Status SizeTensor(const std::string& file, const GgmlTypeTraits& traits, GgufTensorInfo* t) {
  const std::string where = absl::StrCat(file, ": tensor ", Quoted(t->name));
  uint64_t elements = 1;
  for (uint64_t d : t->dims) {
    if (d > uint64_t(std::numeric_limits<int64_t>::max()) || __builtin_mul_overflow(elements, d, &elements) ||
        elements > uint64_t(std::numeric_limits<int64_t>::max())) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": dimensions ", absl::StrJoin(t->dims, " x "),
                                                     " overflow a 64-bit element count"));
    }
  }
  if (!t->dims.empty() && t->dims[0] % traits.block_elements != 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": rows of ", t->dims[0], " values are not whole ",
                                                   traits.name, " blocks of ", traits.block_elements));
  }
  if (__builtin_mul_overflow(elements / traits.block_elements, uint64_t(traits.block_bytes), &t->bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": dimensions ", absl::StrJoin(t->dims, " x "), " of ",
                                                   traits.name, " overflow a 64-bit byte count"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GgufFile> GgufFile::Open(const std::string& path) {
  auto mapped = MapFileReadOnly(path);
  if (!mapped.ok()) return mapped.status();
  GgufFile file;
  file.display_name_ = path;
  file.size_ = uint64_t(mapped->bytes.size());
  file.storage_ = std::move(mapped->storage);
  file.data_ = mapped->bytes.data();
  file.mapped_ = true;
  if (absl::Status s = file.ParseAll(); !s.ok()) return s;
  return file;
}

absl::StatusOr<GgufFile> GgufFile::Parse(std::string bytes, std::string display_name) {
  GgufFile file;
  auto owned = std::make_shared<const std::string>(std::move(bytes));
  file.data_ = owned->data();
  file.size_ = owned->size();
  file.storage_ = std::move(owned);
  file.display_name_ = std::move(display_name);
  if (absl::Status s = file.ParseAll(); !s.ok()) return s;
  return file;
}

absl::Status GgufFile::ParseAll() {
  const std::string& file = display_name_;
  auto invalid = [&](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(file, ": ", parts...)); };
  Cursor in(data_, size_, file);
  uint32_t magic = 0;
  if (auto s = in.Read(&magic, "the magic number"); !s.ok()) return s;
  if (magic != kMagic) return invalid("not a GGUF file (the first 4 bytes are not \"GGUF\")");
  if (auto s = in.Read(&version_, "the version"); !s.ok()) return s;
  if (version_ != 3) return invalid("GGUF version ", version_, " is not supported (only version 3)");
  uint64_t tensor_count = 0, kv_count = 0;
  if (auto s = in.Read(&tensor_count, "the tensor count"); !s.ok()) return s;
  if (auto s = in.Read(&kv_count, "the metadata count"); !s.ok()) return s;
  // A key/value pair takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor info record at
  // least 8 (name length) + 4 (dimension count) + 4 (type) + 8 (offset).
  if (kv_count > in.remaining() / 13) {
    return invalid("metadata count ", kv_count, " is absurd for the ", in.remaining(), " bytes that remain");
  }
  if (tensor_count > in.remaining() / 24) {
    return invalid("tensor count ", tensor_count, " is absurd for the ", in.remaining(), " bytes that remain");
  }

  metadata_.reserve(kv_count);
  for (uint64_t k = 0; k < kv_count; ++k) {
    std::string key;
    if (auto s = in.ReadString(&key, absl::StrCat("metadata key #", k)); !s.ok()) return s;
    GgufValue value;
    if (auto s = ReadValue(in, key, file, &value); !s.ok()) return s;
    if (!metadata_index_.emplace(key, metadata_.size()).second) {
      return invalid("metadata key ", Quoted(key), " appears more than once");
    }
    metadata_.emplace_back(std::move(key), std::move(value));
  }
  if (const GgufValue* a = FindValue("general.alignment"); a != nullptr) {
    if (a->type != GgufValueType::kUint32) {
      return invalid("general.alignment must be a uint32, not ", GgufValueTypeName(a->type));
    }
    if (a->u == 0 || !std::has_single_bit(a->u)) {
      return invalid("general.alignment ", a->u, " is not a power of two");
    }
    alignment_ = a->u;
  }

  tensors_.reserve(tensor_count);
  for (uint64_t n = 0; n < tensor_count; ++n) {
    GgufTensorInfo t;
    if (auto s = in.ReadString(&t.name, absl::StrCat("tensor #", n, "'s name")); !s.ok()) return s;
    const std::string where = absl::StrCat("tensor ", Quoted(t.name));
    if (t.name.size() > kMaxNameBytes) {
      return invalid(where, ": name is ", t.name.size(), " bytes, longer than ggml's ", kMaxNameBytes);
    }
    uint32_t n_dims = 0;
    if (auto s = in.Read(&n_dims, where + "'s dimension count"); !s.ok()) return s;
    if (n_dims > kMaxDims) return invalid(where, ": ", n_dims, " dimensions (ggml allows at most ", kMaxDims, ")");
    t.dims.resize(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      if (auto s = in.Read(&t.dims[d], where + "'s dimensions"); !s.ok()) return s;
    }
    if (auto s = in.Read(&t.type, where + "'s type"); !s.ok()) return s;
    if (auto s = in.Read(&t.offset, where + "'s offset"); !s.ok()) return s;
    GgmlTypeTraits traits;
    if (!LookUpGgmlType(t.type, &traits)) {
      return invalid(where, ": ggml type ", t.type, " is unknown or not supported");
    }
    if (auto s = SizeTensor(file, traits, &t); !s.ok()) return s;
    if (t.offset % alignment_ != 0) {
      return invalid(where, ": data offset ", t.offset, " is not a multiple of the alignment ", alignment_);
    }
    if (!tensor_index_.emplace(t.name, tensors_.size()).second) {
      return invalid("tensor name ", Quoted(t.name), " appears more than once");
    }
    tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment after the header.
  const uint64_t header_end = in.position();
  data_offset_ = header_end + (alignment_ - header_end % alignment_) % alignment_;
  const uint64_t data_size = size_ >= data_offset_ ? size_ - data_offset_ : 0;
  if (!tensors_.empty() && size_ < data_offset_) {
    return invalid("the file (", size_, " bytes) ends before its data section at byte ", data_offset_);
  }
  std::vector<const GgufTensorInfo*> by_offset;
  for (const GgufTensorInfo& t : tensors_) {
    if (t.offset > data_size || t.bytes > data_size - t.offset) {
      return invalid("tensor ", Quoted(t.name), ": data [", t.offset, ", ", t.offset, " + ", t.bytes,
                     ") reaches past the end of the data section (", data_size, " bytes)");
    }
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](const GgufTensorInfo* a, const GgufTensorInfo* b) {
    return a->offset != b->offset ? a->offset < b->offset : a->bytes < b->bytes;
  });
  for (size_t k = 1; k < by_offset.size(); ++k) {
    const GgufTensorInfo& a = *by_offset[k - 1];
    const GgufTensorInfo& b = *by_offset[k];
    if (b.offset < a.offset + a.bytes) {
      return invalid("tensor ", Quoted(b.name), " at data [", b.offset, ", ", b.offset + b.bytes,
                     ") overlaps tensor ", Quoted(a.name), " at [", a.offset, ", ", a.offset + a.bytes, ")");
    }
  }
  return absl::OkStatus();
}

const GgufValue* GgufFile::FindValue(std::string_view key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

absl::StatusOr<const GgufValue*> Typed(const GgufFile& f, std::string_view key, bool ok_type(const GgufValue&),
                                       const char* wanted) {
  const GgufValue* v = f.FindValue(key);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat(f.display_name(), ": no metadata ", Quoted(key)));
  if (!ok_type(*v)) {
    return absl::InvalidArgumentError(absl::StrCat(f.display_name(), ": metadata ", Quoted(key), " is ",
                                                   GgufValueTypeName(v->type), ", not ", wanted));
  }
  return v;
}

}  // namespace

absl::StatusOr<std::string> GgufFile::GetString(std::string_view key) const {
  auto v = Typed(*this, key, [](const GgufValue& v) { return v.type == GgufValueType::kString; }, "a string");
  if (!v.ok()) return v.status();
  return (*v)->s;
}

absl::StatusOr<uint64_t> GgufFile::GetUint(std::string_view key) const {
  auto v = Typed(*this, key, [](const GgufValue& v) { return v.is_unsigned() || (v.is_signed() && v.i >= 0); },
                 "a non-negative integer");
  if (!v.ok()) return v.status();
  return (*v)->is_unsigned() ? (*v)->u : uint64_t((*v)->i);
}

absl::StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  auto v = Typed(*this, key, [](const GgufValue& v) { return v.is_float(); }, "a float32 or float64");
  if (!v.ok()) return v.status();
  return (*v)->f;
}

std::string_view GgufFile::RawData(const GgufTensorInfo& info) const {
  STEADY_CHECK(data_offset_ + info.offset + info.bytes <= size_);
  return std::string_view(data_ + data_offset_ + info.offset, info.bytes);
}

absl::StatusOr<std::vector<float>> GgufFile::ReadFloat(std::string_view name) const {
  const GgufTensorInfo* t = FindTensor(name);
  if (t == nullptr) return absl::NotFoundError(absl::StrCat(display_name_, ": tensor ", Quoted(name), ": not in the file"));
  if (!CanDequantize(t->type)) {
    return absl::InvalidArgumentError(absl::StrCat(display_name_, ": tensor ", Quoted(name), ": type ",
                                                   GgmlTypeName(t->type), " cannot be dequantized (",
                                                   DequantizableTypeNames(), " can)"));
  }
  std::vector<float> out(size_t(t->NumElements()));
  const std::string_view raw = RawData(*t);
  Dequantize(t->type, raw.data(), int64_t(out.size()), out.data());
  return out;
}

}  // namespace steady
