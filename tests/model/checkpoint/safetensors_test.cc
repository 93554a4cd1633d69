// The safetensors reader and writer: conversions, round trips, atomic writes, and one test per
// class of malformed input the reader must refuse (crafted bytes and the committed corpus).
#include "model/checkpoint/safetensors.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <signal.h>
#include <sys/resource.h>

#include <gtest/gtest.h>

#include "tests/testutil.h"

namespace steady {
namespace {

namespace fs = std::filesystem;
using ::steady::testing::MakeTempDir;
using ::steady::testing::SourcePath;
using ::steady::testing::TestSeed;

std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A safetensors file from its parts: 8-byte little-endian header length, header, data.
std::string Craft(const std::string& header, const std::string& data = "") {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = char(uint64_t(header.size()) >> (8 * i));
  return out + header + data;
}

std::string F32Bytes(const std::vector<float>& v) {
  std::string out(v.size() * 4, '\0');
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// Parses `bytes`, expects a refusal, and returns its message (which must name the file).
std::string ParseError(const std::string& bytes) {
  auto st = SafeTensors::Parse(bytes, "crafted.safetensors");
  EXPECT_FALSE(st.ok()) << "accepted a malformed file";
  if (st.ok()) return "";
  const std::string message(st.status().message());
  EXPECT_EQ(message.rfind("crafted.safetensors: ", 0), 0u) << message;
  return message;
}

// ---------------------------------------------------------------------------------------------
// Half-precision conversions
// ---------------------------------------------------------------------------------------------

TEST(SafetensorsHalf, KnownF16BitPatterns) {
  const std::pair<float, uint16_t> cases[] = {
      {1.0f, 0x3c00},          {-2.0f, 0xc000},     {0.5f, 0x3800},
      {65504.0f, 0x7bff},      // largest finite half
      {65519.0f, 0x7bff},      // just below the rounding boundary to inf
      {65520.0f, 0x7c00},      // halfway to 2^16: ties to even, i.e. inf
      {0.1f, 0x2e66},          {1.0f / 3.0f, 0x3555},
      {std::ldexp(1.0f, -14), 0x0400},  // smallest normal
      {std::ldexp(1.0f, -24), 0x0001},  // smallest subnormal
      {std::ldexp(1.0f, -25), 0x0000},  // halfway to the smallest subnormal: ties to even (zero)
      {std::ldexp(1.5f, -25), 0x0001},
      {std::ldexp(3.0f, -25), 0x0002},  // 1.5 units: ties to even (2)
      {1.0f + std::ldexp(1.0f, -11), 0x3c00},       // halfway: ties to even (down)
      {1.0f + 3 * std::ldexp(1.0f, -11), 0x3c02},   // halfway: ties to even (up)
      {0.0f, 0x0000},          {-0.0f, 0x8000},
      {INFINITY, 0x7c00},      {-INFINITY, 0xfc00},
      {1e-10f, 0x0000},        {1e10f, 0x7c00},
  };
  for (const auto& [f, h] : cases) {
    EXPECT_EQ(FloatToHalf(f), h) << f;
  }
  EXPECT_EQ(HalfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(HalfToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(0x83ff), -std::ldexp(1023.0f, -24));  // largest negative subnormal
  EXPECT_EQ(HalfToFloat(0xfc00), -INFINITY);
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7e00)));
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(NAN))));
  EXPECT_TRUE(std::signbit(HalfToFloat(0x8000)));
}

TEST(SafetensorsHalf, KnownBF16BitPatterns) {
  const std::pair<float, uint16_t> cases[] = {
      {1.0f, 0x3f80},      {-2.0f, 0xc000},     {0.1f, 0x3dcd},  // 0x3dcccccd rounds up
      {3.14159265f, 0x4049},                                      // 0x40490fdb rounds down
      {1.0f + std::ldexp(1.0f, -8), 0x3f80},                      // halfway: ties to even (down)
      {1.0f + 3 * std::ldexp(1.0f, -8), 0x3f82},                  // halfway: ties to even (up)
      {std::numeric_limits<float>::max(), 0x7f80},                // rounds to inf
      {INFINITY, 0x7f80},  {-INFINITY, 0xff80}, {-0.0f, 0x8000},
      {std::numeric_limits<float>::denorm_min(), 0x0000},
  };
  for (const auto& [f, b] : cases) {
    EXPECT_EQ(FloatToBFloat16(f), b) << f;
  }
  EXPECT_EQ(BFloat16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(BFloat16ToFloat(0xc000), -2.0f);
  // A signalling NaN stays a NaN (truncation alone could turn its payload into inf).
  uint32_t snan_bits = 0x7f800001;
  float snan;
  std::memcpy(&snan, &snan_bits, 4);
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(snan))));
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(snan))));
}

// Every one of the 65536 bit patterns survives half -> float -> half (NaNs stay NaN).
TEST(SafetensorsHalf, EveryBitPatternRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = HalfToFloat(uint16_t(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f)))) << h;
    } else {
      ASSERT_EQ(FloatToHalf(f), h) << "f16 " << h;
    }
    const float b = BFloat16ToFloat(uint16_t(h));
    if (std::isnan(b)) {
      EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(b)))) << h;
    } else {
      ASSERT_EQ(FloatToBFloat16(b), h) << "bf16 " << h;
    }
  }
}

// The nearest representable value, ties to the even pattern, found by search over the (exactly
// decoded) non-negative finite patterns [0, max_finite]; `inf` past the overflow threshold.
uint16_t NearestPattern(float f, float (*decode)(uint16_t), uint16_t max_finite, uint16_t inf) {
  const double x = std::fabs(double(f));
  uint16_t lo = 0, hi = max_finite;  // largest pattern with decode(p) <= x
  while (lo < hi) {
    const uint16_t mid = uint16_t((lo + hi + 1) / 2);
    if (double(decode(mid)) <= x) {
      lo = mid;
    } else {
      hi = uint16_t(mid - 1);
    }
  }
  const double below = decode(lo);
  // One step past the largest finite value is where inf would sit if the exponent continued.
  const double above = lo == max_finite ? 2 * double(decode(max_finite)) - double(decode(max_finite - 1)) : double(decode(lo + 1));
  uint16_t result;
  if (x - below < above - x || (x - below == above - x && lo % 2 == 0)) {
    result = lo;
  } else {
    result = lo == max_finite ? inf : uint16_t(lo + 1);
  }
  return std::signbit(f) ? uint16_t(result | 0x8000) : result;
}

TEST(SafetensorsHalf, RoundingMatchesNearestEvenReference) {
  std::mt19937_64 rng(TestSeed());
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    // Random bit patterns cover all exponents; keep those within reach of each format.
    uint32_t x = bits(rng);
    float f;
    std::memcpy(&f, &x, 4);
    if (!std::isfinite(f)) continue;
    if (std::fabs(f) < 1e5f) {
      ASSERT_EQ(FloatToHalf(f), NearestPattern(f, HalfToFloat, 0x7bff, 0x7c00)) << f;
    }
    ASSERT_EQ(FloatToBFloat16(f), NearestPattern(f, BFloat16ToFloat, 0x7f7f, 0x7f80)) << f;
  }
}

// ---------------------------------------------------------------------------------------------
// Round trips through WriteSafeTensors and Open
// ---------------------------------------------------------------------------------------------

TEST(SafetensorsRoundTrip, EveryFloatDTypeWithinTolerance) {
  const std::string dir = MakeTempDir("st_roundtrip");
  std::mt19937_64 rng(TestSeed());
  std::vector<double> values = testing::RandomNormal<double>(3 * 5 * 7, rng, 10.0);
  values[0] = 0;
  values[1] = -1e-3;
  // Relative error bound of round to nearest: half an ulp, 2^-(mantissa bits + 1).
  const std::pair<DType, double> dtypes[] = {
      {DType::kF64, 0}, {DType::kF32, std::ldexp(1.0, -24)}, {DType::kF16, std::ldexp(1.0, -11)},
      {DType::kBF16, std::ldexp(1.0, -8)}};
  std::vector<TensorToWrite> tensors;
  for (const auto& [dtype, tol] : dtypes) {
    tensors.push_back({std::string("t_") + std::string(DTypeName(dtype)), dtype, {3, 5, 7}, values});
  }
  const std::string path = dir + "/model.safetensors";
  ASSERT_TRUE(WriteSafeTensors(path, tensors).ok());
  auto st = SafeTensors::Open(path);
  ASSERT_TRUE(st.ok()) << st.status();
  for (const auto& [dtype, tol] : dtypes) {
    const std::string name = std::string("t_") + std::string(DTypeName(dtype));
    const TensorInfo* info = st->Find(name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_EQ(info->dtype, dtype);
    EXPECT_EQ(info->shape, (std::vector<int64_t>{3, 5, 7}));
    EXPECT_EQ(info->NumElements(), 105);
    EXPECT_EQ(info->end - info->begin, 105 * DTypeSize(dtype));
    auto d = st->ReadDouble(name, {3, 5, 7});
    auto f = st->ReadFloat(name);
    ASSERT_TRUE(d.ok()) << d.status();
    ASSERT_TRUE(f.ok()) << f.status();
    for (size_t i = 0; i < values.size(); ++i) {
      // Plus half the smallest f16 subnormal, for values that land in f16's subnormal range.
      const double bound = tol * std::fabs(values[i]) + (dtype == DType::kF16 ? std::ldexp(1.0, -25) : 0);
      EXPECT_LE(std::fabs((*d)[i] - values[i]), bound) << name << " index " << i;
      EXPECT_EQ((*f)[i], float((*d)[i]));
    }
  }
}

TEST(SafetensorsRoundTrip, MetadataOrderAndEdgeShapes) {
  const std::string dir = MakeTempDir("st_metadata");
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"steady_format_version", "1"}, {"note", "quotes \" and \\ and \xc3\xa9"}};
  const std::vector<TensorToWrite> tensors = {
      {"z.last_name_first", DType::kF32, {2}, {1, 2}},
      {"scalar", DType::kF64, {}, {42}},
      {"empty", DType::kF16, {0, 4}, {}},
      {"a", DType::kBF16, {1, 1, 1}, {-0.5}},
  };
  const std::string path = dir + "/m.safetensors";
  ASSERT_TRUE(WriteSafeTensors(path, tensors, metadata).ok());
  auto st = SafeTensors::Open(path);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->metadata(), metadata);
  ASSERT_EQ(st->tensors().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {  // file order is write order
    EXPECT_EQ(st->tensors()[i].name, tensors[i].name);
    EXPECT_EQ(st->tensors()[i].shape, tensors[i].shape);
  }
  EXPECT_EQ(*st->ReadDouble("scalar"), std::vector<double>{42});
  EXPECT_TRUE(st->ReadFloat("empty", {0, 4})->empty());
  EXPECT_EQ(*st->ReadFloat("a"), std::vector<float>{-0.5f});
  EXPECT_EQ(st->Find("missing"), nullptr);
  // Open maps the file; Parse keeps bytes of its own, whose pages a loader must never release.
  EXPECT_TRUE(st->Mapped(*st->Find("a")));
  std::ifstream in(path, std::ios::binary);
  auto parsed = SafeTensors::Parse(std::string(std::istreambuf_iterator<char>(in), {}), "m.safetensors");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(parsed->Mapped(*parsed->Find("a")));
  EXPECT_EQ(*parsed->ReadFloat("a"), std::vector<float>{-0.5f});
}

TEST(SafetensorsRoundTrip, HeaderIsPaddedWithSpacesToEightBytes) {
  const std::string dir = MakeTempDir("st_padding");
  for (int n = 1; n <= 9; ++n) {  // names of varying length move the header size through all residues
    const std::string path = dir + "/p.safetensors";
    ASSERT_TRUE(WriteSafeTensors(path, {{std::string(n, 'w'), DType::kF32, {1}, {1}}}).ok());
    const std::string bytes = ReadFileBytes(path);
    uint64_t header_size = 0;
    for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | uint8_t(bytes[i]);
    EXPECT_EQ(header_size % 8, 0u);
    EXPECT_EQ(bytes[8], '{');
    const std::string header = bytes.substr(8, header_size);
    const size_t close = header.rfind('}');
    EXPECT_EQ(header.find_first_not_of(' ', close + 1), std::string::npos) << header;
    EXPECT_EQ(bytes.size(), 8 + header_size + 4);
  }
}

TEST(SafetensorsRoundTrip, ExactFileBytes) {
  const std::string dir = MakeTempDir("st_exact");
  const std::string path = dir + "/x.safetensors";
  ASSERT_TRUE(WriteSafeTensors(path, {{"w", DType::kF16, {2}, {1.0, -2.0}}}).ok());
  const std::string header = R"({"w":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})";
  std::string padded = header + std::string((8 - header.size() % 8) % 8, ' ');
  EXPECT_EQ(ReadFileBytes(path), Craft(padded, std::string("\x00\x3c\x00\xc0", 4)));
}

// ---------------------------------------------------------------------------------------------
// Writer: validation and atomicity
// ---------------------------------------------------------------------------------------------

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(SafetensorsWrite, RefusesBadInputAndLeavesNothing) {
  const std::string dir = MakeTempDir("st_write_bad");
  const std::string path = dir + "/bad.safetensors";
  const std::vector<std::pair<std::vector<TensorToWrite>, std::string>> cases = {
      {{{"a", DType::kF32, {1}, {1}}, {"a", DType::kF32, {1}, {2}}}, "name appears twice"},
      {{{"a", DType::kF32, {2, 3}, {1, 2, 3}}}, "has 6 elements but 3 values"},
      {{{"a", DType::kF32, {-1}, {}}}, "negative or overflowing"},
      {{{"a", DType::kI32, {1}, {1}}}, "cannot write dtype I32"},
      {{{"__metadata__", DType::kF32, {1}, {1}}}, "not a valid tensor name"},
      {{{"bad\xff", DType::kF32, {1}, {1}}}, "not a valid tensor name"},
      {{{"big", DType::kF16, {2}, {1, 1e6}}}, "value 1e+06 at index 1 is out of the range of F16"},
      {{{"big", DType::kF32, {1}, {1e300}}}, "out of the range of F32"},
  };
  for (const auto& [tensors, reason] : cases) {
    absl::Status s = WriteSafeTensors(path, tensors);
    EXPECT_FALSE(s.ok()) << reason;
    EXPECT_NE(s.message().find(reason), std::string::npos) << s;
    EXPECT_NE(s.message().find(path), std::string::npos) << s;
  }
  EXPECT_TRUE(ListDir(dir).empty());
}

TEST(SafetensorsWrite, NonexistentDirectoryFailsCleanly) {
  const std::string dir = MakeTempDir("st_write_nodir");
  const std::string path = dir + "/no/such/dir/model.safetensors";
  absl::Status s = WriteSafeTensors(path, {{"a", DType::kF32, {1}, {1}}});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no/such/dir/model.safetensors"), std::string::npos) << s;
  EXPECT_TRUE(ListDir(dir).empty());
}

TEST(SafetensorsWrite, FailedWriteLeavesOldFileIntact) {
  const std::string dir = MakeTempDir("st_write_atomic");
  const std::string path = dir + "/model.safetensors";
  ASSERT_TRUE(WriteSafeTensors(path, {{"old", DType::kF32, {2}, {1, 2}}}).ok());
  const std::string old_bytes = ReadFileBytes(path);

  // Invalid input: refused before the file system is touched.
  EXPECT_FALSE(WriteSafeTensors(path, {{"new", DType::kF32, {3}, {1}}}).ok());
  EXPECT_EQ(ReadFileBytes(path), old_bytes);

  // A write that fails halfway: the file size limit makes write() return EFBIG after 4 KiB.
  struct rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = saved;
  small.rlim_cur = 4096;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  absl::Status s = WriteSafeTensors(path, {{"new", DType::kF32, {100000}, std::vector<double>(100000, 3.0)}});
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &saved), 0);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("write failed"), std::string::npos) << s;
  EXPECT_EQ(ReadFileBytes(path), old_bytes);
  EXPECT_EQ(ListDir(dir), std::vector<std::string>{"model.safetensors"});  // no temp file left

  // The rename fails when a directory stands at the path: temp file removed, directory untouched.
  const std::string dir_path = dir + "/occupied";
  fs::create_directories(dir_path + "/inside");
  EXPECT_FALSE(WriteSafeTensors(dir_path, {{"a", DType::kF32, {1}, {1}}}).ok());
  EXPECT_EQ(ListDir(dir), (std::vector<std::string>{"model.safetensors", "occupied"}));
  EXPECT_EQ(ListDir(dir_path), std::vector<std::string>{"inside"});

  // And a successful write replaces the old file.
  ASSERT_TRUE(WriteSafeTensors(path, {{"new", DType::kF32, {1}, {5}}}).ok());
  auto st = SafeTensors::Open(path);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(*st->ReadFloat("new"), std::vector<float>{5});
  EXPECT_EQ(ListDir(dir), (std::vector<std::string>{"model.safetensors", "occupied"}));
}

// ---------------------------------------------------------------------------------------------
// Reader: conversions and checks on valid files
// ---------------------------------------------------------------------------------------------

TEST(SafetensorsRead, ShapeMismatchShowsBothShapes) {
  auto st = SafeTensors::Parse(
      Craft(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})", F32Bytes({1, 2, 3, 4, 5, 6})),
      "m.safetensors");
  ASSERT_TRUE(st.ok()) << st.status();
  auto r = st->ReadFloat("w", {3, 2});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "m.safetensors: tensor \"w\": shape [2, 3] but expected [3, 2]");
  EXPECT_EQ(*st->ReadFloat("w", {2, 3}), (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

TEST(SafetensorsRead, NonFiniteRefusedUnlessAllowed) {
  auto st = SafeTensors::Parse(
      Craft(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", F32Bytes({1, 2, NAN, INFINITY})),
      "m.safetensors");
  ASSERT_TRUE(st.ok()) << st.status();
  auto r = st->ReadFloat("w");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tensor \"w\": value nan at index 2 is not finite"), std::string::npos)
      << r.status();
  auto allowed = st->ReadDouble("w", {}, /*allow_nonfinite=*/true);
  ASSERT_TRUE(allowed.ok());
  EXPECT_TRUE(std::isnan((*allowed)[2]));
  EXPECT_TRUE(std::isinf((*allowed)[3]));
}

TEST(SafetensorsRead, F64BeyondFloatRangeRefusedByReadFloat) {
  double big = 1e300;
  std::string data(8, '\0');
  std::memcpy(data.data(), &big, 8);
  auto st = SafeTensors::Parse(Craft(R"({"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", data), "m");
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(*st->ReadDouble("w"), std::vector<double>{1e300});
  auto r = st->ReadFloat("w");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("at index 0 overflows float"), std::string::npos) << r.status();
}

TEST(SafetensorsRead, IntegerDTypeAndMissingTensorAreErrors) {
  auto st = SafeTensors::Parse(Craft(R"({"i":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})",
                                     std::string(4, '\0')),
                               "m.safetensors");
  ASSERT_TRUE(st.ok()) << st.status();
  auto r = st->ReadFloat("i");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tensor \"i\": dtype I32 cannot be read"), std::string::npos);
  EXPECT_EQ(st->RawData(*st->Find("i")).size(), 4u);
  auto missing = st->ReadDouble("nope");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "m.safetensors: tensor \"nope\": not in the file");
}

TEST(SafetensorsRead, AcceptsUnalignedDataEmptyFileAndZeroSizeTensors) {
  // A 55-byte header puts the data at file offset 63: every element is unaligned.
  const std::string h = R"({"x":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}})";
  double v[2] = {1.25, -3.5};
  auto st = SafeTensors::Parse(Craft(h, std::string(reinterpret_cast<char*>(v), 16)), "m");
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(*st->ReadDouble("x"), (std::vector<double>{1.25, -3.5}));

  auto empty = SafeTensors::Parse(Craft("{}"), "m");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->tensors().empty());

  // Zero-size tensors may share an offset with each other and with the start of a real tensor.
  auto zero = SafeTensors::Parse(Craft(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
                                       R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                       R"("c":{"dtype":"BF16","shape":[3,0],"data_offsets":[4,4]}})",
                                       F32Bytes({7})),
                                 "m");
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_EQ(*zero->ReadFloat("b"), std::vector<float>{7});
}

// ---------------------------------------------------------------------------------------------
// Reader: one test per class of refusal, on crafted bytes
// ---------------------------------------------------------------------------------------------

const char kOne[] = R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})";  // a good entry over 8 bytes
const std::string kData8 = std::string(8, '\0');

std::string OneTensor(const std::string& entry) { return Craft(R"({"a":)" + entry + "}", kData8); }

TEST(SafetensorsRefuse, HeaderLength) {
  EXPECT_EQ(ParseError(std::string("\x01\x00\x00", 3)), "crafted.safetensors: file is 3 bytes, too short for the 8-byte header length");
  EXPECT_EQ(ParseError(std::string(8, '\0') + kData8), "crafted.safetensors: header length is 0");
  EXPECT_EQ(ParseError(std::string("\x10\x00\x00\x00\x00\x00\x00\x00", 8) + "{}"),
            "crafted.safetensors: header length 16 exceeds the 2 bytes after the length field");
  EXPECT_EQ(ParseError(std::string("\xff\xff\xff\xff\xff\xff\xff\xff", 8) + "{}"),
            "crafted.safetensors: header length 18446744073709551615 exceeds the limit of 100000000 bytes");
}

TEST(SafetensorsRefuse, HeaderNotAJsonObject) {
  EXPECT_NE(ParseError(Craft("not json")).find("header is not valid JSON"), std::string::npos);
  EXPECT_NE(ParseError(Craft("{} x")).find("header is not valid JSON"), std::string::npos);
  // nlohmann stops at a NUL byte; the reader must not take what precedes it as the whole header.
  EXPECT_EQ(ParseError(Craft(std::string("{}\0\0", 4))),
            "crafted.safetensors: header has a NUL byte at offset 10 (not valid JSON)");
  EXPECT_NE(ParseError(Craft(std::string("{}\0{\"a\":1}", 10))).find("NUL byte"), std::string::npos);
  EXPECT_EQ(ParseError(Craft(R"({"a":{"dtype":"F32")")),
            "crafted.safetensors: header is not valid JSON near header byte 20 (syntax error while parsing object - "
            "unexpected end of input; expected '}')");
  // Bad UTF-8: refused, and the message quoting the bytes stays printable ASCII.
  const std::string utf8 = ParseError(Craft("\"\xff\""));
  EXPECT_NE(utf8.find("ill-formed UTF-8 byte; last read: '\"\\xff'"), std::string::npos) << utf8;
  EXPECT_NE(ParseError(Craft("[1]")).find("header must be a JSON object"), std::string::npos);
  // A number beyond double is a JSON error of its own kind in nlohmann (found by the fuzzer).
  EXPECT_EQ(ParseError(Craft(R"({"a":{"dtype":"F32","shape":[1e400],"data_offsets":[0,4]}})", std::string(4, '\0'))),
            "crafted.safetensors: header is not valid JSON near header byte 34 (number overflow parsing '1e400')");
  EXPECT_NE(ParseError(Craft(R"({"a":)" + std::string(100, '[') + std::string(100, ']') + "}"))
                .find("nested deeper than 8"),
            std::string::npos);
}

TEST(SafetensorsRefuse, DuplicateKeys) {
  EXPECT_EQ(ParseError(Craft(std::string(R"({"a":)") + kOne + R"(,"a":)" + kOne + "}", kData8)),
            "crafted.safetensors: header has key \"a\" more than once");
  EXPECT_EQ(ParseError(OneTensor(R"({"dtype":"F32","shape":[2],"dtype":"F32","data_offsets":[0,8]})")),
            "crafted.safetensors: header has key \"dtype\" more than once");
  // The same key in different objects is fine.
  EXPECT_TRUE(SafeTensors::Parse(Craft(R"({"__metadata__":{"a":"x"},"a":)" + std::string(kOne) + "}", kData8), "m").ok());
}

TEST(SafetensorsRefuse, TensorEntryKeys) {
  EXPECT_EQ(ParseError(OneTensor("[0, 8]")),
            "crafted.safetensors: tensor \"a\": entry must be an object with dtype, shape and data_offsets");
  EXPECT_EQ(ParseError(OneTensor(R"({"dtype":"F32","shape":[2]})")),
            "crafted.safetensors: tensor \"a\": missing \"data_offsets\"");
  EXPECT_EQ(ParseError(OneTensor(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8],"strides":[1]})")),
            "crafted.safetensors: tensor \"a\": unexpected key \"strides\" (only dtype, shape and data_offsets "
            "are allowed)");
}

TEST(SafetensorsRefuse, DType) {
  EXPECT_EQ(ParseError(OneTensor(R"({"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]})")),
            "crafted.safetensors: tensor \"a\": dtype \"F8_E4M3\" is not one of F64, F32, F16, BF16, I64, I32, "
            "I16, I8, U8, BOOL");
  EXPECT_NE(ParseError(OneTensor(R"({"dtype":"f32","shape":[2],"data_offsets":[0,8]})")).find("dtype \"f32\""),
            std::string::npos);
  EXPECT_NE(ParseError(OneTensor(R"({"dtype":4,"shape":[2],"data_offsets":[0,8]})")).find("(not a string)"),
            std::string::npos);
}

TEST(SafetensorsRefuse, Shape) {
  EXPECT_EQ(ParseError(OneTensor(R"({"dtype":"F32","shape":2,"data_offsets":[0,8]})")),
            "crafted.safetensors: tensor \"a\": shape must be an array");
  EXPECT_EQ(ParseError(OneTensor(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})")),
            "crafted.safetensors: tensor \"a\": shape[0] = -2 is not a non-negative 64-bit integer");
  EXPECT_NE(ParseError(OneTensor(R"({"dtype":"F32","shape":[2.0],"data_offsets":[0,8]})")).find("shape[0] = 2.0"),
            std::string::npos);
  EXPECT_NE(ParseError(OneTensor(R"({"dtype":"F32","shape":[1,"2"],"data_offsets":[0,8]})")).find("shape[1]"),
            std::string::npos);
  EXPECT_NE(ParseError(OneTensor(R"({"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,8]})"))
                .find("is not a non-negative 64-bit integer"),
            std::string::npos);
}

TEST(SafetensorsRefuse, ShapeOverflow) {
  EXPECT_EQ(ParseError(OneTensor(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]})")),
            "crafted.safetensors: tensor \"a\": shape [4294967296, 4294967296] of F32 overflows a 64-bit byte "
            "count");
  // Fits in the element count, overflows once multiplied by 8 bytes.
  EXPECT_NE(ParseError(OneTensor(R"({"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,8]})"))
                .find("overflows a 64-bit byte count"),
            std::string::npos);
}

TEST(SafetensorsRefuse, DataOffsets) {
  EXPECT_NE(ParseError(OneTensor(R"({"dtype":"F32","shape":[2],"data_offsets":[0,4,8]})"))
                .find("data_offsets must be [begin, end] with non-negative integers, got [0,4,8]"),
            std::string::npos);
  EXPECT_NE(ParseError(OneTensor(R"({"dtype":"F32","shape":[2],"data_offsets":[-8,0]})")).find("data_offsets must"),
            std::string::npos);
  EXPECT_EQ(ParseError(OneTensor(R"({"dtype":"F32","shape":[0],"data_offsets":[8,0]})")),
            "crafted.safetensors: tensor \"a\": data_offsets [8, 0] end before they begin");
  EXPECT_EQ(ParseError(OneTensor(R"({"dtype":"F32","shape":[4],"data_offsets":[0,16]})")),
            "crafted.safetensors: tensor \"a\": data_offsets [0, 16] reach past the end of the data section (8 "
            "bytes)");
  EXPECT_NE(ParseError(OneTensor(R"({"dtype":"U8","shape":[8],"data_offsets":[18446744073709551607,18446744073709551615]})"))
                .find("reach past the end"),
            std::string::npos);
}

TEST(SafetensorsRefuse, SizeMismatch) {
  const std::string name = "model.layers.0.mlp.up_proj.weight";
  EXPECT_EQ(ParseError(Craft(R"({")" + name + R"(":{"dtype":"F32","shape":[5,6],"data_offsets":[0,100]}})",
                             std::string(100, '\0'))),
            "crafted.safetensors: tensor \"model.layers.0.mlp.up_proj.weight\": data_offsets [0, 100] hold 100 "
            "bytes but shape [5, 6] of F32 needs 120");
}

TEST(SafetensorsRefuse, Overlap) {
  EXPECT_EQ(ParseError(Craft(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                             kData8)),
            "crafted.safetensors: tensor \"b\": data_offsets [4, 8] overlap tensor \"a\" at [0, 8]");
  EXPECT_NE(ParseError(Craft(std::string(R"({"a":)") + kOne + R"(,"b":)" + kOne + "}", kData8)).find("overlap"),
            std::string::npos);
  // An empty range strictly inside another tensor is refused too (the tensors must tile the data).
  EXPECT_NE(ParseError(Craft(std::string(R"({"a":)") + kOne + R"(,"b":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
                             kData8))
                .find("tensor \"b\": data_offsets [4, 4] overlap tensor \"a\""),
            std::string::npos);
}

TEST(SafetensorsRefuse, UnusedBytes) {
  EXPECT_EQ(ParseError(Craft(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                             R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                             std::string(12, '\0'))),
            "crafted.safetensors: bytes [4, 8) of the data section belong to no tensor (gap before tensor \"b\")");
  EXPECT_EQ(ParseError(Craft(std::string(R"({"a":)") + kOne + "}", std::string(12, '\0'))),
            "crafted.safetensors: bytes [8, 12) at the end of the data section belong to no tensor");
  EXPECT_EQ(ParseError(Craft("{}", kData8)),
            "crafted.safetensors: bytes [0, 8) at the end of the data section belong to no tensor");
}

TEST(SafetensorsRefuse, Metadata) {
  EXPECT_EQ(ParseError(Craft(R"({"__metadata__":"pt"})")),
            "crafted.safetensors: __metadata__ must be an object of strings");
  EXPECT_EQ(ParseError(Craft(R"({"__metadata__":{"step":1000}})")),
            "crafted.safetensors: __metadata__ \"step\" must be a string");
}

TEST(SafetensorsRefuse, NamesAreEscapedInMessages) {
  EXPECT_EQ(ParseError(Craft(R"({"a\"b\n":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})", kData8)),
            "crafted.safetensors: tensor \"a\\\"b\\x0a\": data_offsets [0, 8] hold 8 bytes but shape [1] of F32 "
            "needs 4");
}

TEST(SafetensorsRefuse, OpenMissingFile) {
  auto st = SafeTensors::Open("/nonexistent/dir/model.safetensors");
  EXPECT_EQ(st.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(st.status().message().find("/nonexistent/dir/model.safetensors: cannot open"), std::string::npos);
  const std::string dir = MakeTempDir("st_open_dir");
  EXPECT_NE(SafeTensors::Open(dir).status().message().find("not a regular file"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// The committed corpus (tests/data/safetensors, written by make_corpus.py)
// ---------------------------------------------------------------------------------------------

std::vector<std::string> CorpusFiles(const std::string& folder) {
  std::vector<std::string> paths;
  for (const auto& e : fs::directory_iterator(SourcePath("tests/data/safetensors/" + folder))) {
    if (e.path().extension() == ".safetensors") paths.push_back(e.path().string());
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

TEST(SafetensorsCorpus, EveryMalformedFileIsRefusedCleanly) {
  const std::vector<std::string> paths = CorpusFiles("malformed");
  EXPECT_GE(paths.size(), 40u);
  for (const std::string& path : paths) {
    auto st = SafeTensors::Open(path);
    EXPECT_FALSE(st.ok()) << path << " was accepted";
    if (st.ok()) continue;
    EXPECT_EQ(st.status().code(), absl::StatusCode::kInvalidArgument) << st.status();
    const std::string name = fs::path(path).filename().string();
    EXPECT_NE(st.status().message().find(name), std::string::npos) << st.status();
  }
}

TEST(SafetensorsCorpus, EveryValidFileParses) {
  const std::vector<std::string> paths = CorpusFiles("valid");
  EXPECT_GE(paths.size(), 5u);
  for (const std::string& path : paths) {
    auto st = SafeTensors::Open(path);
    ASSERT_TRUE(st.ok()) << st.status();
    for (const TensorInfo& t : st->tensors()) {
      if (t.dtype == DType::kF64 || t.dtype == DType::kF32 || t.dtype == DType::kF16 || t.dtype == DType::kBF16) {
        EXPECT_TRUE(st->ReadFloat(t.name, {}, /*allow_nonfinite=*/true).ok()) << path << " " << t.name;
      }
    }
  }
  auto unaligned = SafeTensors::Open(SourcePath("tests/data/safetensors/valid/unaligned_data.safetensors"));
  ASSERT_TRUE(unaligned.ok());
  EXPECT_EQ(*unaligned->ReadDouble("x"), (std::vector<double>{1.25, -3.5}));
}

// valid/mixed_dtypes.safetensors was written by make_corpus.py (Python's struct and json): the C++
// writer must produce the same bytes, and the reader must read back the values.
TEST(SafetensorsCorpus, WriterMatchesCommittedFile) {
  std::vector<double> a;
  for (int i = 0; i < 6; ++i) a.push_back(i * 0.25 - 1.0);
  const std::vector<TensorToWrite> tensors = {
      {"a", DType::kF32, {2, 3}, a},
      {"b", DType::kF16, {4}, {0.1, 1.0 / 3.0, -65504.0, 1e-7}},
      {"c", DType::kBF16, {2, 2}, {1.5, -2.0, 0.1, 3.0e38}},
      {"d", DType::kF64, {}, {2.718281828459045}},
      {"e", DType::kF32, {0, 3}, {}},
  };
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"source", "make_corpus.py"}};
  const std::string committed = SourcePath("tests/data/safetensors/valid/mixed_dtypes.safetensors");
  const std::string path = MakeTempDir("st_golden") + "/mixed_dtypes.safetensors";
  ASSERT_TRUE(WriteSafeTensors(path, tensors, metadata).ok());
  EXPECT_EQ(ReadFileBytes(path), ReadFileBytes(committed));

  auto st = SafeTensors::Open(committed);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->metadata(), metadata);
  EXPECT_EQ(*st->ReadDouble("a", {2, 3}), a);
  EXPECT_EQ(*st->ReadDouble("b"), (std::vector<double>{HalfToFloat(0x2e66), HalfToFloat(0x3555), -65504.0,
                                                       HalfToFloat(FloatToHalf(1e-7f))}));
  EXPECT_EQ((*st->ReadFloat("c"))[2], BFloat16ToFloat(0x3dcd));
  EXPECT_EQ(*st->ReadDouble("d", {}), std::vector<double>{2.718281828459045});
}

}  // namespace
}  // namespace steady
