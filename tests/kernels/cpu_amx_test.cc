// The AMX bf16 GEMM (kernels/cpu/amx.h) against its plain reference, its batch and thread
// invariance, and the CPU backend's choice of it (--cpu-gemm): every such test reports SKIPPED on a
// CPU (or a kernel) without AMX. And the model of the tile instructions the int8 kernels are tested on
// where the CPU has no AMX (kernels/cpu/amx_tiles.h; the kernels themselves: cpu_dot_test's AMX_INT8
// path): its TDPBSUD against the instruction's definition written out per output, and its faults.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/amx.h"
#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_dot.h"
#include "kernels/cpu/parallel.h"
#include "model/backend/backend.h"
#include "model/decoder/cpu_weights.h"
#include "model/decoder/model.h"
#include "model/decoder/state_pool.h"
#include "tests/testutil.h"

namespace steady {
namespace {

#define SKIP_WITHOUT_AMX() \
  if (!cpu::AmxAvailable()) GTEST_SKIP() << "this CPU or kernel has no AMX-BF16"

// A problem with bf16 weights: row-major (for the reference) and packed for the tiles.
struct Bf16Problem {
  int rows, in, out;
  std::vector<float> x;
  std::vector<uint16_t> w, packed;

  Bf16Problem(int rows_, int in_, int out_, std::mt19937_64& rng) : rows(rows_), in(in_), out(out_) {
    x = testing::RandomNormal<float>(size_t(rows) * in, rng);
    const std::vector<float> w32 = testing::RandomNormal<float>(size_t(out) * in, rng);
    for (float v : w32) w.push_back(cpu::FloatToBf16(v));
    packed.assign(size_t(cpu::AmxPackedSize(out, in)), 0xffff);  // padding must be overwritten
    cpu::PackAmxBf16(w.data(), out, in, packed.data());
  }
  std::vector<float> Amx(const float* xs, int n) const {
    std::vector<float> y(size_t(n) * out, NAN);
    cpu::MatMulNTAmxBf16(xs, n, in, packed.data(), out, y.data());
    return y;
  }
};

// bf16 products are exact in fp32; the tiles sum them in fp32, so each element is within
// in * eps * sum |x_k w_k| of the double-precision sum of the same rounded values.
TEST(CpuAmxTest, MatchesTheReferenceAtEveryShape) {
  SKIP_WITHOUT_AMX();
  std::mt19937_64 rng(testing::TestSeed());
  for (int rows : {1, 2, 15, 16, 17, 33}) {
    for (int in : {1, 31, 32, 33, 100}) {
      for (int out : {1, 15, 16, 17, 63, 64, 65, 130}) {
        const Bf16Problem p(rows, in, out, rng);
        const std::vector<float> got = p.Amx(p.x.data(), rows);
        std::vector<float> want(got.size());
        cpu::MatMulNTAmxBf16Reference(p.x.data(), rows, in, p.w.data(), out, want.data());
        for (int r = 0; r < rows; ++r) {
          for (int j = 0; j < out; ++j) {
            double mag = 0;
            for (int k = 0; k < in; ++k) {
              mag += std::abs(double(cpu::Bf16ToFloat(cpu::FloatToBf16(p.x[size_t(r) * in + k]))) *
                              cpu::Bf16ToFloat(p.w[size_t(j) * in + k]));
            }
            const size_t i = size_t(r) * out + j;
            ASSERT_NEAR(got[i], want[i], 1e-30 + in * 1.2e-7 * mag)
                << "rows " << rows << " in " << in << " out " << out << " at (" << r << ", " << j << ")";
          }
        }
      }
    }
  }
}

// The activations really are rounded to bf16: an input that bf16 cannot hold gives bf16's answer.
TEST(CpuAmxTest, RoundsTheActivationsToBf16) {
  SKIP_WITHOUT_AMX();
  const float x = 1.0f + 1.0f / 1024;  // between bf16 neighbours 1 and 1 + 1/128: rounds to 1
  const uint16_t one = cpu::FloatToBf16(1.0f);
  std::vector<uint16_t> packed(size_t(cpu::AmxPackedSize(1, 1)));
  cpu::PackAmxBf16(&one, 1, 1, packed.data());
  float y = NAN;
  cpu::MatMulNTAmxBf16(&x, 1, 1, packed.data(), 1, &y);
  EXPECT_EQ(y, 1.0f);
}

// A row's result is the same bits alone or in any batch, and with one thread or two: a session's
// logits do not depend on which other sessions share its step.
TEST(CpuAmxTest, ARowsResultDoesNotDependOnTheBatchOrTheThreads) {
  SKIP_WITHOUT_AMX();
  struct Restore {
    ~Restore() { cpu::SetComputeThreads(0); }
  } restore;
  std::mt19937_64 rng(testing::TestSeed());
  const Bf16Problem p(40, 300, 700, rng);  // three passes of 16 rows; enough work to split
  cpu::SetComputeThreads(2);
  const std::vector<float> all = p.Amx(p.x.data(), p.rows);
  cpu::SetComputeThreads(1);
  EXPECT_EQ(all, p.Amx(p.x.data(), p.rows)) << "one thread against two";
  cpu::SetComputeThreads(2);
  std::vector<int> order(p.rows);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  for (int n : {1, 5, 17}) {
    std::vector<float> sub;
    for (int i = 0; i < n; ++i) {
      sub.insert(sub.end(), p.x.begin() + size_t(order[i]) * p.in, p.x.begin() + size_t(order[i] + 1) * p.in);
    }
    const std::vector<float> got = p.Amx(sub.data(), n);
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(0, std::memcmp(got.data() + size_t(i) * p.out, all.data() + size_t(order[i]) * p.out,
                               size_t(p.out) * sizeof(float)))
          << "row " << order[i] << " in a batch of " << n;
    }
  }
}

// Through the backend: --cpu-gemm auto puts bf16 weights on the tiles (and says so), simd does
// not; the two steps' logits are close (bf16 activations move them by a little) but not equal.
TEST(CpuAmxTest, TheBackendTakesAmxForBf16UnlessTold) {
  SKIP_WITHOUT_AMX();
  const Model m = testing::TinyModel("taylor", nlohmann::json::object(), 31);
  auto step = [&](CpuGemm gemm, std::string* name) {
    BackendOptions o;
    o.slots = 2;
    o.cpu_weights = CpuWeights::kBf16;
    o.cpu_gemm = gemm;
    auto backend = MakeBackend(m, "cpu", o);
    EXPECT_TRUE(backend.ok()) << backend.status();
    *name = (*backend)->Name();
    std::vector<float> logits;
    (*backend)->Forward({{0, std::vector<int32_t>(12, 9), false}, {1, {4, 5, 6}, false}}, &logits);
    return logits;
  };
  std::string amx_name, simd_name, dot_name;
  const std::vector<float> amx = step(CpuGemm::kAuto, &amx_name), simd = step(CpuGemm::kSimd, &simd_name);
  EXPECT_EQ(amx_name, "cpu (bf16 weights on AMX)");
  EXPECT_EQ(simd_name, "cpu (bf16 weights)");
  ASSERT_EQ(amx.size(), simd.size());
  const double err = testing::MaxRelError({amx.begin(), amx.end()}, {simd.begin(), simd.end()});
  EXPECT_GT(err, 0.0) << "the AMX matrices were not read";
  EXPECT_LT(err, 0.05) << "bf16 activations moved the logits by this fraction of their spread";
  // avx512vnni keeps bf16 off the tiles: on VDPBF16PS (Sapphire Rapids has AVX512_BF16), whose sums
  // run in another order than the tiles'.
  if (cpu::Bf16DotAvailable() && cpu::Int8PathAvailable(cpu::Int8Path::kAvx512Vnni)) {
    const std::vector<float> dot = step(CpuGemm::kAvx512Vnni, &dot_name);
    EXPECT_EQ(dot_name, "cpu (bf16 weights on AVX512_BF16)");
    ASSERT_EQ(dot.size(), amx.size());
    const double dot_err = testing::MaxRelError({dot.begin(), dot.end()}, {amx.begin(), amx.end()});
    EXPECT_LT(dot_err, 0.05) << "VDPBF16PS against the tiles, a fraction of the logits' spread";
  }
  // The packed copy replaces the row-major one: two bytes a packed value, padding included.
  const CpuMatrices packed = CpuMatrices::From(m, CpuWeights::kBf16, /*amx=*/true);
  int64_t values = packed.lm_head.Bytes() / 2;
  for (const CpuMatrices::Layer& l : packed.layers) {
    for (const WeightMatrix* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      EXPECT_EQ(w->type(), WeightType::kAmxBf16);
      values += w->Bytes() / 2;
    }
  }
  EXPECT_EQ(packed.Bytes(), 2 * values);
  EXPECT_GE(values, packed.Weights());
}

// A configuration for TDPBSUD of `rows` rows of 4 * k bytes by k rows of 4 * n bytes into `rows` x n
// int32: tile 0 accumulates, 1 and 2 are the sources.
cpu::TileConfig DotConfig(int rows, int k, int n) {
  cpu::TileConfig config;
  config.rows[0] = uint8_t(rows), config.bytes_per_row[0] = uint16_t(4 * n);
  config.rows[1] = uint8_t(rows), config.bytes_per_row[1] = uint16_t(4 * k);
  config.rows[2] = uint8_t(k), config.bytes_per_row[2] = uint16_t(4 * n);
  return config;
}

// c[m][n] = start[m][n] + sum over i < 4k of int8(a[m][i]) * uint8(b[i / 4][4n + i % 4]), for random
// bytes (both signs, 0 and 255, -128 and 127 among them) at full and partial shapes, loaded from and
// stored to rows further apart than they are long; rows and bytes past the shape stay untouched.
TEST(AmxTileModelTest, DotSignedUnsignedIsTheInstructionsSum) {
  std::mt19937_64 rng(testing::TestSeed());
  std::uniform_int_distribution<int> byte(0, 255);
  for (const auto& [rows, k, n] : {std::tuple{16, 16, 16}, std::tuple{16, 8, 16}, std::tuple{5, 3, 7}, std::tuple{1, 1, 1}}) {
    constexpr int kStride = 80;  // bytes between rows in memory
    std::vector<uint8_t> a(16 * kStride), b(16 * kStride);
    std::vector<int32_t> start(16 * kStride / 4), c(16 * kStride / 4, 12345);
    for (uint8_t& v : a) v = uint8_t(byte(rng));
    for (uint8_t& v : b) v = uint8_t(byte(rng));
    a[0] = 0x80, a[1] = 0x7f, b[0] = 0xff, b[1] = 0;  // -128, 127, 255, 0
    for (int32_t& v : start) v = byte(rng) * 1000 - 128000;
    cpu::AmxTileModel::LoadConfig(DotConfig(rows, k, n));
    cpu::AmxTileModel::Load(0, start.data(), kStride);
    cpu::AmxTileModel::Load(1, a.data(), kStride);
    cpu::AmxTileModel::Load(2, b.data(), kStride);
    cpu::AmxTileModel::DotSignedUnsigned(0, 1, 2);
    cpu::AmxTileModel::Store(0, c.data(), kStride);
    cpu::AmxTileModel::Release();
    for (int m = 0; m < 16; ++m) {
      for (int j = 0; j < kStride / 4; ++j) {
        const int32_t got = c[size_t(m) * kStride / 4 + j];
        if (m >= rows || j >= n) {
          ASSERT_EQ(got, 12345) << "written past the tile's shape at row " << m << " column " << j;
          continue;
        }
        int64_t want = start[size_t(m) * kStride / 4 + j];
        for (int i = 0; i < 4 * k; ++i) want += int64_t(int8_t(a[size_t(m) * kStride + i])) * b[size_t(i / 4) * kStride + 4 * j + i % 4];
        ASSERT_EQ(got, want) << "shape " << rows << " x " << k << " x " << n << " at (" << m << ", " << j << ")";
      }
    }
  }
}

// TILEZERO clears the accumulator; signed bytes of -1 against unsigned ones.
TEST(AmxTileModelTest, ZeroClearsTheAccumulator) {
  cpu::AmxTileModel::LoadConfig(DotConfig(2, 1, 2));
  const int32_t ones[2][2] = {{7, 7}, {7, 7}};
  const uint8_t a[2][4] = {{1, 2, 3, 4}, {0xff, 0xff, 0xff, 0xff}};  // row 1: four -1s
  const uint8_t b[1][8] = {{1, 1, 1, 1, 2, 2, 2, 2}};
  cpu::AmxTileModel::Load(0, ones, sizeof(ones[0]));
  cpu::AmxTileModel::Zero(0);
  cpu::AmxTileModel::Load(1, a, sizeof(a[0]));
  cpu::AmxTileModel::Load(2, b, sizeof(b[0]));
  cpu::AmxTileModel::DotSignedUnsigned(0, 1, 2);
  int32_t c[2][2] = {};
  cpu::AmxTileModel::Store(0, c, sizeof(c[0]));
  cpu::AmxTileModel::Release();
  EXPECT_EQ(c[0][0], 10);
  EXPECT_EQ(c[0][1], 20);
  EXPECT_EQ(c[1][0], -4);
  EXPECT_EQ(c[1][1], -8);
}

// Where the instructions fault, the model fails a CHECK: a tile used before LDTILECFG or after
// TILERELEASE, or left out of the configuration; shapes that do not fit together; a source that is
// also the accumulator; a configuration past palette 1's 16 rows x 64 bytes.
TEST(AmxTileModelTest, FaultsWhereTheInstructionsDo) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  int32_t buffer[16 * 16] = {};
  EXPECT_DEATH(cpu::AmxTileModel::Zero(0), "before LDTILECFG");
  EXPECT_DEATH(
      {
        cpu::AmxTileModel::LoadConfig(DotConfig(4, 2, 4));
        cpu::AmxTileModel::Release();
        cpu::AmxTileModel::Store(0, buffer, 64);
      },
      "before LDTILECFG");
  EXPECT_DEATH(
      {
        cpu::AmxTileModel::LoadConfig(DotConfig(4, 2, 4));
        cpu::AmxTileModel::Load(5, buffer, 64);
      },
      "leaves out");
  // TDPBSUD(c, a, b) under `config` dies with `message`.
  const auto dot_dies = [](const cpu::TileConfig& config, int c, int a, int b, const char* message) {
    EXPECT_DEATH(
        {
          cpu::AmxTileModel::LoadConfig(config);
          cpu::AmxTileModel::DotSignedUnsigned(c, a, b);
        },
        message);
  };
  cpu::TileConfig rows_differ = DotConfig(4, 2, 4);
  rows_differ.rows[1] = 3;
  dot_dies(rows_differ, 0, 1, 2, "differ in rows");
  cpu::TileConfig k_differs = DotConfig(4, 2, 4);
  k_differs.rows[2] = 3;
  dot_dies(k_differs, 0, 1, 2, "not the second's rows");
  cpu::TileConfig columns_differ = DotConfig(4, 2, 4);
  columns_differ.bytes_per_row[2] = 12;
  dot_dies(columns_differ, 0, 1, 2, "differ in bytes per row");
  dot_dies(DotConfig(4, 4, 4), 0, 0, 2, "must differ");
  cpu::TileConfig too_tall = DotConfig(4, 2, 4);
  too_tall.rows[0] = 17;
  EXPECT_DEATH(cpu::AmxTileModel::LoadConfig(too_tall), "larger than palette 1");
  cpu::TileConfig no_bytes = DotConfig(4, 2, 4);
  no_bytes.bytes_per_row[3] = 0, no_bytes.rows[3] = 2;
  EXPECT_DEATH(cpu::AmxTileModel::LoadConfig(no_bytes), "rows but no bytes");
}

}  // namespace
}  // namespace steady
