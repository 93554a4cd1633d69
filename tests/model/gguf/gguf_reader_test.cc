// The GGUF reader: a well-formed file read back (every metadata type, alignment, tensor table), one
// test per class of malformed input it must refuse by name, every truncation of a valid file, and
// hand-built Q8_0 / Q4_0 / Q4_K blocks dequantized (the bit-for-bit check of every type against
// ggml itself is tests/cli/gguf_llamacpp.sh).
#include "model/gguf/gguf.h"

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/file_io.h"
#include "model/checkpoint/safetensors.h"
#include "model/gguf/dequantize.h"
#include "tests/testutil.h"

namespace steady {
namespace {

// Little-endian GGUF bytes, written field by field.
class Bytes {
 public:
  template <typename T>
  Bytes& Put(T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    s.append(b, sizeof(T));
    return *this;
  }
  Bytes& Str(const std::string& v) { Put<uint64_t>(v.size()); s += v; return *this; }
  Bytes& Pad(size_t alignment) { s.resize((s.size() + alignment - 1) / alignment * alignment, '\0'); return *this; }
  std::string s;
};

Bytes Header(uint64_t tensors, uint64_t kvs) {
  Bytes b;
  b.s = "GGUF";
  b.Put<uint32_t>(3).Put<uint64_t>(tensors).Put<uint64_t>(kvs);
  return b;
}
void TensorInfo(Bytes& b, const std::string& name, std::vector<uint64_t> dims, uint32_t type, uint64_t offset) {
  b.Str(name).Put<uint32_t>(dims.size());
  for (uint64_t d : dims) b.Put<uint64_t>(d);
  b.Put<uint32_t>(type).Put<uint64_t>(offset);
}

// A valid file: one key of every type, alignment 64, two F32 tensors (2x3 and 4) with padding.
std::string ValidFile() {
  Bytes b = Header(2, 15);
  b.Str("general.alignment").Put<uint32_t>(4).Put<uint32_t>(64);
  b.Str("u8").Put<uint32_t>(0).Put<uint8_t>(200);
  b.Str("i8").Put<uint32_t>(1).Put<int8_t>(-100);
  b.Str("u16").Put<uint32_t>(2).Put<uint16_t>(60000);
  b.Str("i16").Put<uint32_t>(3).Put<int16_t>(-30000);
  b.Str("i32").Put<uint32_t>(5).Put<int32_t>(-5);
  b.Str("f32").Put<uint32_t>(6).Put<float>(0.5f);
  b.Str("bool").Put<uint32_t>(7).Put<uint8_t>(1);
  b.Str("general.architecture").Put<uint32_t>(8).Str("llama");
  b.Str("u64").Put<uint32_t>(10).Put<uint64_t>(uint64_t{1} << 40);
  b.Str("i64").Put<uint32_t>(11).Put<int64_t>(-(int64_t{1} << 40));
  b.Str("f64").Put<uint32_t>(12).Put<double>(-2.25);
  b.Str("tokens").Put<uint32_t>(9).Put<uint32_t>(8).Put<uint64_t>(3).Str("a").Str("").Str("<s>");
  b.Str("scores").Put<uint32_t>(9).Put<uint32_t>(6).Put<uint64_t>(2).Put<float>(1.5f).Put<float>(-1);
  b.Str("empty").Put<uint32_t>(9).Put<uint32_t>(4).Put<uint64_t>(0);
  TensorInfo(b, "w", {3, 2}, 0, 0);
  TensorInfo(b, "v", {4}, 0, 64);
  b.Pad(64);
  for (int k = 0; k < 6; ++k) b.Put<float>(float(k));
  b.Pad(64);
  for (int k = 0; k < 4; ++k) b.Put<float>(float(-k));
  return b.s;
}

std::string ParseError(const std::string& bytes) {
  auto f = GgufFile::Parse(bytes, "bad.gguf");
  if (f.ok()) return "(accepted)";
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << f.status();
  EXPECT_EQ(f.status().message().rfind("bad.gguf: ", 0), 0u) << f.status();
  return std::string(f.status().message());
}

TEST(GgufReader, ReadsEveryMetadataTypeAndTheTensorTable) {
  auto f = GgufFile::Parse(ValidFile(), "ok.gguf");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);
  EXPECT_EQ(f->metadata().size(), 15u);
  EXPECT_EQ(f->FindValue("u8")->u, 200u);
  EXPECT_EQ(f->FindValue("i8")->i, -100);
  EXPECT_EQ(f->FindValue("u16")->u, 60000u);
  EXPECT_EQ(f->FindValue("i16")->i, -30000);
  EXPECT_EQ(f->FindValue("f32")->f, 0.5);
  EXPECT_EQ(f->FindValue("bool")->ToString(), "true");
  EXPECT_EQ(*f->GetString("general.architecture"), "llama");
  EXPECT_EQ(*f->GetUint("u64"), uint64_t{1} << 40);
  EXPECT_EQ(f->FindValue("i64")->i, -(int64_t{1} << 40));
  EXPECT_EQ(*f->GetFloat("f64"), -2.25);
  EXPECT_EQ(f->FindValue("tokens")->ToString(), "[\"a\", \"\", \"<s>\"]");
  EXPECT_EQ(f->FindValue("tokens")->ToString(2), "[\"a\", \"\", ... (3 strings)]");
  EXPECT_EQ(f->FindValue("scores")->elements[0].f, 1.5);
  EXPECT_EQ(f->FindValue("empty")->elements.size(), 0u);
  // Typed getters name the key and both types.
  EXPECT_EQ(f->GetString("u8").status().message(), "ok.gguf: metadata \"u8\" is uint8, not a string");
  EXPECT_EQ(f->GetUint("i32").status().message(), "ok.gguf: metadata \"i32\" is int32, not a non-negative integer");
  EXPECT_EQ(f->GetUint("nope").status().code(), absl::StatusCode::kNotFound);

  ASSERT_EQ(f->tensors().size(), 2u);
  const GgufTensorInfo* w = f->FindTensor("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->Shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(w->bytes, 24u);
  EXPECT_EQ(*f->ReadFloat("w"), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(*f->ReadFloat("v"), (std::vector<float>{0, -1, -2, -3}));
  EXPECT_EQ(f->ReadFloat("x").status().code(), absl::StatusCode::kNotFound);
}

TEST(GgufReader, OpensAFileByMappingIt) {
  const std::string dir = testing::MakeTempDir("gguf");
  const std::string path = dir + "/m.gguf";
  ASSERT_TRUE(WriteFileAtomic(path, ValidFile()).ok());
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  auto moved = std::move(*f);  // the mapping travels with the object
  EXPECT_EQ(*moved.ReadFloat("w"), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_NE(GgufFile::Open(dir).status().message().find("not a regular file"), std::string::npos);
  EXPECT_EQ(GgufFile::Open(dir + "/missing.gguf").status().code(), absl::StatusCode::kNotFound);
}

TEST(GgufReader, EveryTruncationIsRefusedByName) {
  const std::string valid = ValidFile();
  for (size_t n = 0; n < valid.size(); ++n) {
    const std::string message = ParseError(valid.substr(0, n));
    ASSERT_NE(message, "(accepted)") << n;
  }
  EXPECT_EQ(ParseError(""), "bad.gguf: truncated: the file (0 bytes) ends inside the magic number at byte 0");
  EXPECT_EQ(ParseError(valid.substr(0, 40)),
            "bad.gguf: metadata count 15 is absurd for the 16 bytes that remain");
}

TEST(GgufReader, RefusesBadHeaders) {
  EXPECT_EQ(ParseError("GGML" + std::string(20, '\0')), "bad.gguf: not a GGUF file (the first 4 bytes are not \"GGUF\")");
  Bytes v2;
  v2.s = "GGUF";
  v2.Put<uint32_t>(2).Put<uint64_t>(0).Put<uint64_t>(0);
  EXPECT_EQ(ParseError(v2.s), "bad.gguf: GGUF version 2 is not supported (only version 3)");
  EXPECT_NE(ParseError(Header(0, uint64_t{1} << 60).s).find("metadata count 1152921504606846976 is absurd"), std::string::npos);
  EXPECT_NE(ParseError(Header(~uint64_t{0}, 0).s).find("tensor count 18446744073709551615 is absurd"), std::string::npos);
}

TEST(GgufReader, RefusesBadMetadata) {
  auto one = [](const std::function<void(Bytes&)>& kv) {
    Bytes b = Header(0, 1);
    kv(b);
    return ParseError(b.s);
  };
  EXPECT_NE(one([](Bytes& b) { b.Str("k").Put<uint32_t>(13).Put<uint32_t>(0); }).find("metadata \"k\": unknown value type 13"),
            std::string::npos);
  EXPECT_NE(one([](Bytes& b) { b.Str("k").Put<uint32_t>(9).Put<uint32_t>(9).Put<uint64_t>(1); })
                .find("arrays of arrays are not supported"), std::string::npos);
  EXPECT_NE(one([](Bytes& b) { b.Str("k").Put<uint32_t>(9).Put<uint32_t>(99).Put<uint64_t>(1); })
                .find("unknown array element type 99"), std::string::npos);
  EXPECT_NE(one([](Bytes& b) { b.Str("k").Put<uint32_t>(9).Put<uint32_t>(4).Put<uint64_t>(uint64_t{1} << 62); })
                .find("array length 4611686018427387904 at byte 41 is absurd"), std::string::npos);
  EXPECT_NE(one([](Bytes& b) { b.Str("k").Put<uint32_t>(8).Put<uint64_t>(1000).Put<uint32_t>(0); })
                .find("claims 1000 bytes but only 4 remain"), std::string::npos);
  EXPECT_NE(one([](Bytes& b) { b.Str("k").Put<uint32_t>(7).Put<uint8_t>(2); }).find("bool value 2 is neither 0 nor 1"),
            std::string::npos);
  EXPECT_NE(one([](Bytes& b) { b.Str("general.alignment").Put<uint32_t>(4).Put<uint32_t>(24); })
                .find("general.alignment 24 is not a power of two"), std::string::npos);
  EXPECT_NE(one([](Bytes& b) { b.Str("general.alignment").Put<uint32_t>(10).Put<uint64_t>(32); })
                .find("general.alignment must be a uint32, not uint64"), std::string::npos);
  Bytes dup = Header(0, 2);
  dup.Str("k").Put<uint32_t>(0).Put<uint8_t>(1).Str("k").Put<uint32_t>(0).Put<uint8_t>(2);
  EXPECT_EQ(ParseError(dup.s), "bad.gguf: metadata key \"k\" appears more than once");
}

// A file with the given tensor infos (no metadata: alignment 32) and `data_bytes` of data.
std::string WithTensors(const std::function<void(Bytes&)>& infos, int count, size_t data_bytes) {
  Bytes b = Header(count, 0);
  infos(b);
  b.Pad(32);
  b.s.append(data_bytes, '\0');
  return b.s;
}

TEST(GgufReader, RefusesBadTensors) {
  auto one = [](std::vector<uint64_t> dims, uint32_t type, uint64_t offset, size_t data) {
    return ParseError(WithTensors([&](Bytes& b) { TensorInfo(b, "t", dims, type, offset); }, 1, data));
  };
  EXPECT_EQ(one({32}, 0, 0, 128), "(accepted)");
  EXPECT_EQ(one({32}, 16, 0, 128), "bad.gguf: tensor \"t\": ggml type 16 is unknown or not supported");
  EXPECT_EQ(one({1, 1, 1, 1, 1}, 0, 0, 128), "bad.gguf: tensor \"t\": 5 dimensions (ggml allows at most 4)");
  EXPECT_EQ(one({uint64_t{1} << 32, uint64_t{1} << 32}, 0, 0, 128),
            "bad.gguf: tensor \"t\": dimensions 4294967296 x 4294967296 overflow a 64-bit element count");
  EXPECT_EQ(one({uint64_t{1} << 62, 2}, 0, 0, 128),
            "bad.gguf: tensor \"t\": dimensions 4611686018427387904 x 2 overflow a 64-bit element count");
  EXPECT_EQ(one({uint64_t{1} << 62}, 0, 0, 128),
            "bad.gguf: tensor \"t\": dimensions 4611686018427387904 of F32 overflow a 64-bit byte count");
  EXPECT_EQ(one({33}, 8, 0, 128), "bad.gguf: tensor \"t\": rows of 33 values are not whole Q8_0 blocks of 32");
  EXPECT_EQ(one({8}, 0, 16, 128), "bad.gguf: tensor \"t\": data offset 16 is not a multiple of the alignment 32");
  EXPECT_EQ(one({32}, 0, 32, 128),
            "bad.gguf: tensor \"t\": data [32, 32 + 128) reaches past the end of the data section (128 bytes)");
  EXPECT_EQ(one({8}, 0, ~uint64_t{31}, 128),
            "bad.gguf: tensor \"t\": data [18446744073709551584, 18446744073709551584 + 32) reaches past the end of "
            "the data section (128 bytes)");
  EXPECT_NE(ParseError(WithTensors([](Bytes& b) { TensorInfo(b, std::string(64, 'n'), {1}, 0, 0); }, 1, 32))
                .find("name is 64 bytes, longer than ggml's 63"), std::string::npos);
  EXPECT_EQ(ParseError(WithTensors([](Bytes& b) { TensorInfo(b, "a", {16}, 0, 0); TensorInfo(b, "b", {8}, 0, 32); }, 2, 128)),
            "bad.gguf: tensor \"b\" at data [32, 64) overlaps tensor \"a\" at [0, 64)");
  EXPECT_EQ(ParseError(WithTensors([](Bytes& b) { TensorInfo(b, "a", {8}, 0, 0); TensorInfo(b, "a", {8}, 0, 32); }, 2, 128)),
            "bad.gguf: tensor name \"a\" appears more than once");
  // The data section must exist when there are tensors.
  Bytes cut = Header(1, 0);
  TensorInfo(cut, "t", {1}, 0, 0);
  EXPECT_NE(ParseError(cut.s).find("ends before its data section at byte 64"), std::string::npos);
}

TEST(GgufReader, NamesInMessagesAreEscaped) {
  const std::string message =
      ParseError(WithTensors([](Bytes& b) { TensorInfo(b, std::string("a\"\n", 3), {8}, 99, 0); }, 1, 32));
  EXPECT_EQ(message, "bad.gguf: tensor \"a\\\"\\x0a\": ggml type 99 is unknown or not supported");
}

TEST(GgufDequantize, Q8_0AndQ4_0FollowTheirBlockLayouts) {
  std::string q8(34, '\0');
  const uint16_t half = FloatToHalf(0.5f);
  std::memcpy(q8.data(), &half, 2);
  for (int j = 0; j < 32; ++j) q8[2 + j] = char(int8_t(j - 16));
  std::vector<float> y(32);
  Dequantize(uint32_t(GgmlType::kQ8_0), q8.data(), 32, y.data());
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.5f * float(j - 16)) << j;

  std::string q4(18, '\0');
  std::memcpy(q4.data(), &half, 2);
  for (int j = 0; j < 16; ++j) q4[2 + j] = char(uint8_t(j | ((15 - j) << 4)));
  Dequantize(uint32_t(GgmlType::kQ4_0), q4.data(), 32, y.data());
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * float(j - 8)) << j;            // low nibbles: the first 16 values
    EXPECT_EQ(y[j + 16], 0.5f * float(15 - j - 8)) << j;  // high nibbles: the next 16
  }
}

// The fallback types llama.cpp's quantizer writes where rows are not whole 256-value blocks. Fifth bits:
// bit j of the 4 bytes after the scale(s) is value j's (j < 16 the low nibbles, 16..31 the high ones).
TEST(GgufDequantize, Q4_1Q5_0AndQ5_1FollowTheirBlockLayouts) {
  const uint16_t d = FloatToHalf(0.5f), m = FloatToHalf(-3.0f);
  const uint32_t qh = 0xA5C3F00Fu;  // an irregular pattern of fifth bits
  auto fifth = [&](int j) { return int((qh >> j) & 1) << 4; };
  std::vector<float> y(32);

  std::string q41(20, '\0');
  std::memcpy(q41.data(), &d, 2);
  std::memcpy(q41.data() + 2, &m, 2);
  for (int j = 0; j < 16; ++j) q41[4 + j] = char(uint8_t(j | ((15 - j) << 4)));
  Dequantize(uint32_t(GgmlType::kQ4_1), q41.data(), 32, y.data());
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], float(j) * 0.5f - 3.0f) << j;
    EXPECT_EQ(y[j + 16], float(15 - j) * 0.5f - 3.0f) << j;
  }

  std::string q50(22, '\0');
  std::memcpy(q50.data(), &d, 2);
  std::memcpy(q50.data() + 2, &qh, 4);
  for (int j = 0; j < 16; ++j) q50[6 + j] = char(uint8_t(j | ((15 - j) << 4)));
  Dequantize(uint32_t(GgmlType::kQ5_0), q50.data(), 32, y.data());
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], float((j | fifth(j)) - 16) * 0.5f) << j;
    EXPECT_EQ(y[j + 16], float(((15 - j) | fifth(j + 16)) - 16) * 0.5f) << j;
  }

  std::string q51(24, '\0');
  std::memcpy(q51.data(), &d, 2);
  std::memcpy(q51.data() + 2, &m, 2);
  std::memcpy(q51.data() + 4, &qh, 4);
  for (int j = 0; j < 16; ++j) q51[8 + j] = char(uint8_t(j | ((15 - j) << 4)));
  Dequantize(uint32_t(GgmlType::kQ5_1), q51.data(), 32, y.data());
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], float(j | fifth(j)) * 0.5f - 3.0f) << j;
    EXPECT_EQ(y[j + 16], float((15 - j) | fifth(j + 16)) * 0.5f - 3.0f) << j;
  }
}

TEST(GgufDequantize, Q4_KScalesAndMinsUnpackFromTwelveBytes) {
  // d = 1, dmin = 1; sub-block 0: scale 3, min 1; sub-block 5 (the packed half): scale 37, min 50.
  std::string b(144, '\0');
  const uint16_t one = FloatToHalf(1.0f);
  std::memcpy(b.data(), &one, 2);
  std::memcpy(b.data() + 2, &one, 2);
  uint8_t* s = reinterpret_cast<uint8_t*>(b.data() + 4);
  s[0] = 3;
  s[4] = 1;
  // j = 5: scale = (s[9] & 15) | ((s[1] >> 6) << 4) = 5 | 32; min = (s[9] >> 4) | ((s[5] >> 6) << 4) = 2 | 48.
  s[9] = 5 | (2 << 4);
  s[1] = 2 << 6;
  s[5] = 3 << 6;
  for (int l = 0; l < 32; ++l) b[16 + 64 + l] = char(uint8_t((l & 15) << 4 | 7));  // values 160..191 use the high nibbles
  std::vector<float> y(256);
  Dequantize(uint32_t(GgmlType::kQ4_K), b.data(), 256, y.data());
  EXPECT_EQ(y[0], 3.0f * 0 - 1.0f);           // q = 0 everywhere in the first 32 values
  EXPECT_EQ(y[128], 0.0f * 7 - 0.0f);         // sub-block 4: scale 0, min 0 (low nibbles 7)
  for (int l = 0; l < 32; ++l) EXPECT_EQ(y[160 + l], 37.0f * float(l & 15) - 50.0f) << l;
  EXPECT_FALSE(CanDequantize(uint32_t(GgmlType::kQ8_K)));  // a known type no file of weights holds
  EXPECT_TRUE(CanDequantize(uint32_t(GgmlType::kQ6_K)));
}

}  // namespace
}  // namespace steady
