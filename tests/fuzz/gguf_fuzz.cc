// libFuzzer target for the GGUF reader (model/gguf/gguf.h): any byte string must give either a clean
// error that names the file, or a GgufFile whose tensors lie inside the data section without
// overlapping and dequantize (where the type allows) to the right number of values.
//
// Build and run: tools/fuzz/run.sh gguf_fuzz [SECONDS] (docs/fuzzing.md; seeds tests/fuzz/corpus/gguf_fuzz).
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "base/check.h"
#include "model/gguf/dequantize.h"
#include "model/gguf/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = steady::GgufFile::Parse(std::string(reinterpret_cast<const char*>(data), size), "fuzz.gguf");
  if (!f.ok()) {
    STEADY_CHECK(f.status().message().rfind("fuzz.gguf: ", 0) == 0);
    return 0;
  }
  for (const auto& [key, value] : f->metadata()) {
    STEADY_CHECK(f->FindValue(key) == &value);
    STEADY_CHECK(!value.ToString().empty());
  }
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const steady::GgufTensorInfo& t : f->tensors()) {
    STEADY_CHECK(f->FindTensor(t.name) == &t);
    STEADY_CHECK(t.offset % f->alignment() == 0);
    STEADY_CHECK(f->data_offset() + t.offset + t.bytes <= size);
    STEADY_CHECK(f->RawData(t).size() == t.bytes);
    ranges.emplace_back(t.offset, t.offset + t.bytes);
    if (t.NumElements() <= (1u << 20)) {
      auto values = f->ReadFloat(t.name);
      STEADY_CHECK(values.ok() == steady::CanDequantize(t.type));
      if (values.ok()) STEADY_CHECK(values->size() == t.NumElements());
    }
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t k = 1; k < ranges.size(); ++k) STEADY_CHECK(ranges[k].first >= ranges[k - 1].second);
  return 0;
}
