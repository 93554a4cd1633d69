// The strict safetensors reader (model/checkpoint/safetensors.h): refuses anything it cannot prove well formed.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <tuple>
#include <type_traits>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/check.h"
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

}  // namespace

absl::StatusOr<SafeTensors> SafeTensors::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("cannot open", path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    absl::Status s = ErrnoError("cannot stat", path);
    ::close(fd);
    return s;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  std::string bytes(size_t(st.st_size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      absl::Status s = ErrnoError("read failed", path);
      ::close(fd);
      return s;
    }
    if (n == 0) break;  // the file shrank while we read it
    done += size_t(n);
  }
  ::close(fd);
  if (done != bytes.size()) {
    return absl::DataLossError(absl::StrCat(path, ": file changed size while being read"));
  }
  return Parse(std::move(bytes), path);
}

absl::StatusOr<SafeTensors> SafeTensors::Parse(std::string bytes, std::string display_name) {
  const std::string& file = display_name;
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

  SafeTensors st;
  st.data_offset_ = 8 + header_size;
  const uint64_t data_size = bytes.size() - st.data_offset_;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) return invalid("__metadata__ must be an object of strings");
      for (const auto& [mkey, mvalue] : value.items()) {
        if (!mvalue.is_string()) return invalid("__metadata__ ", Quoted(mkey), " must be a string");
        st.metadata_[mkey] = mvalue.get<std::string>();
      }
      continue;
    }
    TensorInfo info;
    if (absl::Status s = ParseTensorEntry(file, key, value, data_size, &info); !s.ok()) return s;
    st.tensors_.push_back(std::move(info));
  }
  // File order; empty tensors first at a shared offset, then by name, so the order is deterministic.
  std::sort(st.tensors_.begin(), st.tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  if (absl::Status s = CheckCoverage(file, st.tensors_, data_size); !s.ok()) return s;
  for (size_t i = 0; i < st.tensors_.size(); ++i) st.index_.emplace(st.tensors_[i].name, i);
  st.display_name_ = std::move(display_name);
  st.bytes_ = std::move(bytes);
  return st;
}

const TensorInfo* SafeTensors::Find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::string_view SafeTensors::RawData(const TensorInfo& info) const {
  STEADY_CHECK(info.begin <= info.end && data_offset_ + info.end <= bytes_.size());
  return std::string_view(bytes_.data() + data_offset_ + info.begin, info.end - info.begin);
}

namespace {

template <typename T>
absl::StatusOr<std::vector<T>> ReadAs(const SafeTensors& st, std::string_view name,
                                             const std::vector<int64_t>& expected_shape, bool allow_nonfinite) {
  const std::string where = absl::StrCat(st.display_name(), ": tensor ", Quoted(name));
  const TensorInfo* info = st.Find(name);
  if (info == nullptr) return absl::NotFoundError(absl::StrCat(where, ": not in the file"));
  if (!IsFloatDType(info->dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": dtype ", DTypeCStr(info->dtype),
                                                   " cannot be read as floating point (F64, F32, F16 or BF16 only)"));
  }
  if (!expected_shape.empty() && info->shape != expected_shape) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": shape ", ShapeString(info->shape), " but expected ",
                                                   ShapeString(expected_shape)));
  }
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
