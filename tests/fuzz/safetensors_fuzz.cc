// libFuzzer target for the safetensors reader: any byte string must give either a clean error that
// names the file, or a SafeTensors whose tensors tile the data and convert without surprises.
//
// Build and run: tools/fuzz/run.sh safetensors_fuzz [SECONDS] (docs/fuzzing.md; seeds:
// tests/data/safetensors/valid and malformed, dictionary tests/data/safetensors/fuzz.dict).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "base/check.h"
#include "model/checkpoint/safetensors.h"

namespace {

using steady::DType;

bool IsFloat(DType d) { return d == DType::kF64 || d == DType::kF32 || d == DType::kF16 || d == DType::kBF16; }

// Re-encoding a decoded 16-bit value gives back its bits (NaN payloads aside).
void CheckHalfRoundTrip(const steady::SafeTensors& st, const steady::TensorInfo& t) {
  if (t.dtype != DType::kF16 && t.dtype != DType::kBF16) return;
  const std::string_view raw = st.RawData(t);
  for (size_t i = 0; i + 2 <= raw.size(); i += 2) {
    uint16_t h;
    std::memcpy(&h, raw.data() + i, 2);
    const float f = t.dtype == DType::kF16 ? steady::HalfToFloat(h) : steady::BFloat16ToFloat(h);
    if (std::isnan(f)) continue;
    STEADY_CHECK((t.dtype == DType::kF16 ? steady::FloatToHalf(f) : steady::FloatToBFloat16(f)) == h);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto st = steady::SafeTensors::Parse(std::string(reinterpret_cast<const char*>(data), size), "fuzz.safetensors");
  if (!st.ok()) {
    STEADY_CHECK(st.status().message().rfind("fuzz.safetensors: ", 0) == 0);
    return 0;
  }
  uint64_t covered = 0;  // accepted tensors tile the data section in order
  for (const steady::TensorInfo& t : st->tensors()) {
    STEADY_CHECK(t.begin == covered);
    covered = t.end;
    STEADY_CHECK(st->Find(t.name) == &t);
    STEADY_CHECK(st->RawData(t).size() == uint64_t(t.NumElements()) * steady::DTypeSize(t.dtype));
    auto strict = st->ReadFloat(t.name);
    auto lenient = st->ReadDouble(t.name, t.shape, /*allow_nonfinite=*/true);
    STEADY_CHECK(lenient.ok() == IsFloat(t.dtype));
    if (!IsFloat(t.dtype)) {
      STEADY_CHECK(!strict.ok());
      continue;
    }
    STEADY_CHECK(lenient->size() == size_t(t.NumElements()));
    if (strict.ok()) {
      STEADY_CHECK(strict->size() == lenient->size());
      for (float v : *strict) STEADY_CHECK(std::isfinite(v));
    } else {
      STEADY_CHECK(strict.status().message().rfind("fuzz.safetensors: tensor \"", 0) == 0);
    }
    CheckHalfRoundTrip(*st, t);
  }
  STEADY_CHECK(covered <= size);
  return 0;
}
