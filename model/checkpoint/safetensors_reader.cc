// The strict safetensors reader (model/checkpoint/safetensors.h): refuses anything it cannot prove well formed.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>
#include <tuple>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/check.h"
#include "base/file_io.h"
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
using nlohmann::json;

// The header is a flat object of flat objects: deeper JSON is refused before nlohmann parses it, so
// a hostile header cannot make the parser (or dump()/destructors) recurse or allocate per level.
constexpr int kMaxJsonDepth = 8;
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

constexpr DType kAllDTypes[] = {DType::kF64, DType::kF32, DType::kF16, DType::kBF16, DType::kI64,
                                DType::kI32, DType::kI16, DType::kI8,  DType::kU8,   DType::kBool};

bool ParseDType(std::string_view name, DType* out) {
  for (DType d : kAllDTypes) {
    if (DTypeCStr(d) == name) {
      *out = d;
      return true;
    }
  }
  return false;
}

// A JSON value in an error message, cut short (it comes from an untrusted header).
std::string Brief(const json& value) {
  std::string text = value.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return text;
}

// Deepest nesting of [ and { outside strings, stopping early once past `limit`.
int JsonDepth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) break;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

// Parses `text`, refusing duplicate keys in any object (nlohmann would silently keep the last).
// On a JSON syntax error returns a discarded value; on a duplicate sets *duplicate.
json ParseJsonNoDuplicates(std::string_view text, std::string* duplicate, bool* has_duplicate) {
  std::vector<std::set<std::string>> keys_per_object;
  *has_duplicate = false;
  json::parser_callback_t callback = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        keys_per_object.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!keys_per_object.empty()) keys_per_object.pop_back();
        break;
      case json::parse_event_t::key:
        if (!keys_per_object.empty() && !keys_per_object.back().insert(parsed.get<std::string>()).second &&
            !*has_duplicate) {
          *has_duplicate = true;
          *duplicate = parsed.get<std::string>();
        }
        break;
      default:
        break;
    }
    return true;
  };
  return json::parse(text, callback, /*allow_exceptions=*/false);
}

// Finds where and why `text` is not JSON (the DOM parser, with exceptions off, only says that it is
// not). Used on the error path only.
class JsonErrorLocator : public nlohmann::json_sax<json> {
 public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) override {
    // e.what(): "[json.exception.parse_error.101] parse error at line 1, column 5: <reason>", or
    // "[json.exception.out_of_range.406] <reason>" for a number literal beyond double (1e400).
    std::string_view what = e.what();
    if (const size_t tag_end = what.find("] "); what.substr(0, 1) == "[" && tag_end != std::string_view::npos) {
      what.remove_prefix(tag_end + 2);
    }
    if (what.substr(0, 15) == "parse error at ") {
      const size_t colon = what.find(": ");
      if (colon != std::string_view::npos) what.remove_prefix(colon + 2);
    }
    // The reason quotes the bytes last read, which may be anything: keep the message printable ASCII.
    std::string reason;
    for (unsigned char c : what.substr(0, 120)) {
      if (c < 0x20 || c >= 0x7f) {
        absl::StrAppend(&reason, "\\x", absl::Hex(c, absl::kZeroPad2));
      } else {
        reason += char(c);
      }
    }
    description = absl::StrCat(" near header byte ", position, " (", reason, what.size() > 120 ? "...)" : ")");
    return false;
  }
  std::string description;
};

uint64_t ReadLittleEndian64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | uint8_t(p[i]);
  return v;
}

// Parses one tensor entry of the header. `data_size` bounds the offsets.
absl::Status ParseTensorEntry(const std::string& file, const std::string& name, const json& entry,
                              uint64_t data_size, TensorInfo* info) {
  const std::string where = absl::StrCat(file, ": tensor ", Quoted(name));
  if (!entry.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": entry must be an object with dtype, shape and data_offsets"));
  }
  for (const auto& [key, value] : entry.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      return absl::InvalidArgumentError(absl::StrCat(where, ": unexpected key ", Quoted(key),
                                                     " (only dtype, shape and data_offsets are allowed)"));
    }
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(key)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": missing \"", key, "\""));
    }
  }
  info->name = name;

  const json& dtype = entry["dtype"];
  if (!dtype.is_string() || !ParseDType(dtype.get_ref<const std::string&>(), &info->dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": dtype ", dtype.is_string() ? Quoted(dtype.get_ref<const std::string&>()) : "(not a string)",
        " is not one of F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL"));
  }

  const json& shape = entry["shape"];
  if (!shape.is_array()) return absl::InvalidArgumentError(absl::StrCat(where, ": shape must be an array"));
  for (size_t i = 0; i < shape.size(); ++i) {
    const json& d = shape[i];
    // Negative integers parse as number_integer, fractions and huge values as number_float.
    if (!d.is_number_unsigned() || d.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": shape[", i, "] = ", Brief(d), " is not a non-negative 64-bit integer"));
    }
    info->shape.push_back(int64_t(d.get<uint64_t>()));
  }

  const json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": data_offsets must be [begin, end] with non-negative integers, got ", Brief(offsets)));
  }
  info->begin = offsets[0].get<uint64_t>();
  info->end = offsets[1].get<uint64_t>();
  const std::string range = absl::StrCat("data_offsets [", info->begin, ", ", info->end, "]");
  if (info->begin > info->end) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", range, " end before they begin"));
  }
  if (info->end > data_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": ", range, " reach past the end of the data section (", data_size, " bytes)"));
  }
  uint64_t elements = 0, bytes = 0;
  if (!CheckedByteCount(info->shape, DTypeSize(info->dtype), &elements, &bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": shape ", ShapeString(info->shape), " of ",
                                                   DTypeCStr(info->dtype), " overflows a 64-bit byte count"));
  }
  if (info->end - info->begin != bytes) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", range, " hold ", info->end - info->begin,
                                                   " bytes but shape ", ShapeString(info->shape), " of ",
                                                   DTypeCStr(info->dtype), " needs ", bytes));
  }
  return absl::OkStatus();
}

// The tensors, sorted by offset, must tile [0, data_size) exactly: no overlap, no unused bytes.
absl::Status CheckCoverage(const std::string& file, const std::vector<TensorInfo>& sorted, uint64_t data_size) {
  uint64_t covered = 0;          // end of the ranges seen so far
  const TensorInfo* last = nullptr;  // the tensor ending at `covered`
  for (const TensorInfo& t : sorted) {
    if (t.begin < covered) {
      return absl::InvalidArgumentError(absl::StrCat(
          file, ": tensor ", Quoted(t.name), ": data_offsets [", t.begin, ", ", t.end, "] overlap tensor ",
          Quoted(last->name), " at [", last->begin, ", ", last->end, "]"));
    }
    if (t.begin > covered) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": bytes [", covered, ", ", t.begin,
                                                     ") of the data section belong to no tensor (gap before tensor ",
                                                     Quoted(t.name), ")"));
    }
    covered = t.end;
    last = &t;
  }
  if (covered != data_size) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": bytes [", covered, ", ", data_size,
                                                   ") at the end of the data section belong to no tensor"));
  }
  return absl::OkStatus();
}

// Tensor data is little-endian and read with memcpy into native floats.
static_assert(std::endian::native == std::endian::little, "safetensors.cc assumes a little-endian host");

// Element i of a float tensor as double (exact for every float dtype). `p` may be unaligned.
double LoadElement(DType dtype, const char* p, int64_t i) {
  switch (dtype) {
    case DType::kF64: {
      double v;
      std::memcpy(&v, p + 8 * i, 8);
      return v;
    }
    case DType::kF32: {
      float v;
      std::memcpy(&v, p + 4 * i, 4);
      return v;
    }
    case DType::kF16:
    case DType::kBF16: {
      uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      return dtype == DType::kF16 ? HalfToFloat(v) : BFloat16ToFloat(v);
    }
    default:
      STEADY_CHECK(false && "LoadElement on a non-float dtype");
      return 0;
  }
}


// Parses one file's header: its tensors (in file order, `file` set to `file_index`), its metadata and
// where its data section starts. Errors name `file`.
absl::Status ParseFileHeader(std::string_view bytes, const std::string& file, int file_index, uint64_t* data_offset,
                             std::vector<TensorInfo>* tensors, std::map<std::string, std::string>* metadata) {
  auto invalid = [&](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(file, ": ", parts...)); };
  if (bytes.size() < 8) {
    return invalid("file is ", bytes.size(), " bytes, too short for the 8-byte header length");
  }
  const uint64_t header_size = ReadLittleEndian64(bytes.data());
  if (header_size == 0) return invalid("header length is 0");
  if (header_size > kMaxHeaderBytes) {
    return invalid("header length ", header_size, " exceeds the limit of ", kMaxHeaderBytes, " bytes");
  }
  if (header_size > bytes.size() - 8) {
    return invalid("header length ", header_size, " exceeds the ", bytes.size() - 8, " bytes after the length field");
  }
  const std::string_view header_text(bytes.data() + 8, header_size);
  // nlohmann's lexer takes a NUL byte as the end of input and would ignore whatever follows it;
  // JSON allows no raw NUL anywhere, so refuse it here.
  if (const size_t nul = header_text.find('\0'); nul != std::string_view::npos) {
    return invalid("header has a NUL byte at offset ", 8 + nul, " (not valid JSON)");
  }
  if (JsonDepth(header_text, kMaxJsonDepth) > kMaxJsonDepth) {
    return invalid("header JSON is nested deeper than ", kMaxJsonDepth, " levels");
  }
  std::string duplicate;
  bool has_duplicate = false;
  const json header = ParseJsonNoDuplicates(header_text, &duplicate, &has_duplicate);
  if (header.is_discarded()) {
    JsonErrorLocator locator;
    json::sax_parse(header_text, &locator);
    return invalid("header is not valid JSON", locator.description);
  }
  if (has_duplicate) return invalid("header has key ", Quoted(duplicate), " more than once");
  if (!header.is_object()) return invalid("header must be a JSON object");

  *data_offset = 8 + header_size;
  const uint64_t data_size = bytes.size() - *data_offset;
  std::vector<TensorInfo> mine;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) return invalid("__metadata__ must be an object of strings");
      for (const auto& [mkey, mvalue] : value.items()) {
        if (!mvalue.is_string()) return invalid("__metadata__ ", Quoted(mkey), " must be a string");
        (*metadata)[mkey] = mvalue.get<std::string>();
      }
      continue;
    }
    TensorInfo info;
    if (absl::Status s = ParseTensorEntry(file, key, value, data_size, &info); !s.ok()) return s;
    info.file = file_index;
    mine.push_back(std::move(info));
  }
  // File order; empty tensors first at a shared offset, then by name, so the order is deterministic.
  std::sort(mine.begin(), mine.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  if (absl::Status s = CheckCoverage(file, mine, data_size); !s.ok()) return s;
  tensors->insert(tensors->end(), std::make_move_iterator(mine.begin()), std::make_move_iterator(mine.end()));
  return absl::OkStatus();
}

// Index of the first non-finite element of a float tensor's raw bytes, or -1. Tests the exponent
// bits (all ones: inf or NaN) without converting, so a mapped multi-GB checkpoint is checked at
// memory speed.
template <typename Bits>
int64_t FirstNonFinite(const char* p, int64_t n, Bits exponent_mask) {
  constexpr int64_t kBlock = 4096;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = std::min(n, b + kBlock);
    bool bad = false;
    for (int64_t i = b; i < e; ++i) {
      Bits v;
      std::memcpy(&v, p + i * int64_t(sizeof(Bits)), sizeof(Bits));
      bad |= (v & exponent_mask) == exponent_mask;
    }
    if (!bad) continue;
    for (int64_t i = b; i < e; ++i) {
      Bits v;
      std::memcpy(&v, p + i * int64_t(sizeof(Bits)), sizeof(Bits));
      if ((v & exponent_mask) == exponent_mask) return i;
    }
  }
  return -1;
}

int64_t FirstNonFinite(DType dtype, std::string_view raw) {
  switch (dtype) {
    case DType::kF64: return FirstNonFinite<uint64_t>(raw.data(), int64_t(raw.size() / 8), 0x7ff0000000000000ull);
    case DType::kF32: return FirstNonFinite<uint32_t>(raw.data(), int64_t(raw.size() / 4), 0x7f800000u);
    case DType::kF16: return FirstNonFinite<uint16_t>(raw.data(), int64_t(raw.size() / 2), uint16_t(0x7c00));
    case DType::kBF16: return FirstNonFinite<uint16_t>(raw.data(), int64_t(raw.size() / 2), uint16_t(0x7f80));
    default: return -1;
  }
}

// A shard name from an index: a plain file name in the index's directory (no path, no "..").
bool PlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

}  // namespace

struct SafeTensors::File {
  std::string name;
  std::string buffer;          // Parse: the bytes
  MappedFile map;              // Open: the mapping
  uint64_t data_offset = 0;    // 8 + header length
  std::string_view bytes() const {
    return map.storage != nullptr ? map.bytes : std::string_view(buffer);
  }
  File() = default;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
};

absl::StatusOr<SafeTensors> SafeTensors::Open(const std::string& path) {
  auto mapped = MapFileReadOnly(path);
  if (!mapped.ok()) return mapped.status();
  auto file = std::make_unique<File>();
  file->name = path;
  // Counted once however many tensors point into the mapping.
  file->map = *std::move(mapped);
  Files files;
  files.push_back(std::move(file));
  return FromFiles(std::move(files), path);
}

absl::StatusOr<SafeTensors> SafeTensors::Parse(std::string bytes, std::string display_name) {
  auto file = std::make_unique<File>();
  file->name = display_name;
  file->buffer = std::move(bytes);
  Files files;
  files.push_back(std::move(file));
  return FromFiles(std::move(files), std::move(display_name));
}

absl::StatusOr<SafeTensors> SafeTensors::FromFiles(Files files, std::string display_name) {
  SafeTensors st;
  for (size_t f = 0; f < files.size(); ++f) {
    std::map<std::string, std::string> metadata;
    if (absl::Status s = ParseFileHeader(files[f]->bytes(), files[f]->name, int(f), &files[f]->data_offset,
                                         &st.tensors_, &metadata);
        !s.ok()) {
      return s;
    }
    if (f == 0) st.metadata_ = std::move(metadata);
  }
  for (size_t i = 0; i < st.tensors_.size(); ++i) {
    const TensorInfo& t = st.tensors_[i];
    if (auto [it, added] = st.index_.emplace(t.name, i); !added) {
      return absl::InvalidArgumentError(absl::StrCat(display_name, ": tensor ", Quoted(t.name), " is in both ",
                                                     files[st.tensors_[it->second].file]->name, " and ",
                                                     files[t.file]->name));
    }
  }
  st.display_name_ = std::move(display_name);
  st.files_ = std::make_shared<const Files>(std::move(files));
  return st;
}

absl::StatusOr<SafeTensors> SafeTensors::OpenIndex(const std::string& index_path) {
  auto text = ReadWholeFile(index_path);
  if (!text.ok()) return text.status();
  auto invalid = [&](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(index_path, ": ", parts...)); };
  std::string duplicate;
  bool has_duplicate = false;
  const json index = JsonDepth(*text, kMaxJsonDepth) > kMaxJsonDepth
                         ? json(json::value_t::discarded)
                         : ParseJsonNoDuplicates(*text, &duplicate, &has_duplicate);
  if (index.is_discarded() || !index.is_object()) return invalid("not a JSON object");
  if (has_duplicate) return invalid("key ", Quoted(duplicate), " appears more than once");
  if (!index.contains("weight_map") || !index.at("weight_map").is_object()) {
    return invalid("\"weight_map\" must be an object mapping tensor names to shard files");
  }
  // Shards in order of first appearance in the weight map (deterministic: nlohmann sorts keys).
  std::map<std::string, int> shard_of_name;
  std::vector<std::string> shards;
  std::map<std::string, int, std::less<>> placed;  // tensor -> shard index
  for (const auto& [tensor, file] : index.at("weight_map").items()) {
    if (!file.is_string() || !PlainFileName(file.get<std::string>())) {
      return invalid("weight_map: tensor ", Quoted(tensor), ": the shard must be a file name in the index's directory, got ",
                     Brief(file));
    }
    const std::string& name = file.get_ref<const std::string&>();
    auto [it, added] = shard_of_name.emplace(name, int(shards.size()));
    if (added) shards.push_back(name);
    placed[tensor] = it->second;
  }
  if (shards.empty()) return invalid("weight_map is empty");
  const std::filesystem::path dir = std::filesystem::path(index_path).parent_path();
  Files files;
  for (const std::string& shard : shards) {
    auto one = Open((dir / shard).string());
    if (!one.ok()) return WithContext(one.status(), absl::StrCat(index_path, " names shard ", Quoted(shard)));
    files.push_back(std::move(const_cast<Files&>(*one->files_)[0]));
  }
  auto st = FromFiles(std::move(files), index_path);
  if (!st.ok()) return st.status();
  for (const auto& [tensor, shard] : placed) {
    const TensorInfo* t = st->Find(tensor);
    if (t == nullptr || t->file != shard) {
      return absl::DataLossError(absl::StrCat(index_path, ": tensor ", Quoted(tensor), " is placed in ",
                                              Quoted(shards[shard]), ", which ",
                                              t == nullptr ? "does not hold it" : "is not where it is"));
    }
  }
  for (const TensorInfo& t : st->tensors()) {
    if (!placed.count(t.name)) {
      return absl::InvalidArgumentError(absl::StrCat(index_path, ": shard ", Quoted(shards[t.file]), " holds tensor ",
                                                     Quoted(t.name), ", which the weight_map does not list"));
    }
  }
  return st;
}

absl::StatusOr<SafeTensors> SafeTensors::OpenDirectory(const std::string& dir) {
  const std::filesystem::path index = std::filesystem::path(dir) / "model.safetensors.index.json";
  std::error_code ec;
  if (std::filesystem::exists(index, ec)) return OpenIndex(index.string());
  return Open((std::filesystem::path(dir) / "model.safetensors").string());
}

const TensorInfo* SafeTensors::Find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const std::string& SafeTensors::file_name(int index) const { return (*files_)[size_t(index)]->name; }

uint64_t SafeTensors::FileBytes() const {
  uint64_t n = 0;
  for (const auto& f : *files_) n += f->bytes().size();
  return n;
}

bool SafeTensors::Mapped(const TensorInfo& info) const { return (*files_)[size_t(info.file)]->map.storage != nullptr; }

std::string_view SafeTensors::RawData(const TensorInfo& info) const {
  const File& f = *(*files_)[size_t(info.file)];
  const std::string_view bytes = f.bytes();
  STEADY_CHECK(info.begin <= info.end && f.data_offset + info.end <= bytes.size());
  return bytes.substr(f.data_offset + info.begin, info.end - info.begin);
}

namespace {

// The tensor `name` if it exists, has a float dtype and the expected shape (when one is given).
absl::StatusOr<const TensorInfo*> FindFloatTensor(const SafeTensors& st, std::string_view name,
                                                  const std::vector<int64_t>& expected_shape) {
  const TensorInfo* info = st.Find(name);
  if (info == nullptr) {
    return absl::NotFoundError(absl::StrCat(st.display_name(), ": tensor ", Quoted(name), ": not in the file"));
  }
  const std::string where = absl::StrCat(st.file_name(info->file), ": tensor ", Quoted(name));
  if (!IsFloatDType(info->dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": dtype ", DTypeCStr(info->dtype),
                                                   " cannot be read as floating point (F64, F32, F16 or BF16 only)"));
  }
  if (!expected_shape.empty() && info->shape != expected_shape) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": shape ", ShapeString(info->shape), " but expected ",
                                                   ShapeString(expected_shape)));
  }
  return info;
}

template <typename T>
absl::StatusOr<std::vector<T>> ReadAs(const SafeTensors& st, std::string_view name,
                                      const std::vector<int64_t>& expected_shape, bool allow_nonfinite) {
  auto found = FindFloatTensor(st, name, expected_shape);
  if (!found.ok()) return found.status();
  const TensorInfo* info = *found;
  const std::string where = absl::StrCat(st.file_name(info->file), ": tensor ", Quoted(name));
  const std::string_view raw = st.RawData(*info);
  const int64_t n = info->NumElements();
  std::vector<T> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double v = LoadElement(info->dtype, raw.data(), i);
    if constexpr (std::is_same_v<T, float>) {
      out[size_t(i)] = NarrowToFloat(v);
    } else {
      out[size_t(i)] = v;
    }
    if (!allow_nonfinite && !std::isfinite(out[size_t(i)])) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": value ", v, " at index ", i,
          std::isfinite(v) ? " overflows float" : " is not finite", " (non-finite values are refused)"));
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<const TensorInfo*> SafeTensors::CheckedTensor(std::string_view name,
                                                             const std::vector<int64_t>& expected_shape) const {
  auto found = FindFloatTensor(*this, name, expected_shape);
  if (!found.ok()) return found.status();
  const TensorInfo* info = *found;
  const std::string where = absl::StrCat(file_name(info->file), ": tensor ", Quoted(name));
  const std::string_view raw = RawData(*info);
  if (const int64_t bad = FirstNonFinite(info->dtype, raw); bad >= 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": value ", LoadElement(info->dtype, raw.data(), bad),
                                                   " at index ", bad, " is not finite (non-finite values are refused)"));
  }
  return info;
}


absl::StatusOr<std::vector<float>> SafeTensors::ReadFloat(std::string_view name,
                                                          const std::vector<int64_t>& expected_shape,
                                                          bool allow_nonfinite) const {
  return ReadAs<float>(*this, name, expected_shape, allow_nonfinite);
}

absl::StatusOr<std::vector<double>> SafeTensors::ReadDouble(std::string_view name,
                                                            const std::vector<int64_t>& expected_shape,
                                                            bool allow_nonfinite) const {
  return ReadAs<double>(*this, name, expected_shape, allow_nonfinite);
}

}  // namespace steady
