#include "model/decoder/weights.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "base/file_io.h"
#include "kernels/cpu/amx.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_dot.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"

namespace steady {
namespace {

// A buffer a converted matrix owns, of any element type.
template <typename T>
std::shared_ptr<std::vector<T>> Buffer(size_t n) {
  return std::make_shared<std::vector<T>>(n);
}

// Rows converted in parallel, in bands of about a million weights.
template <typename Fn>
void ByRowBands(int64_t rows, int64_t cols, const Fn& convert_rows) {
  const int64_t band = std::max<int64_t>(1, (int64_t(1) << 20) / std::max<int64_t>(cols, 1));
  cpu::ParallelFor(int((rows + band - 1) / band), [&](int b) {
    const int64_t r0 = int64_t(b) * band;
    convert_rows(r0, std::min(rows, r0 + band));
  });
}

}  // namespace

const char* WeightTypeName(WeightType t) {
  switch (t) {
    case WeightType::kF32: return "f32";
    case WeightType::kBf16: return "bf16";
    case WeightType::kF16: return "f16";
    case WeightType::kQ8: return "q8";
    case WeightType::kAmxBf16: return "amx-bf16";
    case WeightType::kDotBf16: return "dot-bf16";
    case WeightType::kDotQ8: return "dot-q8";
    case WeightType::kQ4: return "q4";
    case WeightType::kDotQ4: return "dot-q4";
    case WeightType::kQ4K: return "q4k";
    case WeightType::kDotQ4K: return "dot-q4k";
    case WeightType::kQ6K: return "q6k";
    case WeightType::kDotQ6K: return "dot-q6k";
    case WeightType::kQ8_0: return "q8_0";
    case WeightType::kQ5K: return "q5k";
    case WeightType::kDotQ5K: return "dot-q5k";
    case WeightType::kQ4_1: return "q4_1";
    case WeightType::kQ5_0: return "q5_0";
    case WeightType::kQ5_1: return "q5_1";
    case WeightType::kDotQ4_1: return "dot-q4_1";
    case WeightType::kDotQ5_0: return "dot-q5_0";
    case WeightType::kDotQ5_1: return "dot-q5_1";
    case WeightType::kDotF16: return "dot-f16";
    case WeightType::kQ3K: return "q3k";
    case WeightType::kIq4Nl: return "iq4_nl";
    case WeightType::kIq4Xs: return "iq4_xs";
    case WeightType::kQ2K: return "q2k";
  }
  return "?";
}

std::optional<cpu::Q32Type> Q32TypeOf(WeightType t) {
  switch (t) {
    case WeightType::kQ4_1:
    case WeightType::kDotQ4_1: return cpu::Q32Type::kQ4_1;
    case WeightType::kQ5_0:
    case WeightType::kDotQ5_0: return cpu::Q32Type::kQ5_0;
    case WeightType::kQ5_1:
    case WeightType::kDotQ5_1: return cpu::Q32Type::kQ5_1;
    default: return std::nullopt;
  }
}

bool IsPackedQ32(WeightType t) {
  return t == WeightType::kDotQ4_1 || t == WeightType::kDotQ5_0 || t == WeightType::kDotQ5_1;
}

std::optional<WeightType> Int8PackedType(WeightType t) {
  switch (t) {
    case WeightType::kQ8:
    case WeightType::kQ8_0: return WeightType::kDotQ8;
    case WeightType::kQ4: return WeightType::kDotQ4;
    case WeightType::kQ4K: return WeightType::kDotQ4K;
    case WeightType::kQ5K: return WeightType::kDotQ5K;
    case WeightType::kQ6K:
    case WeightType::kQ3K: return WeightType::kDotQ6K;  // q3k's values as q6k's (q3k_iq4.h)
    case WeightType::kIq4Nl:
    case WeightType::kIq4Xs: return WeightType::kDotQ8;  // the IQ4s' values as q8's
    case WeightType::kQ4_1: return WeightType::kDotQ4_1;
    case WeightType::kQ5_0: return WeightType::kDotQ5_0;
    case WeightType::kQ5_1: return WeightType::kDotQ5_1;
    default: return std::nullopt;
  }
}

bool IsInt8Packed(WeightType t) {
  return t == WeightType::kDotQ8 || t == WeightType::kDotQ4 || t == WeightType::kDotQ4K || t == WeightType::kDotQ5K ||
         t == WeightType::kDotQ6K || IsPackedQ32(t);
}

WeightMatrix WeightMatrix::View(WeightType type, int64_t rows, int64_t cols, const void* data,
                                std::shared_ptr<const void> owner, bool mapped) {
  STEADY_CHECK(MatchesAlignment(type, data));
  WeightMatrix m;
  m.type_ = type;
  m.rows_ = rows;
  m.cols_ = cols;
  m.data_ = data;
  m.owner_ = std::move(owner);
  m.mapped_ = mapped;
  return m;
}

WeightMatrix WeightMatrix::Owned(WeightType type, int64_t rows, int64_t cols, const void* data,
                                 std::shared_ptr<const void> owner) {
  return View(type, rows, cols, data, std::move(owner), /*mapped=*/false);
}

WeightMatrix WeightMatrix::FromFloats(std::vector<float> values, int64_t rows, int64_t cols) {
  STEADY_CHECK(int64_t(values.size()) == rows * cols);
  auto buffer = std::make_shared<std::vector<float>>(std::move(values));
  WeightMatrix m;
  m.rows_ = rows;
  m.cols_ = cols;
  m.data_ = buffer->data();
  m.owner_ = std::move(buffer);
  return m;
}

bool WeightMatrix::MatchesAlignment(WeightType type, const void* data) {
  const auto address = reinterpret_cast<uintptr_t>(data);
  switch (type) {
    case WeightType::kF32: return address % alignof(float) == 0;
    case WeightType::kQ8: return address % alignof(float) == 0;  // the scales after the int8 values
    case WeightType::kQ4:
    case WeightType::kQ4K:
    case WeightType::kQ5K:
    case WeightType::kQ6K:
    case WeightType::kQ4_1:
    case WeightType::kQ5_0:
    case WeightType::kQ5_1:
    case WeightType::kQ3K:
    case WeightType::kIq4Nl:
    case WeightType::kIq4Xs:
    case WeightType::kQ2K:
    case WeightType::kQ8_0: return true;  // ggml's blocks, bytes (d is read with memcpy)
    default: return address % alignof(uint16_t) == 0;
  }
}

int64_t WeightMatrix::Bytes() const {
  switch (type_) {
    case WeightType::kF32: return Weights() * 4;
    case WeightType::kBf16:
    case WeightType::kF16: return Weights() * 2;
    case WeightType::kQ8: return Weights() + rows_ * cpu::Q8BlocksPerRow(cols_) * int64_t(sizeof(float));
    case WeightType::kAmxBf16: return cpu::AmxPackedSize(int(rows_), int(cols_)) * 2;
    case WeightType::kDotBf16: return cpu::Bf16DotPackedSize(rows_, cols_) * 2;
    case WeightType::kDotF16: return cpu::F16DotPackedSize(rows_, cols_) * 2;
    case WeightType::kDotQ8: return cpu::Q8DotPackedSize(rows_, cols_);
    case WeightType::kQ4: return cpu::Q4Bytes(rows_, cols_);
    case WeightType::kDotQ4: return cpu::Q4DotPackedSize(rows_, cols_);
    case WeightType::kQ4K: return cpu::Q4KBytes(rows_, cols_);
    case WeightType::kDotQ4K: return cpu::Q4KDotPackedSize(rows_, cols_);
    case WeightType::kQ6K: return cpu::Q6KBytes(rows_, cols_);
    case WeightType::kDotQ6K: return cpu::Q6KDotPackedSize(rows_, cols_);
    case WeightType::kQ8_0: return cpu::Q8_0Bytes(rows_, cols_);
    case WeightType::kQ5K: return cpu::Q5KBytes(rows_, cols_);
    case WeightType::kDotQ5K: return cpu::Q5KDotPackedSize(rows_, cols_);
    case WeightType::kQ4_1:
    case WeightType::kQ5_0:
    case WeightType::kQ5_1: return cpu::Q32Bytes(*Q32TypeOf(type_), rows_, cols_);
    case WeightType::kDotQ4_1:
    case WeightType::kDotQ5_0:
    case WeightType::kDotQ5_1: return cpu::Q32DotPackedSize(*Q32TypeOf(type_), rows_, cols_);
    case WeightType::kQ3K: return cpu::Q3KBytes(rows_, cols_);
    case WeightType::kIq4Nl: return cpu::Iq4NlBytes(rows_, cols_);
    case WeightType::kIq4Xs: return cpu::Iq4XsBytes(rows_, cols_);
    case WeightType::kQ2K: return cpu::Q2KBytes(rows_, cols_);
  }
  return 0;
}

cpu::Q4KWeights WeightMatrix::q4k() const {
  STEADY_CHECK(type_ == WeightType::kQ4K);
  return {as<uint8_t>()};
}

cpu::Q6KWeights WeightMatrix::q6k() const {
  STEADY_CHECK(type_ == WeightType::kQ6K);
  return {as<uint8_t>()};
}

cpu::Q5KWeights WeightMatrix::q5k() const {
  STEADY_CHECK(type_ == WeightType::kQ5K);
  return {as<uint8_t>()};
}

cpu::Q32Weights WeightMatrix::q32() const {
  STEADY_CHECK(Q32TypeOf(type_) && !IsPackedQ32(type_));
  return {*Q32TypeOf(type_), as<uint8_t>()};
}

cpu::Q3KWeights WeightMatrix::q3k() const {
  STEADY_CHECK(type_ == WeightType::kQ3K);
  return {as<uint8_t>()};
}

cpu::Iq4NlWeights WeightMatrix::iq4_nl() const {
  STEADY_CHECK(type_ == WeightType::kIq4Nl);
  return {as<uint8_t>()};
}

cpu::Iq4XsWeights WeightMatrix::iq4_xs() const {
  STEADY_CHECK(type_ == WeightType::kIq4Xs);
  return {as<uint8_t>()};
}

cpu::Q2KWeights WeightMatrix::q2k() const {
  STEADY_CHECK(type_ == WeightType::kQ2K);
  return {as<uint8_t>()};
}

cpu::Q8_0Weights WeightMatrix::q8_0() const {
  STEADY_CHECK(type_ == WeightType::kQ8_0);
  return {as<uint8_t>()};
}

cpu::Q4Weights WeightMatrix::q4() const {
  STEADY_CHECK(type_ == WeightType::kQ4);
  return {as<uint8_t>()};
}

const float* WeightMatrix::q8_scales() const {
  STEADY_CHECK(type_ == WeightType::kQ8);
  // The int8 values are padded to a multiple of 4 bytes so that the scales after them are aligned.
  return reinterpret_cast<const float*>(as<int8_t>() + (Weights() + 3) / 4 * 4);
}

void WeightMatrix::RowsToFloat(int64_t r0, int64_t r1, float* out) const {
  STEADY_CHECK(0 <= r0 && r0 <= r1 && r1 <= rows_);
  const int64_t begin = r0 * cols_, n = (r1 - r0) * cols_;
  switch (type_) {
    case WeightType::kF32:
      std::memcpy(out, as<float>() + begin, size_t(n) * sizeof(float));
      return;
    case WeightType::kBf16:
      for (int64_t i = 0; i < n; ++i) out[i] = cpu::Bf16ToFloat(as<uint16_t>()[begin + i]);
      return;
    case WeightType::kF16:
      for (int64_t i = 0; i < n; ++i) out[i] = cpu::F16ToFloat(as<uint16_t>()[begin + i]);
      return;
    case WeightType::kQ8: {
      const int64_t blocks = cpu::Q8BlocksPerRow(cols_);
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t k = 0; k < cols_; ++k) {
          out[(r - r0) * cols_ + k] = float(as<int8_t>()[r * cols_ + k]) * q8_scales()[r * blocks + k / cpu::kQ8Block];
        }
      }
      return;
    }
    case WeightType::kQ4:
      return cpu::DequantizeQ4(q4(), cols_, r0, r1, out);
    case WeightType::kDotQ4:
      return cpu::DequantizeQ4Dot(as<uint8_t>(), rows_, cols_, r0, r1, out);
    case WeightType::kQ4K:
      return cpu::DequantizeQ4K(q4k(), cols_, r0, r1, out);
    case WeightType::kQ6K:
      return cpu::DequantizeQ6K(q6k(), cols_, r0, r1, out);
    case WeightType::kQ8_0:
      return cpu::DequantizeQ8_0(q8_0(), cols_, r0, r1, out);
    case WeightType::kQ5K:
      return cpu::DequantizeQ5K(q5k(), cols_, r0, r1, out);
    case WeightType::kQ4_1:
    case WeightType::kQ5_0:
    case WeightType::kQ5_1:
      return cpu::DequantizeQ32(q32(), cols_, r0, r1, out);
    case WeightType::kQ3K:
      return cpu::DequantizeQ3K(q3k(), cols_, r0, r1, out);
    case WeightType::kIq4Nl:
      return cpu::DequantizeIq4Nl(iq4_nl(), cols_, r0, r1, out);
    case WeightType::kIq4Xs:
      return cpu::DequantizeIq4Xs(iq4_xs(), cols_, r0, r1, out);
    case WeightType::kQ2K:
      return cpu::DequantizeQ2K(q2k(), cols_, r0, r1, out);
    case WeightType::kDotQ4_1:
    case WeightType::kDotQ5_0:
    case WeightType::kDotQ5_1:
    case WeightType::kDotQ4K:
    case WeightType::kDotQ5K:
    case WeightType::kDotQ6K:
    case WeightType::kAmxBf16:
    case WeightType::kDotBf16:
    case WeightType::kDotF16:
    case WeightType::kDotQ8:
      break;
  }
  STEADY_CHECK(false && "RowsToFloat of a packed matrix");
}

std::vector<float> WeightMatrix::RowsSlice(int64_t r0, int64_t r1) const {
  std::vector<float> out(size_t((r1 - r0) * cols_));
  ByRowBands(r1 - r0, cols_, [&](int64_t a, int64_t b) { RowsToFloat(r0 + a, r0 + b, out.data() + a * cols_); });
  return out;
}

WeightMatrix WeightMatrix::ConvertTo(WeightType type) const {
  if (type == type_) return *this;
  WeightMatrix m;
  m.type_ = type;
  m.rows_ = rows_;
  m.cols_ = cols_;
  const int64_t n = Weights();
  switch (type) {
    case WeightType::kF32: {
      auto buffer = Buffer<float>(size_t(n));
      ByRowBands(rows_, cols_, [&](int64_t r0, int64_t r1) { RowsToFloat(r0, r1, buffer->data() + r0 * cols_); });
      m.data_ = buffer->data();
      m.owner_ = std::move(buffer);
      return m;
    }
    case WeightType::kBf16:
    case WeightType::kAmxBf16:
    case WeightType::kDotBf16: {
      auto bf16 = Buffer<uint16_t>(size_t(n));
      ByRowBands(rows_, cols_, [&](int64_t r0, int64_t r1) {
        std::vector<float> row(size_t((r1 - r0) * cols_));
        RowsToFloat(r0, r1, row.data());
        for (size_t i = 0; i < row.size(); ++i) (*bf16)[size_t(r0 * cols_) + i] = cpu::FloatToBf16(row[i]);
      });
      if (type == WeightType::kAmxBf16) {  // the tile layout replaces the row-major copy
        auto packed = Buffer<uint16_t>(size_t(cpu::AmxPackedSize(int(rows_), int(cols_))));
        cpu::PackAmxBf16(bf16->data(), int(rows_), int(cols_), packed->data());
        bf16 = std::move(packed);
      } else if (type == WeightType::kDotBf16) {
        auto packed = Buffer<uint16_t>(size_t(cpu::Bf16DotPackedSize(rows_, cols_)));
        cpu::PackBf16Dot(bf16->data(), rows_, cols_, packed->data());
        bf16 = std::move(packed);
      }
      m.data_ = bf16->data();
      m.owner_ = std::move(bf16);
      return m;
    }
    case WeightType::kQ8: {
      const int64_t blocks = cpu::Q8BlocksPerRow(cols_);
      // int8 values (padded to 4 bytes), then the fp32 scales, in one buffer.
      auto buffer = Buffer<float>(size_t((n + 3) / 4 + rows_ * blocks));
      m.data_ = buffer->data();
      int8_t* q = reinterpret_cast<int8_t*>(buffer->data());
      float* scales = const_cast<float*>(m.q8_scales());
      ByRowBands(rows_, cols_, [&](int64_t r0, int64_t r1) {
        if (type_ == WeightType::kQ8_0) {  // its own blocks, the same values: not quantized again
          return cpu::Q8_0ToQ8(q8_0(), cols_, r0, r1, q + r0 * cols_, scales + r0 * blocks);
        }
        if (type_ == WeightType::kQ5_0) {  // q - 16 and d: the same values
          return cpu::Q5_0ToQ8(q32(), cols_, r0, r1, q + r0 * cols_, scales + r0 * blocks);
        }
        if (type_ == WeightType::kIq4Nl) {  // the table's values and d (or d times the run's scale)
          return cpu::Iq4NlToQ8(iq4_nl(), cols_, r0, r1, q + r0 * cols_, scales + r0 * blocks);
        }
        if (type_ == WeightType::kIq4Xs) {
          return cpu::Iq4XsToQ8(iq4_xs(), cols_, r0, r1, q + r0 * cols_, scales + r0 * blocks);
        }
        const std::vector<float> rows = RowsSlice(r0, r1);
        cpu::QuantizeQ8(rows.data(), r1 - r0, int(cols_), q + r0 * cols_, scales + r0 * blocks);
      });
      m.owner_ = std::move(buffer);
      return m;
    }
    case WeightType::kDotQ8: {  // the packed layout replaces the row-major q8 copy
      const WeightMatrix q8 = ConvertTo(WeightType::kQ8);
      auto packed = Buffer<uint8_t>(size_t(cpu::Q8DotPackedSize(rows_, cols_)));
      cpu::PackQ8Dot({q8.as<int8_t>(), q8.q8_scales()}, rows_, cols_, packed->data());
      m.data_ = packed->data();
      m.owner_ = std::move(packed);
      return m;
    }
    case WeightType::kQ4: {  // from the fp32 values, in bands of rows
      auto buffer = Buffer<uint8_t>(size_t(cpu::Q4Bytes(rows_, cols_)));
      m.type_ = WeightType::kQ4;
      m.data_ = buffer->data();
      ByRowBands(rows_, cols_, [&](int64_t r0, int64_t r1) {
        const std::vector<float> rows = RowsSlice(r0, r1);
        cpu::QuantizeQ4(rows.data(), r1 - r0, cols_, buffer->data() + cpu::Q4Bytes(r0, cols_));
      });
      m.owner_ = std::move(buffer);
      return m;
    }
    case WeightType::kDotQ4: {  // packed from q4 rows as they are, else from the fp32 values in bands of 16-row groups
      auto packed = Buffer<uint8_t>(size_t(cpu::Q4DotPackedSize(rows_, cols_)));
      if (type_ == WeightType::kQ4) {
        cpu::PackQ4Dot(q4(), rows_, cols_, packed->data());
        m.data_ = packed->data();
        m.owner_ = std::move(packed);
        return m;
      }
      constexpr int64_t kBand = 1024;
      for (int64_t r0 = 0; r0 < rows_; r0 += kBand) {
        const int64_t r1 = std::min(rows_, r0 + kBand);
        const std::vector<float> rows = RowsSlice(r0, r1);
        cpu::QuantizePackQ4Dot(rows.data(), r1 - r0, cols_, packed->data() + cpu::Q4DotPackedSize(r0, cols_));
      }
      m.data_ = packed->data();
      m.owner_ = std::move(packed);
      return m;
    }
    case WeightType::kQ4K:
    case WeightType::kDotQ4K: {  // quantized from the fp32 values; the packed layout replaces the row-major
      if (type == WeightType::kDotQ4K && type_ == WeightType::kQ4K) {  // packed, not quantized again
        auto packed = Buffer<uint8_t>(size_t(cpu::Q4KDotPackedSize(rows_, cols_)));
        cpu::PackQ4KDot(q4k(), rows_, cols_, packed->data());
        m.data_ = packed->data();
        m.owner_ = std::move(packed);
        return m;
      }
      auto buffer = Buffer<uint8_t>(size_t(cpu::Q4KBytes(rows_, cols_)));
      m.type_ = WeightType::kQ4K;
      m.data_ = buffer->data();
      ByRowBands(rows_, cols_, [&](int64_t r0, int64_t r1) {
        const std::vector<float> rows = RowsSlice(r0, r1);
        cpu::QuantizeQ4K(rows.data(), r1 - r0, int(cols_), buffer->data() + cpu::Q4KBytes(r0, cols_));
      });
      m.owner_ = std::move(buffer);
      return type == WeightType::kQ4K ? m : m.ConvertTo(type);
    }
    case WeightType::kDotQ4_1:
    case WeightType::kDotQ5_0:
    case WeightType::kDotQ5_1: {  // packed from a GGUF file's q4_1, q5_0 or q5_1 rows as they are
      STEADY_CHECK(!IsPackedQ32(type_) && Q32TypeOf(type_) == Q32TypeOf(type) &&
                   "ConvertTo: dot-q4_1, -q5_0 and -q5_1 pack a q4_1, q5_0 or q5_1 matrix; nothing quantizes to them");
      auto packed = Buffer<uint8_t>(size_t(m.Bytes()));
      cpu::PackQ32Dot(q32(), rows_, cols_, packed->data());
      m.data_ = packed->data();
      m.owner_ = std::move(packed);
      return m;
    }
    case WeightType::kDotQ5K:
    case WeightType::kDotQ6K: {  // packed from a GGUF file's q5k or q6k rows as they are (q3k's as q6k)
      const bool q6k_rows = type == WeightType::kDotQ6K;
      STEADY_CHECK((q6k_rows ? type_ == WeightType::kQ6K || type_ == WeightType::kQ3K : type_ == WeightType::kQ5K) &&
                   "ConvertTo: dot-q5k and dot-q6k pack a q5k, q6k or q3k matrix; nothing quantizes to them");
      auto packed = Buffer<uint8_t>(size_t(m.Bytes()));
      if (type_ == WeightType::kQ3K) {  // a passing q6k copy of the same values, then packed
        auto q6k_rows_copy = Buffer<uint8_t>(size_t(cpu::Q6KBytes(rows_, cols_)));
        ByRowBands(rows_, cols_, [&](int64_t r0, int64_t r1) {
          cpu::Q3KToQ6K(q3k(), cols_, r0, r1, q6k_rows_copy->data() + cpu::Q6KBytes(r0, cols_));
        });
        cpu::PackQ6KDot({q6k_rows_copy->data()}, rows_, cols_, packed->data());
      } else if (q6k_rows) {
        cpu::PackQ6KDot(q6k(), rows_, cols_, packed->data());
      } else {
        cpu::PackQ5KDot(q5k(), rows_, cols_, packed->data());
      }
      m.data_ = packed->data();
      m.owner_ = std::move(packed);
      return m;
    }
    case WeightType::kDotF16: {  // packed from the checkpoint's own f16 values: nothing rounded
      STEADY_CHECK(type_ == WeightType::kF16 && "ConvertTo dot-f16: only from f16");
      auto packed = Buffer<uint16_t>(size_t(cpu::F16DotPackedSize(rows_, cols_)));
      cpu::PackF16Dot(as<uint16_t>(), rows_, cols_, packed->data());
      m.data_ = packed->data();
      m.owner_ = std::move(packed);
      return m;
    }
    case WeightType::kF16:
    case WeightType::kQ5K:
    case WeightType::kQ6K:
    case WeightType::kQ8_0:
    case WeightType::kQ4_1:
    case WeightType::kQ5_0:
    case WeightType::kQ5_1:
    case WeightType::kQ3K:
    case WeightType::kIq4Nl:
    case WeightType::kIq4Xs:
    case WeightType::kQ2K:
      break;
  }
  STEADY_CHECK(false && "ConvertTo: f16, q5k, q6k, q8_0, q4_1, q5_0, q5_1, q3k, iq4_nl, iq4_xs and q2k are a checkpoint's types, not conversion targets");
  return m;
}

void WeightMatrix::ReleasePages() const {
  // Whole pages inside the matrix only: its neighbours may still be in use.
  if (mapped_ && data_ != nullptr) DropMappedPages(data_, size_t(Bytes()));
}

void MatMul(const float* x, int rows, const WeightMatrix& w, float* y) {
  const int in = int(w.cols()), out = int(w.rows());
  switch (w.type()) {
    case WeightType::kF32: return cpu::MatMulNT(x, rows, in, w.as<float>(), out, y);
    case WeightType::kBf16: return cpu::MatMulNTBf16(x, rows, in, w.as<uint16_t>(), out, y);
    case WeightType::kF16: return cpu::MatMulNTF16(x, rows, in, w.as<uint16_t>(), out, y);
    case WeightType::kQ8: return cpu::MatMulNTQ8(x, rows, in, {w.as<int8_t>(), w.q8_scales()}, out, y);
    case WeightType::kAmxBf16: return cpu::MatMulNTAmxBf16(x, rows, in, w.as<uint16_t>(), out, y);
    case WeightType::kDotBf16: return cpu::MatMulNTBf16Dot(x, rows, in, w.as<uint16_t>(), out, y);
    case WeightType::kDotF16: return cpu::MatMulNTF16Dot(x, rows, in, w.as<uint16_t>(), out, y);
    case WeightType::kDotQ8: return cpu::MatMulNTQ8Dot(x, rows, in, w.as<uint8_t>(), out, y);
    case WeightType::kQ4: return cpu::MatMulNTQ4(x, rows, in, w.q4(), out, y);
    case WeightType::kDotQ4: return cpu::MatMulNTQ4Dot(x, rows, in, w.as<uint8_t>(), out, y);
    case WeightType::kQ4K: return cpu::MatMulNTQ4K(x, rows, in, w.q4k(), out, y);
    case WeightType::kDotQ4K: return cpu::MatMulNTQ4KDot(x, rows, in, w.as<uint8_t>(), out, y);
    case WeightType::kQ6K: return cpu::MatMulNTQ6K(x, rows, in, w.q6k(), out, y);
    case WeightType::kQ8_0: return cpu::MatMulNTQ8_0(x, rows, in, w.q8_0(), out, y);
    case WeightType::kQ5K: return cpu::MatMulNTQ5K(x, rows, in, w.q5k(), out, y);
    case WeightType::kDotQ6K: return cpu::MatMulNTQ6KDot(x, rows, in, w.as<uint8_t>(), out, y);
    case WeightType::kDotQ5K: return cpu::MatMulNTQ5KDot(x, rows, in, w.as<uint8_t>(), out, y);
    case WeightType::kQ4_1:
    case WeightType::kQ5_0:
    case WeightType::kQ5_1: return cpu::MatMulNTQ32(x, rows, in, w.q32(), out, y);
    case WeightType::kDotQ4_1:
    case WeightType::kDotQ5_0:
    case WeightType::kDotQ5_1: return cpu::MatMulNTQ32Dot(*Q32TypeOf(w.type()), x, rows, in, w.as<uint8_t>(), out, y);
    case WeightType::kQ3K: return cpu::MatMulNTQ3K(x, rows, in, w.q3k(), out, y);
    case WeightType::kIq4Nl: return cpu::MatMulNTIq4Nl(x, rows, in, w.iq4_nl(), out, y);
    case WeightType::kIq4Xs: return cpu::MatMulNTIq4Xs(x, rows, in, w.iq4_xs(), out, y);
    case WeightType::kQ2K: return cpu::MatMulNTQ2K(x, rows, in, w.q2k(), out, y);
  }
}

void MatMuls(const float* x, int rows, std::span<const MatrixProduct> products) {
  using DotsFn = void (*)(const float*, int, int, const cpu::DotProduct*, int);
  auto dots_of = [](WeightType type) -> DotsFn {
    switch (type) {
      case WeightType::kDotBf16: return cpu::MatMulNTBf16Dots;
      case WeightType::kDotF16: return cpu::MatMulNTF16Dots;
      case WeightType::kDotQ8: return cpu::MatMulNTQ8Dots;
      case WeightType::kDotQ4: return cpu::MatMulNTQ4Dots;
      case WeightType::kDotQ4K: return cpu::MatMulNTQ4KDots;
      case WeightType::kDotQ6K: return cpu::MatMulNTQ6KDots;
      case WeightType::kDotQ5K: return cpu::MatMulNTQ5KDots;
      case WeightType::kDotQ4_1: return cpu::MatMulNTQ4_1Dots;
      case WeightType::kDotQ5_0: return cpu::MatMulNTQ5_0Dots;
      case WeightType::kDotQ5_1: return cpu::MatMulNTQ5_1Dots;
      default: return nullptr;
    }
  };
  const DotsFn dots = products.empty() ? nullptr : dots_of(products[0].w->type());
  constexpr size_t kMax = cpu::kMaxDotProducts;
  bool one_call = dots != nullptr && products.size() <= kMax;
  for (const MatrixProduct& p : products) {
    one_call = one_call && p.w->type() == products[0].w->type() && p.w->cols() == products[0].w->cols();
  }
  if (!one_call) {
    for (const MatrixProduct& p : products) MatMul(x, rows, *p.w, p.y);
    return;
  }
  cpu::DotProduct dot[kMax];
  for (size_t i = 0; i < products.size(); ++i) dot[i] = {products[i].w->data(), int(products[i].w->rows()), products[i].y};
  dots(x, rows, int(products[0].w->cols()), dot, int(products.size()));
}

void GatherRows(const WeightMatrix& table, const int32_t* ids, int rows, float* out) {
  if (table.type() == WeightType::kF32) return cpu::GatherRows(table.as<float>(), int(table.cols()), ids, rows, out);
  for (int r = 0; r < rows; ++r) table.RowsToFloat(ids[r], int64_t(ids[r]) + 1, out + int64_t(r) * table.cols());
}

}  // namespace steady
