// steady gguf-info: a GGUF file's header, metadata and tensor table, read by model/gguf's strict
// reader; optionally one tensor dequantized to raw fp32 (for comparisons with other tools).
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/file_io.h"
#include "model/gguf/gguf.h"
#include "tools/steady/commands.h"

namespace steady {
namespace {

absl::Status RunGgufInfo(const Flags& flags) {
  if (absl::Status s = flags.ExpectPositional({"FILE"}); !s.ok()) return s;
  auto max_elements = flags.GetInt("array-elements", 8, 0, int64_t{1} << 30);
  if (!max_elements.ok()) return max_elements.status();
  if (flags.Has("out") != flags.Has("tensor")) {
    return absl::InvalidArgumentError("--tensor NAME and --out FILE go together");
  }
  auto file = GgufFile::Open(flags.positional()[0]);
  if (!file.ok()) return file.status();

  if (flags.Has("tensor")) {  // one tensor as little-endian fp32, nothing printed
    auto values = file->ReadFloat(flags.Get("tensor"));
    if (!values.ok()) return values.status();
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
       steady gguf-info FILE --tensor NAME --out FILE.f32

Checks a GGUF (version 3) file as the server's loader would and prints its header, its metadata
(arrays cut to N elements, default 8) and its tensor table (shapes outermost first, as PyTorch
writes them). With --tensor, writes that tensor dequantized to little-endian fp32 instead (types F32,
F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K). docs/gguf.md.
)",
          {.with_value = {"array-elements", "tensor", "out"}, .switches = {}, .positional = true}, RunGgufInfo};
}

}  // namespace steady
