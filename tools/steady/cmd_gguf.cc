// steady gguf-info: a GGUF file's header, metadata and tensor table, read by model/gguf's strict
// reader; optionally one tensor dequantized to raw fp32 (for comparisons with other tools), or an
// fp32 tensor after the CPU backend's own quantizer (--cpu-weights q8, q4, q4k).
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/file_io.h"
#include "model/decoder/cpu_weights.h"
#include "model/decoder/weights.h"
#include "model/gguf/gguf.h"
#include "tools/steady/commands.h"

namespace steady {
namespace {

// A matrix's values after the CPU backend's quantizer for --cpu-weights `format` (q8, q4 or q4k),
// read back as fp32: what a server started with that flag would multiply by.
absl::StatusOr<std::vector<float>> Requantize(const GgufFile& file, const std::string& name, std::string_view format,
                                              std::vector<float> values) {
  const absl::StatusOr<CpuWeights> precision = ParseCpuWeights(format);
  if (!precision.ok() || (*precision != CpuWeights::kQ8 && *precision != CpuWeights::kQ4 && *precision != CpuWeights::kQ4K)) {
    return absl::InvalidArgumentError(absl::StrCat("--requantize: expected q8, q4 or q4k, got \"", std::string(format), "\""));
  }
  const std::vector<int64_t> shape = file.FindTensor(name)->Shape();  // ReadFloat found it
  if (shape.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("--requantize: tensor \"", name, "\" has ", shape.size(),
                                                   " dimensions; only a matrix is quantized"));
  }
  const WeightMatrix quantized = WeightMatrix::FromFloats(std::move(values), shape[0], shape[1]).ConvertTo(*ConvertedType(*precision));
  return quantized.ToFloat();
}

absl::Status RunGgufInfo(const Flags& flags) {
  if (absl::Status s = flags.ExpectPositional({"FILE"}); !s.ok()) return s;
  auto max_elements = flags.GetInt("array-elements", 8, 0, int64_t{1} << 30);
  if (!max_elements.ok()) return max_elements.status();
  if (flags.Has("out") != flags.Has("tensor")) {
    return absl::InvalidArgumentError("--tensor NAME and --out FILE go together");
  }
  if (flags.Has("requantize") && !flags.Has("tensor")) {
    return absl::InvalidArgumentError("--requantize needs --tensor NAME and --out FILE");
  }
  auto file = GgufFile::Open(flags.positional()[0]);
  if (!file.ok()) return file.status();

  if (flags.Has("tensor")) {  // one tensor as little-endian fp32, nothing printed
    auto values = file->ReadFloat(flags.Get("tensor"));
    if (!values.ok()) return values.status();
    if (flags.Has("requantize")) {
      auto requantized = Requantize(*file, flags.Get("tensor"), flags.Get("requantize"), std::move(*values));
      if (!requantized.ok()) return requantized.status();
      *values = std::move(*requantized);
    }
    const std::string_view bytes(reinterpret_cast<const char*>(values->data()), values->size() * sizeof(float));
    return WriteFileAtomic(flags.Get("out"), {bytes});
  }

  std::string out = absl::StrFormat("%s: GGUF version %u, %d bytes, alignment %d, data at byte %d\n",
                                    file->display_name(), file->version(), file->file_size(), file->alignment(),
                                    file->data_offset());
  absl::StrAppend(&out, "\nmetadata (", file->metadata().size(), " keys):\n");
  for (const auto& [key, value] : file->metadata()) {
    std::string type = GgufValueTypeName(value.type);
    if (value.type == GgufValueType::kArray) type = absl::StrCat("array of ", GgufValueTypeName(value.element_type));
    absl::StrAppendFormat(&out, "  %-40s %-17s %s\n", key, type, value.ToString(size_t(*max_elements)));
  }
  absl::StrAppend(&out, "\ntensors (", file->tensors().size(), "):\n");
  absl::StrAppendFormat(&out, "  %-40s %-6s %-22s %14s %14s\n", "name", "type", "shape", "offset", "bytes");
  uint64_t total = 0;
  for (const GgufTensorInfo& t : file->tensors()) {
    absl::StrAppendFormat(&out, "  %-40s %-6s %-22s %14d %14d\n", t.name, GgmlTypeName(t.type),
                          absl::StrCat("[", absl::StrJoin(t.Shape(), ", "), "]"), t.offset, t.bytes);
    total += t.bytes;
  }
  absl::StrAppend(&out, "\n", file->tensors().size(), " tensors, ", total, " bytes of tensor data\n");
  std::fputs(out.c_str(), stdout);
  return absl::OkStatus();
}

}  // namespace

Command GgufInfoCommand() {
  return {"gguf-info", R"(usage: steady gguf-info FILE [--array-elements N]
       steady gguf-info FILE --tensor NAME --out FILE.f32 [--requantize q8|q4|q4k]

Checks a GGUF (version 3) file as the server's loader would and prints its header, its metadata
(arrays cut to N elements, default 8) and its tensor table (shapes outermost first, as PyTorch
writes them). With --tensor, writes that tensor dequantized to little-endian fp32 instead (types F32,
F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K). --requantize then passes a matrix
through the quantizer --cpu-weights FORMAT uses at load and writes the values it keeps (q4 and q4k
quantize as llama.cpp's Q4_0 and Q4_K do). docs/gguf.md.
)",
          {.with_value = {"array-elements", "tensor", "out", "requantize"}, .switches = {}, .positional = true}, RunGgufInfo};
}

}  // namespace steady
