// Helpers shared by the safetensors reader (safetensors_reader.cc) and writer
// (safetensors_writer.cc). Internal to model/: the format's API is model/checkpoint/safetensors.h.
#ifndef STEADY_MODEL_CHECKPOINT_SAFETENSORS_FORMAT_H_
#define STEADY_MODEL_CHECKPOINT_SAFETENSORS_FORMAT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/checkpoint/safetensors.h"

namespace steady::safetensors_format {

// "F32", "BF16", ... as written in a header.
const char* DTypeCStr(DType dtype);
// F64, F32, F16 or BF16: the dtypes that read and write as floating point.
bool IsFloatDType(DType d);
// A name as it appears in an error message: quoted, with quotes, backslashes and control bytes
// escaped (names come from untrusted files).
std::string Quoted(std::string_view s);
// double -> float, rounding to nearest even; magnitudes beyond float's range become +-inf.
float NarrowToFloat(double v);
// "[2, 3]".
std::string ShapeString(const std::vector<int64_t>& shape);
// Product of `shape` (all >= 0) times `element_size`; false on 64-bit overflow or a product above
// INT64_MAX (NumElements is int64_t).
bool CheckedByteCount(const std::vector<int64_t>& shape, uint64_t element_size, uint64_t* elements,
                      uint64_t* bytes);

}  // namespace steady::safetensors_format

#endif  // STEADY_MODEL_CHECKPOINT_SAFETENSORS_FORMAT_H_
