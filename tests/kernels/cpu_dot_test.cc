// The dot-product kernels (kernels/cpu/matmul_dot.h) against double-precision references at many
// shapes (odd `in`, partial q8 blocks, 1..64 rows), with tolerances derived from the rounding of the
// activations; their batch and thread invariance; the int8 kernels on each path (AVX512_VNNI,
// AVX-VNNI, AVX2) alone, their exact int32 sums on blocks that would saturate VPMADDUBSW used
// naively, and the same bits from every path. The kernels read weights packed by PackBf16Dot and
// PackQ8Dot; where the CPU lacks the instructions these tests skip naming them (and the backend
// keeps the widening kernels, which cpu_kernels_test checks against their references). The f16
// kernel (fp32 activations, f16 weights packed by PackF16Dot) against its definition replayed with
// std::fma. The backend's choice of them: cpu_dot_backend_test.cc.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_dot.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/q32.h"
#include "kernels/cpu/q4k.h"
#include "kernels/cpu/q5k.h"
#include "kernels/cpu/q6k.h"
#include "tests/random.h"

namespace steady {
namespace cpu {
// The path's name in test listings (gtest prints the parameter).
void PrintTo(Int8Path path, std::ostream* os) { *os << Int8PathName(path); }
void PrintTo(Bf16Path path, std::ostream* os) { *os << Bf16PathName(path); }
}  // namespace cpu
namespace {

struct ThreadsGuard {
  ~ThreadsGuard() { cpu::SetComputeThreads(0); }
};

// The int8 paths, widest first, and what a CPU needs for each (the skip messages).
constexpr cpu::Int8Path kInt8Paths[] = {cpu::Int8Path::kAmxInt8, cpu::Int8Path::kAvx512Vnni, cpu::Int8Path::kAvxVnni, cpu::Int8Path::kAvx2,
                                        cpu::Int8Path::kArmI8mm, cpu::Int8Path::kArmDot};
const char* Missing(cpu::Int8Path path) {
  switch (path) {
    case cpu::Int8Path::kAmxInt8: return "no AMX-INT8 on this CPU, nor AVX512_VNNI for its kernels on the tile model";
    case cpu::Int8Path::kAvx512Vnni: return "no AVX512_VNNI (+ AVX512BW/VL/DQ) on this CPU";
    case cpu::Int8Path::kAvxVnni: return "no AVX-VNNI (+ AVX2, FMA, F16C) on this CPU";
    case cpu::Int8Path::kAvx2: return "no AVX2 (+ FMA, F16C) on this CPU";
    case cpu::Int8Path::kArmI8mm: return "no Arm int8 matrix-multiply extension (SMMLA) on this CPU";
    case cpu::Int8Path::kArmDot: return "no Arm dot-product extension (SDOT) on this CPU";
    case cpu::Int8Path::kNone: break;
  }
  return "";
}
// The bf16 paths, widest first, and what a CPU needs for each.
constexpr cpu::Bf16Path kBf16Paths[] = {cpu::Bf16Path::kAvx512Bf16, cpu::Bf16Path::kAvx2, cpu::Bf16Path::kArmBf16};
const char* Missing(cpu::Bf16Path path) {
  switch (path) {
    case cpu::Bf16Path::kAvx512Bf16: return "no AVX512_BF16 (+ AVX512BW/VL/DQ) on this CPU";
    case cpu::Bf16Path::kAvx2: return "no AVX2 and FMA on this CPU";
    case cpu::Bf16Path::kArmBf16: return "no Arm BF16 extension (BFDOT, BFMMLA) on this CPU";
    case cpu::Bf16Path::kNone: break;
  }
  return "";
}

// The widest bf16 path again when it goes, also when an assertion returns early.
struct WidestBf16PathAfter {
  ~WidestBf16PathAfter() { cpu::SetBf16Path(cpu::WidestBf16Path()); }
};

// The bf16 kernels on one path (the test's parameter); the widest path again afterwards.
class Bf16PathTest : public ::testing::TestWithParam<cpu::Bf16Path> {
 protected:
  void SetUp() override {
    if (!cpu::Bf16PathAvailable(GetParam())) GTEST_SKIP() << Missing(GetParam());
    cpu::SetBf16Path(GetParam());
    std::printf("bf16 path: %s\n", cpu::Bf16DotPath());
  }
  WidestBf16PathAfter widest_after_;
};
INSTANTIATE_TEST_SUITE_P(Paths, Bf16PathTest, ::testing::ValuesIn(kBf16Paths),
                         [](const ::testing::TestParamInfo<cpu::Bf16Path>& info) {
                           return std::string(cpu::Bf16PathExtension(info.param));
                         });

// Whether `path` runs here, AMX-INT8 on the tile model (cpu::SetAmxInt8TileModel) where the CPU has no
// AMX: its kernels' code runs on every CPU with AVX512_VNNI.
bool UsePath(cpu::Int8Path path) {
  cpu::SetAmxInt8TileModel(path == cpu::Int8Path::kAmxInt8 && cpu::WidestInt8Path() != path);
  return cpu::Int8PathAvailable(path);
}
void WidestPathAgain() {
  cpu::SetAmxInt8TileModel(false);
  cpu::SetInt8Path(cpu::WidestInt8Path());
}

// The int8 kernels on one path (the test's parameter); the widest path again afterwards.
class Int8PathTest : public ::testing::TestWithParam<cpu::Int8Path> {
 protected:
  void SetUp() override {
    if (!UsePath(GetParam())) GTEST_SKIP() << Missing(GetParam());
    cpu::SetInt8Path(GetParam());
    std::printf("int8 path: %s\n", cpu::Int8DotPath());
  }
  void TearDown() override { WidestPathAgain(); }
};
INSTANTIATE_TEST_SUITE_P(Paths, Int8PathTest, ::testing::ValuesIn(kInt8Paths),
                         [](const ::testing::TestParamInfo<cpu::Int8Path>& info) {
                           return std::string(cpu::Int8PathExtension(info.param));
                         });

constexpr double kF32Eps = 1.2e-7;  // 2^-23 and a little: fp32 rounding per term of a sum

// Shapes: rows (1..64 and odd counts between), `in` (below, at and past the 16/32/64-lane steps and
// 128- and 256-value chunks) and `out` (below, at and past the 16-column group and the 64-column tile).
const int kRows[] = {1, 2, 3, 4, 5, 7, 16, 33, 64};
const int kIns[] = {1, 31, 32, 33, 64, 65, 100, 600};
const int kOuts[] = {1, 9, 16, 17, 70};

struct Bf16Problem {
  int rows, in, out;
  std::vector<float> x;
  std::vector<uint16_t> w, packed;
};

Bf16Problem MakeBf16(int rows, int in, int out, std::mt19937_64& rng) {
  Bf16Problem p{rows, in, out, testing::RandomNormal<float>(size_t(rows) * in, rng), {}, {}};
  for (float v : testing::RandomNormal<float>(size_t(out) * in, rng)) p.w.push_back(cpu::FloatToBf16(v));
  p.packed.assign(size_t(cpu::Bf16DotPackedSize(out, in)), 0xffff);
  cpu::PackBf16Dot(p.w.data(), out, in, p.packed.data());
  return p;
}


std::vector<float> RunBf16(const Bf16Problem& p, const std::vector<float>& x, int rows,
                           void (*fn)(const float*, int, int, const uint16_t*, int, float*)) {
  std::vector<float> y(size_t(rows) * p.out, NAN);
  fn(x.data(), rows, p.in, p.w.data(), p.out, y.data());
  return y;
}
// The kernel, on the packed weights.
std::vector<float> RunBf16Dot(const Bf16Problem& p, const std::vector<float>& x, int rows) {
  std::vector<float> y(size_t(rows) * p.out, NAN);
  cpu::MatMulNTBf16Dot(x.data(), rows, p.in, p.packed.data(), p.out, y.data());
  return y;
}

// sum over k of |x[r, k] w[j, k]|, with w given per element.
template <typename WeightAt>
double Magnitude(const std::vector<float>& x, int r, int in, int j, const WeightAt& weight) {
  double m = 0;
  for (int k = 0; k < in; ++k) m += std::abs(double(x[size_t(r) * in + k]) * weight(j, k));
  return m;
}

TEST_P(Bf16PathTest, MatchesReferencesAtManyShapes) {
  std::mt19937_64 rng(11);
  for (int rows : kRows) {
    for (int in : kIns) {
      for (int out : kOuts) {
        const Bf16Problem p = MakeBf16(rows, in, out, rng);
        const std::vector<float> got = RunBf16Dot(p, p.x, rows);
        const std::vector<float> exact = RunBf16(p, p.x, rows, cpu::MatMulNTBf16Reference);
        const std::vector<float> rounded = RunBf16(p, p.x, rows, cpu::MatMulNTBf16DotReference);
        for (int r = 0; r < rows; ++r) {
          for (int j = 0; j < out; ++j) {
            const double mag = Magnitude(p.x, r, in, j, [&](int jj, int k) {
              return double(cpu::Bf16ToFloat(p.w[size_t(jj) * in + k]));
            });
            const size_t i = size_t(r) * out + j;
            const double sum_err = 1e-30 + in * kF32Eps * mag;
            // bf16 keeps 8 significant bits: rounding x moves each term by at most half an ulp, 2^-8 of itself.
            ASSERT_NEAR(got[i], exact[i], std::ldexp(mag, -8) + sum_err)
                << "rows " << rows << " in " << in << " out " << out << " at (" << r << ", " << j << ")";
            ASSERT_NEAR(got[i], rounded[i], sum_err)
                << "rows " << rows << " in " << in << " out " << out << " at (" << r << ", " << j << ")";
          }
        }
      }
    }
  }
}

// A tolerance of zero for the rounding would fail: the bf16 path is not the widening one.
TEST_P(Bf16PathTest, RoundsTheActivations) {
  std::mt19937_64 rng(12);
  const Bf16Problem p = MakeBf16(4, 1000, 16, rng);
  const std::vector<float> dot = RunBf16Dot(p, p.x, 4);
  const std::vector<float> widening = RunBf16(p, p.x, 4, cpu::MatMulNTBf16);
  const std::vector<float> rounded = RunBf16(p, p.x, 4, cpu::MatMulNTBf16DotReference);
  const std::vector<float> exact = RunBf16(p, p.x, 4, cpu::MatMulNTBf16Reference);
  double dot_to_rounded = 0, dot_to_exact = 0, widening_to_exact = 0;
  for (size_t i = 0; i < dot.size(); ++i) {
    dot_to_rounded += std::abs(dot[i] - rounded[i]);
    dot_to_exact += std::abs(dot[i] - exact[i]);
    widening_to_exact += std::abs(widening[i] - exact[i]);
  }
  EXPECT_LT(dot_to_rounded * 10, dot_to_exact);      // it computes bf16(x) w, not x w
  EXPECT_LT(widening_to_exact * 10, dot_to_exact);   // and the widening kernel computes x w
}

// Each path's vector rounding of the activations is FloatToBf16's at the values where rounding is
// delicate: ties to even both ways, a carry into the exponent, the largest floats (which round to
// infinity), infinities, quiet and signalling NaNs (a NaN stays a NaN) and, on AVX2 only (VDPBF16PS
// and BFDOT treat subnormal bf16 inputs as zero), a subnormal. Row r holds its value at input 0 of
// 40 (inside the vector loops, not their scalar tails) and zeros elsewhere; the weight 1 at input 0
// of the one column reads back bf16(value).
TEST_P(Bf16PathTest, RoundsDelicateValuesAsFloatToBf16) {
  std::vector<uint32_t> bits = {0x3f808000u, 0x3f818000u, 0x3f808001u, 0xbf818000u, 0x3fffffffu, 0x7f7fffffu,
                                0xff7fffffu, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffa00000u,
                                0x3eaaaaabu};
  if (GetParam() == cpu::Bf16Path::kAvx2) bits.push_back(0x00012345u);
  const int rows = int(bits.size()), in = 40, out = 1;
  Bf16Problem p{rows, in, out, std::vector<float>(size_t(rows) * in, 0.0f), std::vector<uint16_t>(size_t(in), 0), {}};
  for (int r = 0; r < rows; ++r) p.x[size_t(r) * in] = std::bit_cast<float>(bits[size_t(r)]);
  p.w[0] = cpu::FloatToBf16(1.0f);
  p.packed.assign(size_t(cpu::Bf16DotPackedSize(out, in)), 0xffff);
  cpu::PackBf16Dot(p.w.data(), out, in, p.packed.data());
  const std::vector<float> got = RunBf16Dot(p, p.x, rows);
  for (int r = 0; r < rows; ++r) {
    const float want = cpu::Bf16ToFloat(cpu::FloatToBf16(std::bit_cast<float>(bits[size_t(r)])));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got[size_t(r)])) << std::hex << bits[size_t(r)] << ": " << got[size_t(r)];
    } else {
      EXPECT_EQ(got[size_t(r)], want) << std::hex << bits[size_t(r)];
    }
  }
}

// VDPBF16PS's arithmetic as its definition gives it, for one output: per pair of inputs, the odd
// one's product added to the sum, then the even one's, each a fused multiply-add in fp32 (the
// products of bf16 values are exact) with subnormals kept, as the AVX2 path keeps them.
float Vdpbf16psOrder(const Bf16Problem& p, int r, int j) {
  float sum = 0.0f;
  for (int k = 0; k < p.in; k += 2) {
    const auto x = [&](int kk) { return cpu::Bf16ToFloat(cpu::FloatToBf16(p.x[size_t(r) * p.in + kk])); };
    const auto w = [&](int kk) { return cpu::Bf16ToFloat(p.w[size_t(j) * p.in + kk]); };
    if (k + 1 < p.in) sum = std::fma(x(k + 1), w(k + 1), sum);
    sum = std::fma(x(k), w(k), sum);
  }
  return sum;
}

// The AVX2 path gives that arithmetic's bits at every shape (tiles of 1 x 4 groups below 4 rows, 4 x
// 1 from 4), also where products and sums are subnormal: a row of x scaled to 1e-19 against weights
// of about 1 x 1e-19 makes products near 1e-38, fp32's smallest normal numbers.
TEST(CpuDotTest, Avx2Bf16IsVdpbf16psArithmetic) {
  if (!cpu::Bf16PathAvailable(cpu::Bf16Path::kAvx2)) GTEST_SKIP() << Missing(cpu::Bf16Path::kAvx2);
  WidestBf16PathAfter widest_after;
  cpu::SetBf16Path(cpu::Bf16Path::kAvx2);
  std::mt19937_64 rng(15);
  int64_t subnormal = 0;
  for (int rows : {1, 3, 4, 7, 33}) {
    for (int in : {1, 2, 33, 600}) {
      Bf16Problem p = MakeBf16(rows, in, 70, rng);
      for (int k = 0; k < in; ++k) p.x[k] *= 1e-19f;  // row 0
      for (int k = 0; k < in; ++k) p.w[k] = cpu::FloatToBf16(cpu::Bf16ToFloat(p.w[k]) * 1e-19f);  // column 0
      cpu::PackBf16Dot(p.w.data(), p.out, in, p.packed.data());
      const std::vector<float> got = RunBf16Dot(p, p.x, rows);
      for (int r = 0; r < rows; ++r) {
        for (int j = 0; j < p.out; ++j) {
          const float want = Vdpbf16psOrder(p, r, j);
          if (want != 0.0f && std::abs(want) < 1.17549435e-38f) ++subnormal;
          ASSERT_EQ(std::bit_cast<uint32_t>(got[size_t(r) * p.out + j]), std::bit_cast<uint32_t>(want))
              << "rows " << rows << " in " << in << " at (" << r << ", " << j << "): " << got[size_t(r) * p.out + j]
              << " against " << want;
        }
      }
    }
  }
  EXPECT_GT(subnormal, 0) << "no subnormal sum was compared";
}

// On a CPU with both, the AVX2 path against VDPBF16PS itself, on inputs where nothing is subnormal:
// within the fp32 sum's error, and how many outputs have the same bits (all of them where the CPU's
// VDPBF16PS adds as its definition says).
TEST(CpuDotTest, Avx2Bf16AgainstVdpbf16ps) {
  if (!cpu::Bf16PathAvailable(cpu::Bf16Path::kAvx512Bf16)) GTEST_SKIP() << Missing(cpu::Bf16Path::kAvx512Bf16);
  std::mt19937_64 rng(16);
  const Bf16Problem p = MakeBf16(37, 1001, 301, rng);
  WidestBf16PathAfter widest_after;
  cpu::SetBf16Path(cpu::Bf16Path::kAvx2);
  const std::vector<float> avx2 = RunBf16Dot(p, p.x, p.rows);
  cpu::SetBf16Path(cpu::Bf16Path::kAvx512Bf16);
  const std::vector<float> vdpbf16ps = RunBf16Dot(p, p.x, p.rows);
  int64_t same = 0;
  for (int r = 0; r < p.rows; ++r) {
    for (int j = 0; j < p.out; ++j) {
      const size_t i = size_t(r) * p.out + j;
      const double mag = Magnitude(p.x, r, p.in, j, [&](int jj, int k) { return double(cpu::Bf16ToFloat(p.w[size_t(jj) * p.in + k])); });
      ASSERT_NEAR(avx2[i], vdpbf16ps[i], 2 * p.in * kF32Eps * mag) << "at (" << r << ", " << j << ")";
      same += avx2[i] == vdpbf16ps[i];
    }
  }
  std::printf("the same bits as VDPBF16PS: %lld of %zu outputs\n", static_cast<long long>(same), avx2.size());
}

// The bf16 problem's fields, with w holding f16 bits and packed PackF16Dot's layout.
using F16Problem = Bf16Problem;

// x and w of N(0, 1); w's column 0 scaled by 2^-20, which makes most of its f16 values subnormal
// (f16's smallest normal number is 2^-14), and x's row 0 by 2^-100, whose products with them are
// then subnormal in fp32.
F16Problem MakeF16(int rows, int in, int out, std::mt19937_64& rng) {
  F16Problem p{rows, in, out, testing::RandomNormal<float>(size_t(rows) * in, rng), {}, {}};
  for (float v : testing::RandomNormal<float>(size_t(out) * in, rng)) p.w.push_back(cpu::FloatToF16(v));
  for (int k = 0; k < in; ++k) p.w[size_t(k)] = cpu::FloatToF16(std::ldexp(cpu::F16ToFloat(p.w[size_t(k)]), -20));
  for (int k = 0; k < in; ++k) p.x[size_t(k)] = std::ldexp(p.x[size_t(k)], -100);
  p.packed.assign(size_t(cpu::F16DotPackedSize(out, in)), 0xffff);
  cpu::PackF16Dot(p.w.data(), out, in, p.packed.data());
  return p;
}

std::vector<float> RunF16Dot(const F16Problem& p, const std::vector<float>& x, int rows) {
  std::vector<float> y(size_t(rows) * p.out, NAN);
  cpu::MatMulNTF16Dot(x.data(), rows, p.in, p.packed.data(), p.out, y.data());
  return y;
}

// The f16 kernel's definition for one output: a running fp32 sum from +0 over the inputs in order,
// each a fused multiply-add of x as it is and the weight widened exactly.
float F16InOrder(const F16Problem& p, const std::vector<float>& x, int r, int j) {
  float sum = 0.0f;
  for (int k = 0; k < p.in; ++k) sum = std::fma(x[size_t(r) * p.in + k], cpu::F16ToFloat(p.w[size_t(j) * p.in + k]), sum);
  return sum;
}

// The f16 kernel, on the bf16 path it runs with (AVX2's FMAs); the widest path again afterwards.
class F16DotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cpu::F16DotRunsOn(cpu::Bf16Path::kAvx2)) GTEST_SKIP() << "no AVX2, FMA and F16C on this CPU";
    cpu::SetBf16Path(cpu::Bf16Path::kAvx2);
    ASSERT_TRUE(cpu::F16DotAvailable());
  }
  WidestBf16PathAfter widest_after_;
};

// At every shape (tiles of 1 x 4 groups below 4 rows, 4 x 1 from 4; inputs past a chunk of 256)
// the kernel gives the definition's bits, subnormal weights, products and sums included, and is
// within the fp32 sum's error of the exact product (matmul.h MatMulNTF16Reference).
TEST_F(F16DotTest, IsARunningFmaInOrderAtManyShapes) {
  std::mt19937_64 rng(17);
  int64_t subnormal = 0;
  for (int rows : kRows) {
    for (int in : {1, 2, 31, 33, 255, 256, 257, 600}) {
      for (int out : kOuts) {
        const F16Problem p = MakeF16(rows, in, out, rng);
        const std::vector<float> got = RunF16Dot(p, p.x, rows);
        std::vector<float> exact(got.size());
        cpu::MatMulNTF16Reference(p.x.data(), rows, in, p.w.data(), out, exact.data());
        for (int r = 0; r < rows; ++r) {
          for (int j = 0; j < out; ++j) {
            const size_t i = size_t(r) * out + j;
            const float want = F16InOrder(p, p.x, r, j);
            subnormal += want != 0.0f && std::abs(want) < 1.17549435e-38f;
            ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want))
                << "rows " << rows << " in " << in << " out " << out << " at (" << r << ", " << j << "): " << got[i]
                << " against " << want;
            const double mag = Magnitude(p.x, r, in, j, [&](int jj, int k) { return double(cpu::F16ToFloat(p.w[size_t(jj) * in + k])); });
            ASSERT_NEAR(got[i], exact[i], 1e-45 + in * kF32Eps * mag) << "rows " << rows << " in " << in << " out " << out;
          }
        }
      }
    }
  }
  EXPECT_GT(subnormal, 0) << "no subnormal sum was compared";
}

// Infinities and NaNs in the weights or the activations give what fp32 arithmetic gives: a NaN
// where the definition has one (inf * 0, inf - inf, a NaN), the infinity where it has one.
TEST_F(F16DotTest, CarriesInfinitiesAndNaNs) {
  std::mt19937_64 rng(18);
  F16Problem p = MakeF16(5, 40, 20, rng);
  p.w[size_t(1) * p.in + 3] = 0x7c00;    // column 1: +inf
  p.w[size_t(2) * p.in + 7] = 0x7e00;    // column 2: a NaN
  p.w[size_t(3) * p.in + 5] = 0xfc00;    // column 3: -inf
  p.x[size_t(1) * p.in + 9] = INFINITY;  // row 1: +inf
  p.x[size_t(2) * p.in + 5] = 0.0f;      // row 2: 0 * -inf in column 3
  cpu::PackF16Dot(p.w.data(), p.out, p.in, p.packed.data());
  const std::vector<float> got = RunF16Dot(p, p.x, p.rows);
  int nans = 0, infinities = 0;
  for (int r = 0; r < p.rows; ++r) {
    for (int j = 0; j < p.out; ++j) {
      const float want = F16InOrder(p, p.x, r, j), have = got[size_t(r) * p.out + j];
      nans += std::isnan(want);
      infinities += std::isinf(want);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(have)) << "at (" << r << ", " << j << "): " << have;
      } else {
        EXPECT_EQ(have, want) << "at (" << r << ", " << j << ")";
      }
    }
  }
  EXPECT_GT(nans, 5);
  EXPECT_GT(infinities, 5);
}

// Off the bf16 path it runs with, the f16 kernel is not available and names the widening kernel.
TEST(CpuDotTest, TheF16KernelRunsOnlyWhereBf16TakesAvx2) {
  WidestBf16PathAfter widest_after;
  for (cpu::Bf16Path path : {cpu::Bf16Path::kAvx512Bf16, cpu::Bf16Path::kArmBf16, cpu::Bf16Path::kNone}) {
    EXPECT_FALSE(cpu::F16DotRunsOn(path));
    EXPECT_STREQ(cpu::F16DotPathName(path), cpu::Bf16PathName(cpu::Bf16Path::kNone));
    if (!cpu::Bf16PathAvailable(path)) continue;
    cpu::SetBf16Path(path);
    EXPECT_FALSE(cpu::F16DotAvailable());
    EXPECT_STREQ(cpu::F16DotExtension(), "");
  }
  if (!cpu::F16DotRunsOn(cpu::Bf16Path::kAvx2)) GTEST_SKIP() << "no AVX2, FMA and F16C on this CPU";
  cpu::SetBf16Path(cpu::Bf16Path::kAvx2);
  EXPECT_TRUE(cpu::F16DotAvailable());
  EXPECT_STREQ(cpu::F16DotPath(), "avx2 (F16C + FMA on packed f16)");
  EXPECT_STREQ(cpu::F16DotExtension(), "F16C");
}

struct Q8Problem {
  int rows, in, out;
  std::vector<float> x;
  std::vector<int8_t> q;
  std::vector<float> scales;
  std::vector<uint8_t> packed;
  cpu::Q8Weights w() const { return {q.data(), scales.data()}; }
};

Q8Problem MakeQ8(int rows, int in, int out, std::mt19937_64& rng) {
  Q8Problem p{rows, in, out, testing::RandomNormal<float>(size_t(rows) * in, rng), std::vector<int8_t>(size_t(out) * in),
              std::vector<float>(size_t(out * cpu::Q8BlocksPerRow(in))), {}};
  const std::vector<float> w = testing::RandomNormal<float>(size_t(out) * in, rng);
  cpu::QuantizeQ8(w.data(), out, in, p.q.data(), p.scales.data());
  p.packed.assign(size_t(cpu::Q8DotPackedSize(out, in)), 0xff);
  cpu::PackQ8Dot(p.w(), out, in, p.packed.data());
  return p;
}

std::vector<float> RunQ8(const Q8Problem& p, const std::vector<float>& x, int rows,
                         void (*fn)(const float*, int, int, cpu::Q8Weights, int, float*)) {
  std::vector<float> y(size_t(rows) * p.out, NAN);
  fn(x.data(), rows, p.in, p.w(), p.out, y.data());
  return y;
}
std::vector<float> RunQ8Dot(const Q8Problem& p, const std::vector<float>& x, int rows) {
  std::vector<float> y(size_t(rows) * p.out, NAN);
  cpu::MatMulNTQ8Dot(x.data(), rows, p.in, p.packed.data(), p.out, y.data());
  return y;
}

// got (a kernel on q8(x)) against exact (x times the weights, in double) within q8(x)'s error bound
// plus the fp32 sum's, and against rounded (q8(x) times the weights, in double) within the sum's.
// `extra` fp32 roundings per element beyond one per input (q4k's per-sub-block scaling; its weight
// lambda gives each weight's magnitude |d sc q| + dmin m, which bounds both parts).
template <typename WeightAt>
void ExpectQ8ActivationBounds(const std::vector<float>& x, int rows, int in, int out, const WeightAt& weight,
                              const std::vector<float>& got, const std::vector<float>& exact,
                              const std::vector<float>& rounded, int extra = 0) {
  const int64_t blocks = cpu::Q8BlocksPerRow(in);
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < out; ++j) {
      // Quantizing x moves each value by at most half its block's step, max |x| / 127 / 2.
      double quant_err = 0;
      for (int64_t b = 0; b < blocks; ++b) {
        double amax = 0, wsum = 0;
        for (int64_t k = b * 32; k < std::min<int64_t>(in, b * 32 + 32); ++k) {
          amax = std::max(amax, std::abs(double(x[size_t(r) * in + k])));
          wsum += std::abs(weight(j, int(k)));
        }
        quant_err += amax / 127 / 2 * wsum * (1 + 1e-6);
      }
      const double mag = Magnitude(x, r, in, j, weight);
      const double sum_err = 1e-30 + (in + extra) * kF32Eps * (mag + quant_err);
      const size_t i = size_t(r) * out + j;
      ASSERT_NEAR(got[i], exact[i], quant_err + sum_err)
          << "rows " << rows << " in " << in << " out " << out << " at (" << r << ", " << j << ")";
      ASSERT_NEAR(got[i], rounded[i], sum_err)
          << "rows " << rows << " in " << in << " out " << out << " at (" << r << ", " << j << ")";
    }
  }
}

TEST_P(Int8PathTest, Q8MatchesReferencesAtManyShapes) {
  std::mt19937_64 rng(13);
  for (int rows : kRows) {
    for (int in : kIns) {
      for (int out : kOuts) {
        Q8Problem p = MakeQ8(rows, in, out, rng);
        if (rows > 2) std::fill_n(p.x.begin() + in, in, 0.0f);  // a row of zeros: every scale 0
        const int64_t blocks = cpu::Q8BlocksPerRow(in);
        const auto weight = [&](int j, int k) { return double(p.q[size_t(j) * in + k]) * p.scales[j * blocks + k / 32]; };
        ExpectQ8ActivationBounds(p.x, rows, in, out, weight, RunQ8Dot(p, p.x, rows),
                                 RunQ8(p, p.x, rows, cpu::MatMulNTQ8Reference),
                                 RunQ8(p, p.x, rows, cpu::MatMulNTQ8DotReference));
        if (HasFatalFailure()) return;
      }
    }
  }
}

// q4: fp32 weights quantized and packed (QuantizePackQ4Dot), and read back (DequantizeQ4Dot).
struct Q4Problem {
  int rows, in, out;
  std::vector<float> x, w, dequantized;
  std::vector<uint8_t> packed, rows_q4;  // the int8 kernels' layout; the row-major one (matmul.h)
  cpu::Q4Weights weights() const { return {rows_q4.data()}; }
};

Q4Problem MakeQ4(int rows, int in, int out, std::mt19937_64& rng) {
  Q4Problem p{rows, in, out, testing::RandomNormal<float>(size_t(rows) * in, rng),
              testing::RandomNormal<float>(size_t(out) * in, rng), std::vector<float>(size_t(out) * in), {}, {}};
  p.packed.assign(size_t(cpu::Q4DotPackedSize(out, in)), 0xff);
  cpu::QuantizePackQ4Dot(p.w.data(), out, in, p.packed.data());
  cpu::DequantizeQ4Dot(p.packed.data(), out, in, 0, out, p.dequantized.data());
  p.rows_q4.assign(size_t(cpu::Q4Bytes(out, in)), 0xff);
  cpu::QuantizeQ4(p.w.data(), out, in, p.rows_q4.data());
  return p;
}

// The widening kernel on the row-major q4.
std::vector<float> RunQ4Widening(const Q4Problem& p, const std::vector<float>& x, int rows) {
  std::vector<float> y(size_t(rows) * p.out, NAN);
  cpu::MatMulNTQ4(x.data(), rows, p.in, p.weights(), p.out, y.data());
  return y;
}

std::vector<float> RunQ4Dot(const Q4Problem& p, const std::vector<float>& x, int rows) {
  std::vector<float> y(size_t(rows) * p.out, NAN);
  cpu::MatMulNTQ4Dot(x.data(), rows, p.in, p.packed.data(), p.out, y.data());
  return y;
}

// q4_0's rounding by hand: a block whose largest magnitude is -8 has scale 1 and keeps integers
// exactly; 7.9 clips to 7, -0.4 rounds to 0 and 0.6 to 1; a block of zeros stays zero.
TEST(CpuDotTest, Q4QuantizesAsQ4_0) {
  std::vector<float> w(64, 0.0f);
  for (int k = 0; k < 16; ++k) w[size_t(k)] = float(k - 8);
  w[16] = 7.9f;
  w[17] = -0.4f;
  w[18] = 0.6f;
  std::vector<uint8_t> packed(size_t(cpu::Q4DotPackedSize(1, 64)));
  cpu::QuantizePackQ4Dot(w.data(), 1, 64, packed.data());
  std::vector<float> back(64, NAN);
  cpu::DequantizeQ4Dot(packed.data(), 1, 64, 0, 1, back.data());
  for (int k = 0; k < 16; ++k) EXPECT_EQ(back[size_t(k)], float(k - 8)) << k;
  EXPECT_EQ(back[16], 7.0f);
  EXPECT_EQ(back[17], 0.0f);
  EXPECT_EQ(back[18], 1.0f);
  for (int k = 19; k < 64; ++k) EXPECT_EQ(back[size_t(k)], 0.0f) << k;
  // Random blocks: every weight within one step (|scale|) of its value, the largest within fp16's rounding.
  std::mt19937_64 rng(16);
  const Q4Problem p = MakeQ4(1, 1000, 37, rng);
  for (int j = 0; j < p.out; ++j) {
    for (int b = 0; b * 32 < p.in; ++b) {
      double amax = 0;
      for (int k = b * 32; k < std::min(p.in, b * 32 + 32); ++k) amax = std::max(amax, std::abs(double(p.w[size_t(j) * p.in + k])));
      for (int k = b * 32; k < std::min(p.in, b * 32 + 32); ++k) {
        const size_t i = size_t(j) * p.in + size_t(k);
        ASSERT_NEAR(p.dequantized[i], p.w[i], amax / 8 * (1 + 1.0 / 128)) << "row " << j << " input " << k;
      }
    }
  }
}

TEST_P(Int8PathTest, Q4MatchesReferencesAtManyShapes) {
  std::mt19937_64 rng(17);
  for (int rows : kRows) {
    for (int in : kIns) {
      for (int out : kOuts) {
        Q4Problem p = MakeQ4(rows, in, out, rng);
        if (rows > 2) std::fill_n(p.x.begin() + in, in, 0.0f);
        std::vector<float> exact(size_t(rows) * out), rounded(size_t(rows) * out);
        cpu::MatMulNTReference(p.x.data(), rows, in, p.dequantized.data(), out, exact.data());
        cpu::MatMulNTQ8ActivationsReference(p.x.data(), rows, in, p.dequantized.data(), out, rounded.data());
        const auto weight = [&](int j, int k) { return double(p.dequantized[size_t(j) * in + k]); };
        ExpectQ8ActivationBounds(p.x, rows, in, out, weight, RunQ4Dot(p, p.x, rows), exact, rounded);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// q4k: fp32 weights quantized (QuantizeQ4K) in the row-major form, and packed for VPDPBUSD.
struct Q4KProblem {
  int rows, in, out;
  std::vector<float> x, w, dequantized;
  std::vector<uint8_t> blocks;
  std::vector<uint8_t> packed;
  cpu::Q4KWeights weights() const { return {blocks.data()}; }
  // |d sc q| + dmin m of weight (j, k): bounds the weight and both parts the kernels add.
  double Magnitude(int j, int k) const {
    const cpu::Q4KParts p = cpu::Q4KWeightParts(weights(), in, j, k);
    return std::abs(double(p.scaled)) + std::abs(double(p.min));
  }
};

Q4KProblem MakeQ4K(int rows, int in, int out, std::mt19937_64& rng, bool pack = true) {
  Q4KProblem p{rows, in, out, testing::RandomNormal<float>(size_t(rows) * in, rng),
               testing::RandomNormal<float>(size_t(out) * in, rng), std::vector<float>(size_t(out) * in),
               std::vector<uint8_t>(size_t(cpu::Q4KBytes(out, in)), 0xff), {}};
  cpu::QuantizeQ4K(p.w.data(), out, in, p.blocks.data());
  cpu::DequantizeQ4K(p.weights(), in, 0, out, p.dequantized.data());
  if (pack) {
    p.packed.assign(size_t(cpu::Q4KDotPackedSize(out, in)), 0xff);
    cpu::PackQ4KDot(p.weights(), out, in, p.packed.data());
  }
  return p;
}

std::vector<float> RunQ4KDot(const Q4KProblem& p, const std::vector<float>& x, int rows) {
  std::vector<float> y(size_t(rows) * p.out, NAN);
  cpu::MatMulNTQ4KDot(x.data(), rows, p.in, p.packed.data(), p.out, y.data());
  return y;
}
std::vector<float> RunQ4KWidening(const Q4KProblem& p, const std::vector<float>& x, int rows) {
  std::vector<float> y(size_t(rows) * p.out, NAN);
  cpu::MatMulNTQ4K(x.data(), rows, p.in, p.weights(), p.out, y.data());
  return y;
}

// q6k: random Q6_K blocks (every bit pattern is a valid one; d a small fp16 so that the weights are
// of order 1), or blocks whose q are all 63 (`fill` 0xff: every bit set) or all 0 (0x00): the
// largest products there are, and int16 pairs that AVX2 must not saturate. Row-major as in a GGUF
// file, and packed.
struct Q6KProblem {
  int rows, in, out;
  std::vector<float> x, dequantized;
  std::vector<uint8_t> blocks, packed;
  cpu::Q6KWeights weights() const { return {blocks.data()}; }
};

Q6KProblem MakeQ6K(int rows, int in, int out, std::mt19937_64& rng, bool pack = true, int fill = -1) {
  Q6KProblem p{rows, in, out, testing::RandomNormal<float>(size_t(rows) * in, rng), std::vector<float>(size_t(out) * in),
               std::vector<uint8_t>(size_t(cpu::Q6KBytes(out, in))), {}};
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.5e-3f, 2e-3f);
  for (int64_t b = 0; b < out * cpu::Q6KBlocksPerRow(in); ++b) {
    uint8_t* block = p.blocks.data() + b * cpu::kQ6KBlockBytes;
    for (int i = 0; i < 208; ++i) block[i] = uint8_t(fill >= 0 && i < 192 ? fill : byte(rng));
    const uint16_t d = cpu::FloatToF16(scale(rng));
    std::memcpy(block + 208, &d, 2);
  }
  cpu::DequantizeQ6K(p.weights(), in, 0, out, p.dequantized.data());
  if (pack) {
    p.packed.assign(size_t(cpu::Q6KDotPackedSize(out, in)), 0xff);
    cpu::PackQ6KDot(p.weights(), out, in, p.packed.data());
  }
  return p;
}

std::vector<float> RunQ6KDot(const Q6KProblem& p, const std::vector<float>& x, int rows) {
  std::vector<float> y(size_t(rows) * p.out, NAN);
  cpu::MatMulNTQ6KDot(x.data(), rows, p.in, p.packed.data(), p.out, y.data());
  return y;
}
std::vector<float> RunQ6KWidening(const Q6KProblem& p, const std::vector<float>& x, int rows) {
  std::vector<float> y(size_t(rows) * p.out, NAN);
  cpu::MatMulNTQ6K(x.data(), rows, p.in, p.weights(), p.out, y.data());
  return y;
}

// q5k: random Q5_K blocks (every bit pattern is a valid one; d and dmin small fp16 values), or blocks
// whose q are all 31 (`fill` 0xff: every bit of qh and qs set) or all 0 (0x00): the largest products
// there are, and int16 pairs that AVX2 must not saturate. Row-major as in a GGUF file, and packed.
struct Q5KProblem {
  int rows, in, out;
  std::vector<float> x;
  std::vector<uint8_t> blocks;
  std::vector<float> dequantized;
  std::vector<uint8_t> packed;
  cpu::Q5KWeights weights() const { return {blocks.data()}; }
  // |d sc q| + dmin m of weight (j, k): bounds the weight and both parts the kernels add.
  double Magnitude(int j, int k) const {
    const uint8_t* block = blocks.data() + (int64_t(j) * cpu::Q5KBlocksPerRow(in) + k / cpu::kQ5KBlock) * cpu::kQ5KBlockBytes;
    const cpu::Q4KScales s = cpu::Q4KBlockScales(block);
    const int sub = (k % cpu::kQ5KBlock) / cpu::kQ5KSub;
    return std::abs(double(cpu::F16ToFloat(s.d)) * s.sc[sub] * cpu::Q5KBlockQ(block, k % cpu::kQ5KBlock)) +
           double(cpu::F16ToFloat(s.dmin)) * s.m[sub];
  }
};

Q5KProblem MakeQ5K(int rows, int in, int out, std::mt19937_64& rng, bool pack = true, int fill = -1) {
  Q5KProblem p{rows, in, out, testing::RandomNormal<float>(size_t(rows) * in, rng), std::vector<uint8_t>(size_t(cpu::Q5KBytes(out, in))),
               std::vector<float>(size_t(out) * in), {}};
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.5e-3f, 2e-3f);
  for (int64_t b = 0; b < out * cpu::Q5KBlocksPerRow(in); ++b) {
    uint8_t* block = p.blocks.data() + b * cpu::kQ5KBlockBytes;
    const uint16_t d[2] = {cpu::FloatToF16(scale(rng)), cpu::FloatToF16(scale(rng))};
    std::memcpy(block, d, 4);
    for (int64_t i = 4; i < cpu::kQ5KBlockBytes; ++i) block[i] = uint8_t(fill >= 0 && i >= 16 ? fill : byte(rng));
  }
  cpu::DequantizeQ5K(p.weights(), in, 0, out, p.dequantized.data());
  if (pack) {
    p.packed.assign(size_t(cpu::Q5KDotPackedSize(out, in)), 0xff);
    cpu::PackQ5KDot(p.weights(), out, in, p.packed.data());
  }
  return p;
}

std::vector<float> RunQ5KDot(const Q5KProblem& p, const std::vector<float>& x, int rows) {
  std::vector<float> y(size_t(rows) * p.out, NAN);
  cpu::MatMulNTQ5KDot(x.data(), rows, p.in, p.packed.data(), p.out, y.data());
  return y;
}
std::vector<float> RunQ5KWidening(const Q5KProblem& p, const std::vector<float>& x, int rows) {
  std::vector<float> y(size_t(rows) * p.out, NAN);
  cpu::MatMulNTQ5K(x.data(), rows, p.in, p.weights(), p.out, y.data());
  return y;
}

// q4_1, q5_0, q5_1 (q32.h): random blocks of `type` (every bit pattern is a valid one; d a small fp16
// value, m one of either sign), or blocks whose q are all at their largest (`fill` 0xff: every bit
// of qh and qs set) or all 0 (0x00). Row-major as in a GGUF file, and packed.
struct Q32Problem {
  cpu::Q32Type type;
  int rows, in, out;
  std::vector<float> x;
  std::vector<uint8_t> blocks;
  std::vector<float> dequantized;
  std::vector<uint8_t> packed;
  cpu::Q32Weights weights() const { return {type, blocks.data()}; }
  // |d (q - offset)| + |m| of weight (j, k): bounds the weight and both parts the kernels add.
  double Magnitude(int j, int k) const {
    const cpu::Q32Format f = cpu::Q32FormatOf(type);
    const uint8_t* block = blocks.data() + (int64_t(j) * cpu::Q8BlocksPerRow(in) + k / 32) * f.bytes;
    const int q = cpu::Q32BlockQ(type, block, k % 32) - f.offset;
    return std::abs(double(cpu::F16At(block)) * q) + (f.min ? std::abs(double(cpu::F16At(block + 2))) : 0.0);
  }
};

Q32Problem MakeQ32(cpu::Q32Type type, int rows, int in, int out, std::mt19937_64& rng, bool pack = true, int fill = -1) {
  const cpu::Q32Format f = cpu::Q32FormatOf(type);
  Q32Problem p{type, rows, in, out, testing::RandomNormal<float>(size_t(rows) * in, rng),
               std::vector<uint8_t>(size_t(cpu::Q32Bytes(type, out, in))), std::vector<float>(size_t(out) * in), {}};
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.5e-3f, 2e-3f), min(-0.02f, 0.02f);
  for (int64_t b = 0; b < out * cpu::Q8BlocksPerRow(in); ++b) {
    uint8_t* block = p.blocks.data() + b * f.bytes;
    const uint16_t dm[2] = {cpu::FloatToF16(scale(rng)), cpu::FloatToF16(min(rng))};
    std::memcpy(block, dm, f.min ? 4 : 2);
    for (int64_t i = f.min ? 4 : 2; i < f.bytes; ++i) block[i] = uint8_t(fill >= 0 ? fill : byte(rng));
  }
  cpu::DequantizeQ32(p.weights(), in, 0, out, p.dequantized.data());
  if (pack) {
    p.packed.assign(size_t(cpu::Q32DotPackedSize(type, out, in)), 0xff);
    cpu::PackQ32Dot(p.weights(), out, in, p.packed.data());
  }
  return p;
}

std::vector<float> RunQ32Dot(const Q32Problem& p, const std::vector<float>& x, int rows) {
  std::vector<float> y(size_t(rows) * p.out, NAN);
  cpu::MatMulNTQ32Dot(p.type, x.data(), rows, p.in, p.packed.data(), p.out, y.data());
  return y;
}
std::vector<float> RunQ32Widening(const Q32Problem& p, const std::vector<float>& x, int rows) {
  std::vector<float> y(size_t(rows) * p.out, NAN);
  cpu::MatMulNTQ32(x.data(), rows, p.in, p.weights(), p.out, y.data());
  return y;
}
const cpu::Q32Type kQ32Types[] = {cpu::Q32Type::kQ4_1, cpu::Q32Type::kQ5_0, cpu::Q32Type::kQ5_1};

// q8_0 (a GGUF file's Q8_0 blocks, read in place) is q8 with its fp16 d as the fp32 scale: Q8_0ToQ8
// gives those values (the packed int8 kernels' input), DequantizeQ8_0 q * d, and the widening kernel
// on the blocks the bits of MatMulNTQ8 on the converted q8, at every row count and a partial last
// block, on 1 and 2 threads.
TEST(CpuDotTest, Q8_0IsQ8WithItsOwnScalesBitForBit) {
  ThreadsGuard guard;
  constexpr int kOut = 301, kIn = 1001;
  const int64_t blocks = cpu::Q8BlocksPerRow(kIn);
  std::mt19937_64 rng(44);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-0.02f, 0.02f);
  std::vector<uint8_t> raw(size_t(cpu::Q8_0Bytes(kOut, kIn)));
  for (int64_t b = 0; b < kOut * blocks; ++b) {
    uint8_t* block = raw.data() + b * cpu::kQ8_0BlockBytes;
    const uint16_t d = cpu::FloatToF16(scale(rng));
    std::memcpy(block, &d, 2);
    for (int i = 0; i < cpu::kQ8Block; ++i) block[2 + i] = uint8_t(byte(rng));  // -128 included
  }
  const cpu::Q8_0Weights w{raw.data()};
  std::vector<int8_t> q(size_t(kOut) * kIn);
  std::vector<float> scales(size_t(kOut * blocks)), values(size_t(kOut) * kIn);
  cpu::Q8_0ToQ8(w, kIn, 0, kOut, q.data(), scales.data());
  cpu::DequantizeQ8_0(w, kIn, 0, kOut, values.data());
  for (int64_t j = 0; j < kOut; ++j) {
    for (int64_t k = 0; k < kIn; ++k) {
      const uint8_t* block = raw.data() + (j * blocks + k / 32) * cpu::kQ8_0BlockBytes;
      uint16_t d;
      std::memcpy(&d, block, 2);
      ASSERT_EQ(q[size_t(j * kIn + k)], int8_t(block[2 + k % 32])) << j << ", " << k;
      ASSERT_EQ(scales[size_t(j * blocks + k / 32)], cpu::F16ToFloat(d));
      ASSERT_EQ(values[size_t(j * kIn + k)], float(int8_t(block[2 + k % 32])) * cpu::F16ToFloat(d));
    }
  }
  const std::vector<float> x = testing::RandomNormal<float>(size_t(37) * kIn, rng);
  for (int threads : {1, 2}) {
    cpu::SetComputeThreads(threads);
    for (int rows : {1, 3, 16, 37}) {
      std::vector<float> got(size_t(rows) * kOut, NAN), want(size_t(rows) * kOut, NAN);
      cpu::MatMulNTQ8_0(x.data(), rows, kIn, w, kOut, got.data());
      cpu::MatMulNTQ8(x.data(), rows, kIn, {q.data(), scales.data()}, kOut, want.data());
      ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float))) << rows << " rows, " << threads << " threads";
    }
  }
}

// A super-block with chosen fields reads back as q6k.h (ggml's layout) says: value 128 h + 32 t + l
// takes the low (t = 0, 1) or high (t = 2, 3) nibble of ql[64 h + 32 (t % 2) + l] and bits 2t, 2t + 1
// of qh[32 h + l], its sub-block's int8 scale, and d.
TEST(CpuDotTest, Q6KReadsGgmlsBlockLayout) {
  std::vector<uint8_t> block(cpu::kQ6KBlockBytes, 0);
  std::vector<int> want_q(cpu::kQ6KBlock);
  for (int k = 0; k < cpu::kQ6KBlock; ++k) {
    const int q = (k * 37 + 11) % 64, half = k / 128, t = (k % 128) / 32, l = k % 32;
    want_q[size_t(k)] = q;
    block[size_t(64 * half + 32 * (t % 2) + l)] |= uint8_t((q & 15) << (t < 2 ? 0 : 4));
    block[size_t(128 + 32 * half + l)] |= uint8_t((q >> 4) << (2 * t));
  }
  for (int s = 0; s < 16; ++s) block[size_t(192 + s)] = uint8_t(int8_t(s % 2 == 0 ? -128 + 9 * s : 127 - 5 * s));
  const uint16_t d = cpu::FloatToF16(0.375f);
  std::memcpy(block.data() + 208, &d, 2);
  std::vector<float> values(cpu::kQ6KBlock);
  cpu::DequantizeQ6K({block.data()}, cpu::kQ6KBlock, 0, 1, values.data());
  for (int k = 0; k < cpu::kQ6KBlock; ++k) {
    const int s = k / 16, sc = s % 2 == 0 ? -128 + 9 * s : 127 - 5 * s;
    ASSERT_EQ(values[size_t(k)], 0.375f * float(sc) * float(want_q[size_t(k)] - 32)) << "value " << k;
  }
}

// A super-block with chosen fields reads back as q5k.h (ggml's block_q5_K) says: value l of sub-block
// s takes the low (even s) or high (odd s) nibble of qs[32 (s / 2) + l] and bit s of qh[l] as its
// fifth bit; its sub-block's 6-bit scale and minimum as q4k's (get_scale_min_k4), d and dmin.
TEST(CpuDotTest, Q5KReadsGgmlsBlockLayout) {
  std::vector<uint8_t> block(cpu::kQ5KBlockBytes, 0);
  const uint16_t dd[2] = {cpu::FloatToF16(0.375f), cpu::FloatToF16(0.625f)};
  std::memcpy(block.data(), dd, 4);
  for (int i = 0; i < 12; ++i) block[size_t(4 + i)] = uint8_t(37 * i + 101);
  std::vector<int> want_q(cpu::kQ5KBlock);
  for (int k = 0; k < cpu::kQ5KBlock; ++k) {
    const int q = (k * 7 + (k / 32) * 13 + 3) % 32, s = k / 32, l = k % 32;  // differs between sub-blocks
    want_q[size_t(k)] = q;
    block[size_t(48 + 32 * (s / 2) + l)] |= uint8_t((q & 15) << (s % 2 == 0 ? 0 : 4));
    block[size_t(16 + l)] |= uint8_t((q >> 4) << s);
  }
  std::vector<float> values(cpu::kQ5KBlock), widened(cpu::kQ5KBlock);
  cpu::DequantizeQ5K({block.data()}, cpu::kQ5KBlock, 0, 1, values.data());
  std::vector<float> unit(size_t(cpu::kQ5KBlock) * cpu::kQ5KBlock, 0.0f);  // x = the identity: y = the weights
  for (int k = 0; k < cpu::kQ5KBlock; ++k) unit[size_t(k) * cpu::kQ5KBlock + k] = 1.0f;
  for (int k = 0; k < cpu::kQ5KBlock; ++k) {
    std::vector<float> y(1);
    cpu::MatMulNTQ5K(unit.data() + size_t(k) * cpu::kQ5KBlock, 1, cpu::kQ5KBlock, {block.data()}, 1, y.data());
    widened[size_t(k)] = y[0];
  }
  for (int k = 0; k < cpu::kQ5KBlock; ++k) {
    int sc, m;
    cpu::Q4KSubScale(block.data(), k / 32, &sc, &m);
    const float want = 0.375f * float(sc) * float(want_q[size_t(k)]) - 0.625f * float(m);
    ASSERT_EQ(cpu::Q5KBlockQ(block.data(), k), want_q[size_t(k)]) << "value " << k;
    ASSERT_EQ(values[size_t(k)], want) << "value " << k;
    ASSERT_EQ(widened[size_t(k)], want) << "value " << k;
  }
}

TEST(CpuDotTest, Q5KWideningMatchesTheReferenceAtManyShapes) {
  std::mt19937_64 rng(45);
  for (int rows : kRows) {
    for (int in : kIns) {
      for (int out : kOuts) {
        const Q5KProblem p = MakeQ5K(rows, in, out, rng, /*pack=*/false);
        const std::vector<float>& dequantized = p.dequantized;
        for (int j = 0; j < out; ++j) {
          for (int k = 0; k < in; ++k) {
            ASSERT_EQ(dequantized[size_t(j) * in + k], cpu::Q5KWeightValue(p.weights(), in, j, k)) << j << ", " << k;
          }
        }
        const std::vector<float> got = RunQ5KWidening(p, p.x, rows);
        std::vector<float> want(size_t(rows) * out);
        cpu::MatMulNTQ5KReference(p.x.data(), rows, in, p.weights(), out, want.data());
        for (int r = 0; r < rows; ++r) {
          for (int j = 0; j < out; ++j) {
            const double mag = Magnitude(p.x, r, in, j, [&](int jj, int k) { return dequantized[size_t(jj) * in + k]; });
            ASSERT_NEAR(got[size_t(r) * out + j], want[size_t(r) * out + j], 1e-30 + (in + 2) * kF32Eps * mag)
                << "rows " << rows << " in " << in << " out " << out << " at (" << r << ", " << j << ")";
          }
        }
      }
    }
  }
}

// A block of each q32 type with chosen fields reads back as q32.h (ggml's block_q4_1, _q5_0, _q5_1)
// says: weight i takes the low (i < 16) or high nibble of qs[i % 16] and bit i of qh as its fifth
// bit; d (q - 16) for q5_0, d q + m for the others. The widening kernel gives the same values.
TEST(CpuDotTest, Q32ReadsGgmlsBlockLayouts) {
  for (cpu::Q32Type type : kQ32Types) {
    const cpu::Q32Format f = cpu::Q32FormatOf(type);
    std::vector<uint8_t> block(size_t(f.bytes), 0);
    const uint16_t dm[2] = {cpu::FloatToF16(0.375f), cpu::FloatToF16(-0.625f)};
    std::memcpy(block.data(), dm, f.min ? 4 : 2);
    std::vector<int> want_q(32);
    uint32_t qh = 0;
    for (int i = 0; i < 32; ++i) {
      const int q = (i * 7 + 3) % (f.fifth ? 32 : 16);
      want_q[size_t(i)] = q;
      block[size_t(f.qs + i % 16)] |= uint8_t((q & 15) << (i < 16 ? 0 : 4));
      qh |= uint32_t(q >> 4) << i;
    }
    if (f.fifth) std::memcpy(block.data() + (f.min ? 4 : 2), &qh, 4);
    std::vector<float> values(32), unit(32 * 32, 0.0f);
    cpu::DequantizeQ32({type, block.data()}, 32, 0, 1, values.data());
    for (int i = 0; i < 32; ++i) unit[size_t(i) * 32 + i] = 1.0f;
    std::vector<float> widened(32);
    cpu::MatMulNTQ32(unit.data(), 32, 32, {type, block.data()}, 1, widened.data());
    for (int i = 0; i < 32; ++i) {
      const float want = f.min ? 0.375f * float(want_q[size_t(i)]) - 0.625f : 0.375f * float(want_q[size_t(i)] - 16);
      ASSERT_EQ(cpu::Q32BlockQ(type, block.data(), i), want_q[size_t(i)]) << int(type) << " value " << i;
      ASSERT_EQ(values[size_t(i)], want) << int(type) << " value " << i;
      ASSERT_EQ(widened[size_t(i)], want) << int(type) << " value " << i;
    }
  }
}

TEST(CpuDotTest, Q32WideningMatchesTheReferenceAtManyShapes) {
  std::mt19937_64 rng(51);
  for (cpu::Q32Type type : kQ32Types) {
    for (int rows : kRows) {
      for (int in : kIns) {
        for (int out : kOuts) {
          const Q32Problem p = MakeQ32(type, rows, in, out, rng, /*pack=*/false);
          for (int j = 0; j < out; ++j) {
            for (int k = 0; k < in; ++k) {
              ASSERT_EQ(p.dequantized[size_t(j) * in + k], cpu::Q32WeightValue(p.weights(), in, j, k)) << j << ", " << k;
            }
          }
          const std::vector<float> got = RunQ32Widening(p, p.x, rows);
          std::vector<float> want(size_t(rows) * out);
          cpu::MatMulNTQ32Reference(p.x.data(), rows, in, p.weights(), out, want.data());
          for (int r = 0; r < rows; ++r) {
            for (int j = 0; j < out; ++j) {
              const double mag = Magnitude(p.x, r, in, j, [&](int jj, int k) { return p.dequantized[size_t(jj) * in + k]; });
              ASSERT_NEAR(got[size_t(r) * out + j], want[size_t(r) * out + j], 1e-30 + (in + 2) * kF32Eps * mag)
                  << int(type) << " rows " << rows << " in " << in << " out " << out << " at (" << r << ", " << j << ")";
            }
          }
        }
      }
    }
  }
}

TEST(CpuDotTest, Q6KWideningMatchesTheReferenceAtManyShapes) {
  std::mt19937_64 rng(40);
  for (int rows : kRows) {
    for (int in : kIns) {
      for (int out : kOuts) {
        const Q6KProblem p = MakeQ6K(rows, in, out, rng, /*pack=*/false);
        const std::vector<float> got = RunQ6KWidening(p, p.x, rows);
        std::vector<float> want(size_t(rows) * out);
        cpu::MatMulNTQ6KReference(p.x.data(), rows, in, p.weights(), out, want.data());
        for (int r = 0; r < rows; ++r) {
          for (int j = 0; j < out; ++j) {
            const double mag = Magnitude(p.x, r, in, j, [&](int jj, int k) { return p.dequantized[size_t(jj) * in + k]; });
            ASSERT_NEAR(got[size_t(r) * out + j], want[size_t(r) * out + j], 1e-30 + (in + 2) * kF32Eps * mag)
                << "rows " << rows << " in " << in << " out " << out << " at (" << r << ", " << j << ")";
          }
        }
      }
    }
  }
}

// A GGUF block type's int8 kernel on random blocks and on the extremes (make's `fill` 0xff: every q at its
// largest; 0x00: every q 0) at every shape, past the 256-value super-block too, and with an all-zero
// row of x (a zero q8_0 scale). make(rows, in, out, rng, fill) gives the problem, run(p, x, rows) the
// kernel's y; weight(p, j, k) bounds weight (j, k) and the parts the kernel adds for it; `extra` fp32
// roundings per element beyond one per input.
template <typename Make, typename Run, typename Weight>
void ExpectBlockDotAtManyShapes(uint64_t seed, const Make& make, const Run& run, const Weight& weight, int extra) {
  std::mt19937_64 rng(seed);
  int problem = 0;
  for (int rows : kRows) {
    for (int in : {1, 16, 17, 31, 33, 100, 256, 300, 600}) {
      for (int out : kOuts) {
        const int fill = problem % 5 == 3 ? 0xff : problem % 5 == 4 ? 0x00 : -1;
        ++problem;
        auto p = make(rows, in, out, rng, fill);
        if (fill >= 0) {  // x at its largest magnitude in every block, one sign: the largest sums
          for (float& v : p.x) v = std::abs(v) + 1.0f;
        }
        if (rows > 2) std::fill_n(p.x.begin() + in, in, 0.0f);
        std::vector<float> exact(size_t(rows) * out), rounded(size_t(rows) * out);
        cpu::MatMulNTReference(p.x.data(), rows, in, p.dequantized.data(), out, exact.data());
        cpu::MatMulNTQ8ActivationsReference(p.x.data(), rows, in, p.dequantized.data(), out, rounded.data());
        ExpectQ8ActivationBounds(p.x, rows, in, out, [&](int j, int k) { return weight(p, j, k); }, run(p, p.x, rows),
                                 exact, rounded, extra);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

TEST_P(Int8PathTest, Q6KDotMatchesReferencesAtManyShapes) {
  // Per sub-block of 16: the scale's product with x's and the multiply-add.
  ExpectBlockDotAtManyShapes(
      41, [](int rows, int in, int out, std::mt19937_64& rng, int fill) { return MakeQ6K(rows, in, out, rng, /*pack=*/true, fill); },
      RunQ6KDot, [](const Q6KProblem& p, int j, int k) { return double(p.dequantized[size_t(j) * p.in + k]); }, /*extra=*/2);
}

// q4 is ggml's block_q4_0 (a GGUF file's Q4_0 bytes, read in place): per 32 weights the fp16 scale,
// then byte i holding q of input i in its low nibble and of input 16 + i in its high one. Weights
// (q - 8) * d with d = -1 (the value of largest magnitude is 8 = (0 - 8) * -1) round-trip exactly
// and land there; a partial last block's missing inputs are zeros (q = 8).
TEST(CpuDotTest, Q4IsGgmlsBlockQ4_0) {
  std::vector<float> w(40);
  for (int k = 0; k < 40; ++k) w[size_t(k)] = k == 0 || k == 32 ? 8.0f : float(8 - (5 * k + 3) % 16);
  std::vector<uint8_t> blocks(size_t(cpu::Q4Bytes(1, 40)), 0xff);
  ASSERT_EQ(blocks.size(), 2u * 18u);
  cpu::QuantizeQ4(w.data(), 1, 40, blocks.data());
  for (int b = 0; b < 2; ++b) {
    uint16_t d;
    std::memcpy(&d, blocks.data() + 18 * b, 2);
    EXPECT_EQ(cpu::F16ToFloat(d), -1.0f) << b;
    for (int i = 0; i < 16; ++i) {
      const auto q = [&](int k) { return 32 * b + k < 40 ? uint8_t(8 - w[size_t(32 * b + k)]) : uint8_t(8); };
      EXPECT_EQ(blocks[size_t(18 * b + 2 + i)], uint8_t(q(i) | (q(16 + i) << 4))) << b << " " << i;
    }
  }
  std::vector<float> back(40, NAN);
  cpu::DequantizeQ4({blocks.data()}, 40, 0, 1, back.data());
  for (int k = 0; k < 40; ++k) ASSERT_EQ(back[size_t(k)], w[size_t(k)]) << k;
}

// A super-block whose values are d sc q - dmin m exactly, with d = dmin = 1 (the largest scale and
// minimum 63) and every q of 0..15 in every sub-block: the least-squares fit finds them with zero
// error, so the round trip is exact and each field lands where q4k.h (ggml's block_q4_K) says: d and
// dmin first, the 6-bit numbers packed in 12 bytes as get_scale_min_k4 reads them (checked on their
// bits), the nibbles of sub-blocks 2i and 2i + 1 in one 32-byte run. Then, on random weights,
// q4k's sub-block scales and minimums beat q4_0's one scale per 32 (what they are for).
TEST(CpuDotTest, Q4KQuantizesAsQ4_K) {
  std::vector<float> w(512, 0.0f);  // a second super-block of zeros
  for (int s = 0; s < 8; ++s) {
    for (int i = 0; i < 32; ++i) w[size_t(32 * s + i)] = float((63 - 5 * s) * ((7 * i + s) % 16) - (63 - 7 * s));
  }
  std::vector<uint8_t> blocks(size_t(cpu::Q4KBytes(1, 512)));
  ASSERT_EQ(blocks.size(), 2u * 144u);  // 4.5 bits a weight
  cpu::QuantizeQ4K(w.data(), 1, 512, blocks.data());
  const cpu::Q4KScales scales = cpu::Q4KBlockScales(blocks.data());
  EXPECT_EQ(cpu::F16ToFloat(scales.d), 1.0f);
  EXPECT_EQ(cpu::F16ToFloat(scales.dmin), 1.0f);
  for (int s = 0; s < 8; ++s) {
    EXPECT_EQ(scales.sc[s], 63 - 5 * s) << s;
    EXPECT_EQ(scales.m[s], 63 - 7 * s) << s;
  }
  // Byte 4 + j (j < 4): sc[j] in its low 6 bits, the top 2 of sc[j + 4] above; byte 8 + j: m[j] and
  // the top 2 of m[j + 4]; byte 12 + j: the low 4 bits of sc[j + 4] and of m[j + 4].
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(blocks[size_t(4 + j)], uint8_t((63 - 5 * j) | (((63 - 5 * (j + 4)) >> 4) << 6))) << j;
    EXPECT_EQ(blocks[size_t(8 + j)], uint8_t((63 - 7 * j) | (((63 - 7 * (j + 4)) >> 4) << 6))) << j;
    EXPECT_EQ(blocks[size_t(12 + j)], uint8_t(((63 - 5 * (j + 4)) & 15) | (((63 - 7 * (j + 4)) & 15) << 4))) << j;
  }
  EXPECT_EQ(blocks[16], uint8_t(0 | (((7 * 0 + 1) % 16) << 4)));  // sub-block 0's value 0 low, sub-block 1's high
  EXPECT_EQ(blocks[17], uint8_t(7 | (((7 * 1 + 1) % 16) << 4)));
  EXPECT_EQ(blocks[16 + 32], uint8_t(((7 * 0 + 2) % 16) | (((7 * 0 + 3) % 16) << 4)));  // sub-blocks 2 and 3
  std::vector<float> back(512, NAN);
  cpu::DequantizeQ4K({blocks.data()}, 512, 0, 1, back.data());
  for (int k = 0; k < 512; ++k) ASSERT_EQ(back[size_t(k)], w[size_t(k)]) << k;

  std::mt19937_64 rng(19);
  const Q4KProblem p = MakeQ4K(1, 1024, 64, rng, /*pack=*/false);
  const Q4Problem p0 = MakeQ4(1, 1024, 64, rng);
  double err_k = 0, err_0 = 0;
  for (size_t i = 0; i < p.w.size(); ++i) {
    err_k += (p.dequantized[i] - p.w[i]) * (p.dequantized[i] - p.w[i]);
    err_0 += (p0.dequantized[i] - p0.w[i]) * (p0.dequantized[i] - p0.w[i]);
  }
  err_k = std::sqrt(err_k / double(p.w.size()));
  err_0 = std::sqrt(err_0 / double(p0.w.size()));
  std::printf("rms error on N(0, 1) weights: q4k %.4f, q4_0 %.4f\n", err_k, err_0);
  EXPECT_LT(err_k, err_0);
  EXPECT_GT(err_k, 0.0);
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// QuantizeQ4K (a vector of sub-blocks at a time, one per lane, on the compute threads) gives the
// bytes of QuantizeQ4KReference (the plain copy of ggml's quantize_row_q4_K_ref, which
// tests/cli/gguf_llamacpp.sh holds against ggml itself), on rows of every kind that steers the fit
// differently, with every Highway target this binary has for this CPU (AVX-512, AVX2, SSE4, NEON,
// the emulated 128-bit one) and on 1 and 2 threads.
TEST(CpuDotTest, Q4KQuantizerEqualsItsPlainCopy) {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  ThreadsGuard guard;
  constexpr int kKinds = 11, kPerKind = 8, kRows = kKinds * kPerKind;  // row r is of kind r % kKinds
  for (const int in : {1, 32, 100, 256, 300, 512, 1000}) {
    std::vector<float> w = testing::RandomNormal<float>(size_t(kRows) * in, rng);
    std::uniform_real_distribution<double> exponent(-8, 8);
    std::uniform_int_distribution<int> grid(-8, 7), where(0, in - 1);
    for (int r = 0; r < kRows; ++r) {
      float* row = w.data() + int64_t(r) * in;
      for (int k = 0; k < in; ++k) {
        switch (r % kKinds) {
          case 1: row[k] *= 1e-3f; break;
          case 2: row[k] = std::fabs(row[k]); break;  // all positive: the minimum clamps at 0
          case 3: row[k] = 0.75f; break;              // all equal: max == min
          case 4: row[k] = 0.0f; break;
          case 5: row[k] *= 1e-40f; break;  // subnormal values: an infinite trial scale
          case 6: row[k] *= 1e30f; break;
          case 7: if (where(rng) < 3) row[k] = row[k] > 0 ? 100.0f : -100.0f; break;  // outliers
          case 8: row[k] *= float(std::pow(10.0, exponent(rng))); break;  // every scale at once
          case 9: row[k] = float(grid(rng)); break;  // on a grid: exact fits and ties
          case 10: row[k] = 0.5f * float(grid(rng)) + 0.25f; break;
          default: break;  // N(0, 1)
        }
      }
    }
    const int64_t bytes = cpu::Q4KBytes(kRows, in), row_bytes = cpu::Q4KBytes(1, in);
    std::vector<uint8_t> want(size_t(bytes), 0xff);
    cpu::QuantizeQ4KReference(w.data(), kRows, in, want.data());
    // The fits before their 6-bit rounding (where every rounding shows), over the rows' values
    // cut into sub-blocks of 32 as they lie in memory (where `in` is not a multiple of 32, a
    // sub-block spans two rows: the fit only sees 32 values).
    const int64_t subs = int64_t(kRows) * in / cpu::kQ4KSub;
    std::vector<float> want_scales(static_cast<size_t>(subs)), want_mins(static_cast<size_t>(subs));
    std::vector<uint8_t> want_l(size_t(subs * cpu::kQ4KSub));
    cpu::FitQ4KSubBlocksReference(w.data(), subs, want_scales.data(), want_mins.data(), want_l.data());
    for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
      hwy::SetSupportedTargetsForTest(target);
      std::vector<float> scales(size_t(subs), NAN), mins(size_t(subs), NAN);
      std::vector<uint8_t> l(size_t(subs * cpu::kQ4KSub), 0xee);
      cpu::FitQ4KSubBlocks(w.data(), subs, scales.data(), mins.data(), l.data());
      for (int64_t j = 0; j < subs; ++j) {
        ASSERT_EQ(Bits(scales[size_t(j)]), Bits(want_scales[size_t(j)])) << "scale of sub-block " << j << ", in " << in
                                                                          << ", " << hwy::TargetName(target);
        ASSERT_EQ(Bits(mins[size_t(j)]), Bits(want_mins[size_t(j)])) << "min of sub-block " << j << ", in " << in << ", "
                                                                      << hwy::TargetName(target);
      }
      EXPECT_EQ(l, want_l) << "q of the fits, in " << in << ", " << hwy::TargetName(target);
      for (const int threads : {1, 2}) {
        cpu::SetComputeThreads(threads);
        std::vector<uint8_t> got(size_t(bytes), 0xee);
        cpu::QuantizeQ4K(w.data(), kRows, in, got.data());
        for (int r = 0; r < kRows; ++r) {
          EXPECT_EQ(0, std::memcmp(got.data() + r * row_bytes, want.data() + r * row_bytes, size_t(row_bytes)))
              << "blocks of row " << r << " (kind " << r % kKinds << "), in " << in << ", " << hwy::TargetName(target) << ", "
              << threads << " threads";
        }
      }
    }
    hwy::SetSupportedTargetsForTest(0);
  }
  std::printf("targets:");
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) std::printf(" %s", hwy::TargetName(target));
  std::printf("\n");
}

// The widening kernel (any CPU) against x times the dequantized weights in double: only the fp32
// sum's rounding (and the weight's own, one more per term) separates them.
// Row-major q4 holds the packed form's values (QuantizeQ4 and QuantizePackQ4Dot are one quantizer;
// PackQ4Dot of the rows gives the same values), and its widening kernel is, up to 32 rows and where
// `in` is whole vectors, bit for bit the fp32 kernel on the dequantized weights, and close to the
// double reference at every shape.
TEST(CpuDotTest, Q4WideningHoldsThePackedValuesAndMatchesTheReferences) {
  std::mt19937_64 rng(24);
  for (int rows : kRows) {
    for (int in : kIns) {
      for (int out : kOuts) {
        const Q4Problem p = MakeQ4(rows, in, out, rng);
        std::vector<float> rows_values(size_t(out) * in, NAN);
        cpu::DequantizeQ4(p.weights(), in, 0, out, rows_values.data());
        ASSERT_EQ(0, std::memcmp(rows_values.data(), p.dequantized.data(), rows_values.size() * sizeof(float)))
            << "in " << in << " out " << out;
        std::vector<uint8_t> repacked(p.packed.size(), 0xff);
        cpu::PackQ4Dot(p.weights(), out, in, repacked.data());
        std::vector<float> repacked_values(size_t(out) * in, NAN);
        cpu::DequantizeQ4Dot(repacked.data(), out, in, 0, out, repacked_values.data());
        ASSERT_EQ(0, std::memcmp(repacked_values.data(), p.dequantized.data(), repacked_values.size() * sizeof(float)));
        const std::vector<float> got = RunQ4Widening(p, p.x, rows);
        std::vector<float> want(size_t(rows) * out), fp32(size_t(rows) * out);
        cpu::MatMulNTQ4Reference(p.x.data(), rows, in, p.weights(), out, want.data());
        // (Where `in` leaves a scalar tail past the last whole vector the two may round it apart, as
        // q8's widening kernel does at in = 31; the bound below holds both.)
        if (rows <= cpu::kSmallRowsMax && in % 16 == 0) {
          cpu::MatMulNTSmallRows(p.x.data(), rows, in, p.dequantized.data(), out, fp32.data());
          ASSERT_EQ(0, std::memcmp(got.data(), fp32.data(), got.size() * sizeof(float)))
              << "rows " << rows << " in " << in << " out " << out;
        }
        for (int r = 0; r < rows; ++r) {
          for (int j = 0; j < out; ++j) {
            const double mag = Magnitude(p.x, r, in, j, [&](int jj, int k) { return double(p.dequantized[size_t(jj) * in + k]); });
            ASSERT_NEAR(got[size_t(r) * out + j], want[size_t(r) * out + j], 1e-30 + in * kF32Eps * mag)
                << "rows " << rows << " in " << in << " out " << out << " at (" << r << ", " << j << ")";
          }
        }
      }
    }
  }
}

// The K-quants' widening kernels (a super-block widened at a time, its scales unpacked once) give the
// fp32 kernel's bits on the dequantized weights: the same values in the same sums, at rows that take
// one tile, several and a partial one, and rows that end inside a super-block. (Whole vectors of 16:
// the scalar tail past the last vector is the same code in both, but the compiler vectorizes it for
// plain fp32 rows, one multiply and one add, and fuses it elsewhere; the reference tests bound it.)
TEST(CpuDotTest, KQuantWideningGivesTheFp32KernelsBitsOnTheDequantizedWeights) {
  std::mt19937_64 rng(46);
  const auto expect_bits = [](const std::vector<float>& got, const std::vector<float>& x, int rows, int in,
                              const std::vector<float>& dequantized, int out, const char* format) {
    std::vector<float> want(size_t(rows) * out, NAN);
    cpu::MatMulNTSmallRows(x.data(), rows, in, dequantized.data(), out, want.data());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
          << format << " rows " << rows << " in " << in << " out " << out << " at " << i << ": " << got[i] << " against " << want[i];
    }
  };
  for (int rows : {1, 3, 4, 5, 16, 32}) {
    for (int in : {16, 48, 256, 592, 1024}) {
      for (int out : {1, 5, 17}) {
        const Q4KProblem q4k = MakeQ4K(rows, in, out, rng, /*pack=*/false);
        expect_bits(RunQ4KWidening(q4k, q4k.x, rows), q4k.x, rows, in, q4k.dequantized, out, "q4k");
        const Q5KProblem q5k = MakeQ5K(rows, in, out, rng, /*pack=*/false);
        expect_bits(RunQ5KWidening(q5k, q5k.x, rows), q5k.x, rows, in, q5k.dequantized, out, "q5k");
        const Q6KProblem q6k = MakeQ6K(rows, in, out, rng, /*pack=*/false);
        expect_bits(RunQ6KWidening(q6k, q6k.x, rows), q6k.x, rows, in, q6k.dequantized, out, "q6k");
      }
    }
  }
}

// Q4KBlockScales (four bytes at a time) unpacks what Q4KSubScale (ggml's get_scale_min_k4) reads, on
// random scale bytes and on all-ones and all-zeros.
TEST(CpuDotTest, Q4KBlockScalesReadWhatQ4KSubScaleReads) {
  std::mt19937_64 rng(47);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int trial = 0; trial < 1000; ++trial) {
    uint8_t block[cpu::kQ4KBlockBytes] = {};
    for (int i = 0; i < 16; ++i) block[i] = uint8_t(trial == 0 ? 0xff : trial == 1 ? 0 : byte(rng));
    const cpu::Q4KScales all = cpu::Q4KBlockScales(block);
    uint16_t d, dmin;
    std::memcpy(&d, block, 2);
    std::memcpy(&dmin, block + 2, 2);
    ASSERT_EQ(all.d, d);
    ASSERT_EQ(all.dmin, dmin);
    for (int s = 0; s < 8; ++s) {
      int sc, m;
      cpu::Q4KSubScale(block, s, &sc, &m);
      ASSERT_EQ(all.sc[s], sc) << "trial " << trial << " sub-block " << s;
      ASSERT_EQ(all.m[s], m) << "trial " << trial << " sub-block " << s;
    }
  }
}

TEST(CpuDotTest, Q4KWideningMatchesTheReferenceAtManyShapes) {
  std::mt19937_64 rng(20);
  for (int rows : kRows) {
    for (int in : kIns) {
      for (int out : kOuts) {
        const Q4KProblem p = MakeQ4K(rows, in, out, rng, /*pack=*/false);
        const std::vector<float> got = RunQ4KWidening(p, p.x, rows);
        std::vector<float> want(size_t(rows) * out);
        cpu::MatMulNTQ4KReference(p.x.data(), rows, in, p.weights(), out, want.data());
        for (int r = 0; r < rows; ++r) {
          for (int j = 0; j < out; ++j) {
            const double mag = Magnitude(p.x, r, in, j, [&](int jj, int k) { return p.Magnitude(jj, k); });
            ASSERT_NEAR(got[size_t(r) * out + j], want[size_t(r) * out + j], 1e-30 + (in + 2) * kF32Eps * mag)
                << "rows " << rows << " in " << in << " out " << out << " at (" << r << ", " << j << ")";
          }
        }
      }
    }
  }
}

TEST_P(Int8PathTest, Q4KDotMatchesReferencesAtManyShapes) {
  std::mt19937_64 rng(21);
  for (int rows : kRows) {
    for (int in : kIns) {
      for (int out : kOuts) {
        Q4KProblem p = MakeQ4K(rows, in, out, rng);
        if (rows > 2) std::fill_n(p.x.begin() + in, in, 0.0f);
        std::vector<float> exact(size_t(rows) * out), rounded(size_t(rows) * out);
        cpu::MatMulNTReference(p.x.data(), rows, in, p.dequantized.data(), out, exact.data());
        cpu::MatMulNTQ8ActivationsReference(p.x.data(), rows, in, p.dequantized.data(), out, rounded.data());
        // Per sub-block: the scale product, the multiply-add, the minimum's product and its subtraction.
        ExpectQ8ActivationBounds(p.x, rows, in, out, [&](int j, int k) { return p.Magnitude(j, k); },
                                 RunQ4KDot(p, p.x, rows), exact, rounded, /*extra=*/8);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST_P(Int8PathTest, Q5KDotMatchesReferencesAtManyShapes) {
  // Per sub-block: the scale product, the multiply-add, the minimum's product and its subtraction.
  ExpectBlockDotAtManyShapes(
      47, [](int rows, int in, int out, std::mt19937_64& rng, int fill) { return MakeQ5K(rows, in, out, rng, /*pack=*/true, fill); },
      RunQ5KDot, [](const Q5KProblem& p, int j, int k) { return p.Magnitude(j, k); }, /*extra=*/8);
}

TEST_P(Int8PathTest, Q32DotMatchesReferencesAtManyShapes) {
  for (cpu::Q32Type type : kQ32Types) {
    // Per block: the scale product and the multiply-add, the minimum's product and its addition.
    ExpectBlockDotAtManyShapes(
        52 + uint64_t(type),
        [type](int rows, int in, int out, std::mt19937_64& rng, int fill) {
          return MakeQ32(type, rows, in, out, rng, /*pack=*/true, fill);
        },
        RunQ32Dot, [](const Q32Problem& p, int j, int k) { return p.Magnitude(j, k); }, /*extra=*/4);
    if (HasFatalFailure()) return;
  }
}

// PackQ5KDot's layout as matmul_dot.h states it, byte by byte on a hand-made row: q4k's record (d,
// dmin, a byte per scale and minimum, the low 4 bits of q as q4k's nibbles) with the fifth bits of
// vector v's low and high nibbles in bits 2v and 2v + 1 of the fifth vector, at the nibble's place.
TEST(CpuDotTest, Q5KPacksItsFifthBitsWhereTheHeaderSays) {
  std::mt19937_64 rng(48);
  const Q5KProblem p = MakeQ5K(1, 512, 3, rng);
  const int64_t record = 2880, head = 32 + 32 + 128 + 128;
  ASSERT_EQ(cpu::Q5KDotPackedSize(3, 512), 2 * record);
  for (int c = 0; c < 16; ++c) {
    for (int b = 0; b < 2; ++b) {
      const uint8_t* rec = p.packed.data() + b * record;
      const uint8_t* block = c < 3 ? p.blocks.data() + (c * 2 + b) * cpu::kQ5KBlockBytes : nullptr;
      const cpu::Q4KScales s = block ? cpu::Q4KBlockScales(block) : cpu::Q4KScales{};
      uint16_t d, dmin;
      std::memcpy(&d, rec + 2 * c, 2);
      std::memcpy(&dmin, rec + 32 + 2 * c, 2);
      ASSERT_EQ(d, s.d) << c;
      ASSERT_EQ(dmin, s.dmin) << c;
      for (int sub = 0; sub < 8; ++sub) {
        ASSERT_EQ(rec[64 + 16 * sub + c], s.sc[sub]) << c << " " << sub;
        ASSERT_EQ(rec[192 + 16 * sub + c], s.m[sub]) << c << " " << sub;
        for (int i = 0; i < 32; ++i) {
          const int q = block ? cpu::Q5KBlockQ(block, 32 * sub + i) : 0, v = (i % 16) / 4, high = i / 16;
          const uint8_t* at = rec + head + sub * 320 + c * 4 + i % 4;
          ASSERT_EQ((at[v * 64] >> (4 * high)) & 15, q & 15) << "column " << c << " block " << b << " value " << 32 * sub + i;
          ASSERT_EQ((at[4 * 64] >> (2 * v + high)) & 1, q >> 4) << "column " << c << " block " << b << " value " << 32 * sub + i;
        }
      }
    }
  }
}

// Every row's result is bitwise the same alone, in a batch, in another order, with 1 or 2 threads.
template <typename Problem, typename Runner>
void ExpectInvariant(const Problem& p, const Runner& run) {
  ThreadsGuard guard;
  cpu::SetComputeThreads(2);
  const std::vector<float> batch = run(p.x, p.rows);
  for (int r = 0; r < p.rows; ++r) {
    const std::vector<float> one(p.x.begin() + size_t(r) * p.in, p.x.begin() + size_t(r + 1) * p.in);
    const std::vector<float> alone = run(one, 1);
    for (int j = 0; j < p.out; ++j) ASSERT_EQ(alone[size_t(j)], batch[size_t(r) * p.out + j]) << "row " << r << " col " << j;
  }
  std::vector<float> reversed;
  for (int r = p.rows - 1; r >= 0; --r) reversed.insert(reversed.end(), p.x.begin() + size_t(r) * p.in, p.x.begin() + size_t(r + 1) * p.in);
  const std::vector<float> back = run(reversed, p.rows);
  cpu::SetComputeThreads(1);
  const std::vector<float> single = run(p.x, p.rows);
  for (int r = 0; r < p.rows; ++r) {
    for (int j = 0; j < p.out; ++j) {
      ASSERT_EQ(back[size_t(p.rows - 1 - r) * p.out + j], batch[size_t(r) * p.out + j]) << "row " << r;
      ASSERT_EQ(single[size_t(r) * p.out + j], batch[size_t(r) * p.out + j]) << "row " << r;
    }
  }
}

// The packing runs a few column groups per task on the compute threads: every group's records
// equal those of its 16 rows packed alone (one group, one task), for every format, at a shape whose
// groups split into several tasks and whose last group is partial (and whose input ends inside a
// block); with two threads and with one.
TEST(CpuDotTest, PackingAGroupAtATimeGivesEachGroupsOwnRecords) {
  ThreadsGuard restore;
  const int out = 213, in = 600;
  const int64_t groups = (out + 15) / 16;
  // Whole matrix, then group g's rows alone: pack(first row, rows) gives the packed bytes.
  auto check = [&](const char* format, int64_t group_bytes, const std::function<std::vector<uint8_t>(int64_t, int64_t)>& pack) {
    const std::vector<uint8_t> whole = pack(0, out);
    ASSERT_EQ(int64_t(whole.size()), groups * group_bytes) << format;
    for (int64_t g = 0; g < groups; ++g) {
      const std::vector<uint8_t> alone = pack(16 * g, std::min<int64_t>(16, out - 16 * g));
      ASSERT_EQ(int64_t(alone.size()), group_bytes) << format;
      EXPECT_EQ(0, std::memcmp(whole.data() + g * group_bytes, alone.data(), size_t(group_bytes)))
          << format << ": group " << g << " of " << groups;
    }
  };
  for (int threads : {2, 1}) {
    cpu::SetComputeThreads(threads);
    std::mt19937_64 rng(testing::TestSeed() + 91);
    const Bf16Problem b = MakeBf16(1, in, out, rng);
    check("bf16", cpu::Bf16DotPackedSize(16, in) * 2, [&](int64_t j0, int64_t rows) {
      std::vector<uint16_t> packed(size_t(cpu::Bf16DotPackedSize(rows, in)), 0xffff);
      cpu::PackBf16Dot(b.w.data() + j0 * in, rows, in, packed.data());
      const auto* first = reinterpret_cast<const uint8_t*>(packed.data());
      return std::vector<uint8_t>(first, first + packed.size() * sizeof(uint16_t));
    });
    const F16Problem f16 = MakeF16(1, in, out, rng);
    check("f16", cpu::F16DotPackedSize(16, in) * 2, [&](int64_t j0, int64_t rows) {
      std::vector<uint16_t> packed(size_t(cpu::F16DotPackedSize(rows, in)), 0xffff);
      cpu::PackF16Dot(f16.w.data() + j0 * in, rows, in, packed.data());
      const auto* first = reinterpret_cast<const uint8_t*>(packed.data());
      return std::vector<uint8_t>(first, first + packed.size() * sizeof(uint16_t));
    });
    const Q8Problem q8 = MakeQ8(1, in, out, rng);
    const int64_t blocks = cpu::Q8BlocksPerRow(in);
    check("q8", cpu::Q8DotPackedSize(16, in), [&](int64_t j0, int64_t rows) {
      std::vector<uint8_t> packed(size_t(cpu::Q8DotPackedSize(rows, in)), 0xff);
      cpu::PackQ8Dot({q8.q.data() + j0 * in, q8.scales.data() + j0 * blocks}, rows, in, packed.data());
      return packed;
    });
    const Q4Problem q4 = MakeQ4(1, in, out, rng);
    check("q4", cpu::Q4DotPackedSize(16, in), [&](int64_t j0, int64_t rows) {
      std::vector<uint8_t> packed(size_t(cpu::Q4DotPackedSize(rows, in)), 0xff);
      cpu::PackQ4Dot({q4.weights().blocks + j0 * cpu::Q4Bytes(1, in)}, rows, in, packed.data());
      return packed;
    });
    const Q4KProblem q4k = MakeQ4K(1, in, out, rng);
    check("q4k", cpu::Q4KDotPackedSize(16, in), [&](int64_t j0, int64_t rows) {
      std::vector<uint8_t> packed(size_t(cpu::Q4KDotPackedSize(rows, in)), 0xff);
      cpu::PackQ4KDot({q4k.blocks.data() + j0 * cpu::Q4KBytes(1, in)}, rows, in, packed.data());
      return packed;
    });
    const Q5KProblem q5k = MakeQ5K(1, in, out, rng);
    check("q5k", cpu::Q5KDotPackedSize(16, in), [&](int64_t j0, int64_t rows) {
      std::vector<uint8_t> packed(size_t(cpu::Q5KDotPackedSize(rows, in)), 0xff);
      cpu::PackQ5KDot({q5k.blocks.data() + j0 * cpu::Q5KBytes(1, in)}, rows, in, packed.data());
      return packed;
    });
    for (cpu::Q32Type type : kQ32Types) {
      const Q32Problem q32 = MakeQ32(type, 1, in, out, rng);
      check(type == cpu::Q32Type::kQ4_1 ? "q4_1" : type == cpu::Q32Type::kQ5_0 ? "q5_0" : "q5_1", cpu::Q32DotPackedSize(type, 16, in), [&](int64_t j0, int64_t rows) {
        std::vector<uint8_t> packed(size_t(cpu::Q32DotPackedSize(type, rows, in)), 0xff);
        cpu::PackQ32Dot({type, q32.blocks.data() + j0 * cpu::Q32Bytes(type, 1, in)}, rows, in, packed.data());
        return packed;
      });
    }
    const Q6KProblem q6k = MakeQ6K(1, in, out, rng);
    check("q6k", cpu::Q6KDotPackedSize(16, in), [&](int64_t j0, int64_t rows) {
      std::vector<uint8_t> packed(size_t(cpu::Q6KDotPackedSize(rows, in)), 0xff);
      cpu::PackQ6KDot({q6k.blocks.data() + j0 * cpu::Q6KBytes(1, in)}, rows, in, packed.data());
      return packed;
    });
  }
}

TEST_P(Bf16PathTest, IsBatchAndThreadInvariant) {
  std::mt19937_64 rng(14);
  const Bf16Problem p = MakeBf16(37, 1001, 301, rng);  // big enough to be split over threads
  ExpectInvariant(p, [&](const std::vector<float>& x, int rows) { return RunBf16Dot(p, x, rows); });
}

TEST_F(F16DotTest, IsBatchAndThreadInvariant) {
  std::mt19937_64 rng(19);
  const F16Problem p = MakeF16(37, 1001, 301, rng);  // big enough to be split over threads
  ExpectInvariant(p, [&](const std::vector<float>& x, int rows) { return RunF16Dot(p, x, rows); });
}

TEST_P(Int8PathTest, Q4IsBatchAndThreadInvariant) {
  std::mt19937_64 rng(18);
  const Q4Problem p = MakeQ4(37, 1001, 301, rng);
  ExpectInvariant(p, [&](const std::vector<float>& x, int rows) { return RunQ4Dot(p, x, rows); });
}

TEST(CpuDotTest, Q4WideningIsBatchAndThreadInvariant) {
  std::mt19937_64 rng(25);
  const Q4Problem p = MakeQ4(37, 1001, 301, rng);
  ExpectInvariant(p, [&](const std::vector<float>& x, int rows) { return RunQ4Widening(p, x, rows); });
}

TEST(CpuDotTest, Q4KWideningIsBatchAndThreadInvariant) {
  std::mt19937_64 rng(22);
  const Q4KProblem p = MakeQ4K(37, 1001, 301, rng);
  ExpectInvariant(p, [&](const std::vector<float>& x, int rows) { return RunQ4KWidening(p, x, rows); });
}

TEST(CpuDotTest, Q5KWideningIsBatchAndThreadInvariant) {
  std::mt19937_64 rng(46);
  const Q5KProblem p = MakeQ5K(37, 1001, 301, rng, /*pack=*/false);
  ExpectInvariant(p, [&](const std::vector<float>& x, int rows) { return RunQ5KWidening(p, x, rows); });
}

TEST(CpuDotTest, Q6KWideningIsBatchAndThreadInvariant) {
  std::mt19937_64 rng(42);
  const Q6KProblem p = MakeQ6K(37, 1001, 301, rng, /*pack=*/false);
  ExpectInvariant(p, [&](const std::vector<float>& x, int rows) { return RunQ6KWidening(p, x, rows); });
}

TEST_P(Int8PathTest, Q6KIsBatchAndThreadInvariant) {
  std::mt19937_64 rng(43);
  const Q6KProblem p = MakeQ6K(37, 1001, 301, rng);
  ExpectInvariant(p, [&](const std::vector<float>& x, int rows) { return RunQ6KDot(p, x, rows); });
}

TEST_P(Int8PathTest, Q4KIsBatchAndThreadInvariant) {
  std::mt19937_64 rng(22);
  const Q4KProblem p = MakeQ4K(37, 1001, 301, rng);
  ExpectInvariant(p, [&](const std::vector<float>& x, int rows) { return RunQ4KDot(p, x, rows); });
}

TEST_P(Int8PathTest, Q5KIsBatchAndThreadInvariant) {
  std::mt19937_64 rng(49);
  const Q5KProblem p = MakeQ5K(37, 1001, 301, rng);
  ExpectInvariant(p, [&](const std::vector<float>& x, int rows) { return RunQ5KDot(p, x, rows); });
}

TEST_P(Int8PathTest, Q32IsBatchAndThreadInvariant) {
  std::mt19937_64 rng(55);
  for (cpu::Q32Type type : kQ32Types) {
    const Q32Problem p = MakeQ32(type, 37, 1001, 301, rng);
    ExpectInvariant(p, [&](const std::vector<float>& x, int rows) { return RunQ32Dot(p, x, rows); });
    if (HasFatalFailure()) return;
  }
}

TEST(CpuDotTest, Q32WideningIsBatchAndThreadInvariant) {
  std::mt19937_64 rng(56);
  for (cpu::Q32Type type : kQ32Types) {
    const Q32Problem p = MakeQ32(type, 37, 1001, 301, rng, /*pack=*/false);
    ExpectInvariant(p, [&](const std::vector<float>& x, int rows) { return RunQ32Widening(p, x, rows); });
    if (HasFatalFailure()) return;
  }
}

TEST_P(Int8PathTest, Q8IsBatchAndThreadInvariant) {
  std::mt19937_64 rng(15);
  const Q8Problem p = MakeQ8(37, 1001, 301, rng);
  ExpectInvariant(p, [&](const std::vector<float>& x, int rows) { return RunQ8Dot(p, x, rows); });
}

// Several products of the same x in one call (MatMulNT*Dots: q, k and v of a decode step) give each
// product the bits of its own call, whatever the rows, the thread count or the products beside it:
// outputs of 301, 17, 64 and 1 columns (groups split over the threads with the others', and past the
// last group), and a small call that stays on the calling thread.
template <typename Problem, typename One, typename Many>
void ExpectSeveralAreEachOnes(const std::vector<Problem>& problems, const One& one, const Many& many) {
  ThreadsGuard guard;
  const Problem& first = problems.front();
  for (int threads : {1, 2, 3}) {
    cpu::SetComputeThreads(threads);
    for (int rows : {1, 3, 16, 37}) {
      const std::vector<float> x(first.x.begin(), first.x.begin() + size_t(rows) * first.in);
      std::vector<std::vector<float>> ys;
      std::vector<cpu::DotProduct> products;
      for (const Problem& p : problems) ys.emplace_back(size_t(rows) * p.out, NAN);
      for (size_t i = 0; i < problems.size(); ++i) products.push_back({problems[i].packed.data(), problems[i].out, ys[i].data()});
      many(x.data(), rows, first.in, products.data(), int(products.size()));
      for (size_t i = 0; i < problems.size(); ++i) {
        const std::vector<float> want = one(problems[i], x, rows);
        ASSERT_EQ(std::memcmp(ys[i].data(), want.data(), sizeof(float) * want.size()), 0)
            << "product " << i << " of " << problems.size() << ", " << rows << " rows, " << threads << " threads";
      }
    }
  }
  // Below the pool's threshold: each product on the calling thread, in turn.
  std::vector<float> y0(size_t(first.out), NAN), y1(size_t(problems.back().out), NAN);
  const cpu::DotProduct two[] = {{first.packed.data(), first.out, y0.data()},
                                 {problems.back().packed.data(), problems.back().out, y1.data()}};
  const std::vector<float> x(first.x.begin(), first.x.begin() + first.in);
  many(x.data(), 1, first.in, two, 2);
  EXPECT_EQ(y0, one(first, x, 1));
  EXPECT_EQ(y1, one(problems.back(), x, 1));
}

const int kSeveralOuts[] = {301, 17, 64, 1};

TEST_P(Int8PathTest, SeveralProductsInOneCallGiveEachOnesBits) {
  std::mt19937_64 rng(31);
  std::vector<Q8Problem> q8;
  std::vector<Q4Problem> q4;
  std::vector<Q4KProblem> q4k;
  std::vector<Q5KProblem> q5k;
  std::vector<Q6KProblem> q6k;
  for (int out : kSeveralOuts) {
    q8.push_back(MakeQ8(37, 1001, out, rng));
    q4.push_back(MakeQ4(37, 1001, out, rng));
    q4k.push_back(MakeQ4K(37, 1001, out, rng));
    q5k.push_back(MakeQ5K(37, 1001, out, rng));
    q6k.push_back(MakeQ6K(37, 1001, out, rng));
  }
  ExpectSeveralAreEachOnes(q8, RunQ8Dot, cpu::MatMulNTQ8Dots);
  ExpectSeveralAreEachOnes(q4, RunQ4Dot, cpu::MatMulNTQ4Dots);
  ExpectSeveralAreEachOnes(q4k, RunQ4KDot, cpu::MatMulNTQ4KDots);
  ExpectSeveralAreEachOnes(q5k, RunQ5KDot, cpu::MatMulNTQ5KDots);
  for (cpu::Q32Type type : kQ32Types) {
    std::vector<Q32Problem> q32;
    for (int out : kSeveralOuts) q32.push_back(MakeQ32(type, 37, 1001, out, rng));
    ExpectSeveralAreEachOnes(q32, RunQ32Dot, [type](const float* x, int rows, int in, const cpu::DotProduct* products, int count) {
      cpu::MatMulNTQ32Dots(type, x, rows, in, products, count);
    });
  }
  ExpectSeveralAreEachOnes(q6k, RunQ6KDot, cpu::MatMulNTQ6KDots);
}

TEST_P(Bf16PathTest, SeveralProductsInOneCallGiveEachOnesBits) {
  std::mt19937_64 rng(32);
  std::vector<Bf16Problem> problems;
  for (int out : kSeveralOuts) problems.push_back(MakeBf16(37, 1001, out, rng));
  ExpectSeveralAreEachOnes(problems, RunBf16Dot, cpu::MatMulNTBf16Dots);
}

TEST_F(F16DotTest, SeveralProductsInOneCallGiveEachOnesBits) {
  std::mt19937_64 rng(33);
  std::vector<F16Problem> problems;
  for (int out : kSeveralOuts) problems.push_back(MakeF16(37, 1001, out, rng));
  ExpectSeveralAreEachOnes(problems, RunF16Dot, cpu::MatMulNTF16Dots);
}

// Blocks at the ends of the ranges, where VPMADDUBSW used naively saturates its int16 pairs: weights
// of 127, -128 (a GGUF file may hold it) and -127, with activations quantized to +-127 (x of +-1: a
// block's scale 1/127). On the weights + 128 a pair would reach 2 * 255 * 127; with x's sign moved
// onto the weights, a weight of -128 against a negative x would wrap. The int32 sums must be exact:
// each y is then the fp32 arithmetic of the kernels on the integer sums, replayed here (per block,
// y = fma(float(sum), scale_w * scale_x, y)), equal bit for bit.
TEST_P(Int8PathTest, Q8SumsAreExactWhereNaivePairsSaturate) {
  constexpr int in = 96, out = 9, rows = 4;
  const int8_t patterns[out][3] = {{127, 127, 127},   {-128, -128, -128}, {-127, -127, -127},
                                   {127, -128, 127},  {-128, 127, -127},  {-128, -127, 127},
                                   {0, -128, 0},      {127, 0, -128},     {-127, -128, 127}};
  Q8Problem p{rows, in, out, std::vector<float>(size_t(rows) * in), std::vector<int8_t>(size_t(out) * in),
              std::vector<float>(size_t(out) * 3), {}};
  for (int j = 0; j < out; ++j) {
    for (int k = 0; k < in; ++k) p.q[size_t(j) * in + k] = patterns[j][(k / 2 + j) % 3];  // pairs alike
    for (int b = 0; b < 3; ++b) p.scales[size_t(j) * 3 + b] = float(1 + b + j);  // exact in fp32
  }
  const float x_patterns[rows][2] = {{1, 1}, {-1, -1}, {1, -1}, {-1, 1}};
  for (int r = 0; r < rows; ++r) {
    for (int k = 0; k < in; ++k) p.x[size_t(r) * in + k] = x_patterns[r][(k / 2 + k / 32) % 2];
  }
  p.packed.assign(size_t(cpu::Q8DotPackedSize(out, in)), 0xff);
  cpu::PackQ8Dot(p.w(), out, in, p.packed.data());
  const std::vector<float> got = RunQ8Dot(p, p.x, rows);
  const float scale_x = 1.0f / 127.0f;
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < out; ++j) {
      float want = 0;
      for (int b = 0; b < 3; ++b) {
        int32_t sum = 0;
        for (int k = 32 * b; k < 32 * b + 32; ++k) sum += int32_t(std::lrint(p.x[size_t(r) * in + k] * 127)) * p.q[size_t(j) * in + k];
        want = std::fma(float(sum), p.scales[size_t(j) * 3 + b] * scale_x, want);
      }
      ASSERT_EQ(got[size_t(r) * out + j], want) << "row " << r << " col " << j;
    }
  }
}

// The results of Int8PathsGiveTheSameBits as raw floats, to compare machines.
void WriteFloats(const char* path, const std::vector<float>& v) {
  std::FILE* f = std::fopen(path, "wb");
  ASSERT_NE(f, nullptr) << path;
  const size_t written = std::fwrite(v.data(), sizeof(float), v.size(), f);
  ASSERT_EQ(std::fclose(f), 0) << path;
  ASSERT_EQ(written, v.size()) << path;
}
std::vector<float> ReadFloats(const char* path) {
  std::vector<float> v;
  std::FILE* f = std::fopen(path, "rb");
  if (f == nullptr) return v;
  float x;
  while (std::fread(&x, sizeof(float), 1, f) == 1) v.push_back(x);
  std::fclose(f);
  return v;
}

// Every path gives the same bits as the widest one, for every int8 format, at every shape. Across
// machines too (tests/cli/arm64_kernels.sh): with STEADY_INT8_RESULTS_OUT=FILE the widest path's
// results are written there, with STEADY_INT8_RESULTS_IN=FILE they must equal that file's bit for
// bit (x86-64's AVX-512 or AVX2 against AArch64's SDOT on the same inputs).
TEST(CpuDotTest, Int8PathsGiveTheSameBits) {
  const cpu::Int8Path widest = cpu::WidestInt8Path();
  if (widest == cpu::Int8Path::kNone) GTEST_SKIP() << Missing(cpu::Int8Path::kAvx2);
  int compared = 0;
  std::vector<float> all;  // every shape's results on the widest path, in order
  std::mt19937_64 rng(23);
  for (int rows : kRows) {
    for (int in : kIns) {
      for (int out : kOuts) {
        const Q8Problem q8 = MakeQ8(rows, in, out, rng);
        const Q4Problem q4 = MakeQ4(rows, in, out, rng);
        const Q4KProblem q4k = MakeQ4K(rows, in, out, rng);
        const Q5KProblem q5k = MakeQ5K(rows, in, out, rng);
        const Q6KProblem q6k = MakeQ6K(rows, in, out, rng);
        const Q32Problem q4_1 = MakeQ32(cpu::Q32Type::kQ4_1, rows, in, out, rng);
        const Q32Problem q5_0 = MakeQ32(cpu::Q32Type::kQ5_0, rows, in, out, rng);
        const Q32Problem q5_1 = MakeQ32(cpu::Q32Type::kQ5_1, rows, in, out, rng);
        const auto run_all = [&] {
          return std::vector<std::vector<float>>{RunQ8Dot(q8, q8.x, rows),       RunQ4Dot(q4, q4.x, rows),
                                                 RunQ4KDot(q4k, q4k.x, rows),    RunQ5KDot(q5k, q5k.x, rows),
                                                 RunQ6KDot(q6k, q6k.x, rows),    RunQ32Dot(q4_1, q4_1.x, rows),
                                                 RunQ32Dot(q5_0, q5_0.x, rows), RunQ32Dot(q5_1, q5_1.x, rows)};
        };
        const std::vector<std::vector<float>> want = run_all();
        for (const std::vector<float>& w : want) all.insert(all.end(), w.begin(), w.end());
        for (cpu::Int8Path path : kInt8Paths) {
          if (path == widest || !UsePath(path)) {
            WidestPathAgain();
            continue;
          }
          cpu::SetInt8Path(path);
          const std::string name = cpu::Int8PathName(path);
          const std::vector<std::vector<float>> got = run_all();
          WidestPathAgain();
          ++compared;
          for (size_t f = 0; f < got.size(); ++f) {
            for (size_t i = 0; i < got[f].size(); ++i) {
              ASSERT_EQ(got[f][i], want[f][i]) << name << " format " << f << " rows " << rows << " in "
                                               << in << " out " << out << " at " << i;
            }
          }
        }
      }
    }
  }
  std::printf("int8 results: %zu values on %s\n", all.size(), cpu::Int8PathName(widest));
  if (const char* out = std::getenv("STEADY_INT8_RESULTS_OUT")) WriteFloats(out, all);
  if (const char* in = std::getenv("STEADY_INT8_RESULTS_IN")) {
    const std::vector<float> other = ReadFloats(in);
    ASSERT_EQ(other.size(), all.size()) << "results in " << in;
    for (size_t i = 0; i < all.size(); ++i) {
      ASSERT_EQ(std::memcmp(&all[i], &other[i], sizeof(float)), 0)
          << "value " << i << ": " << all[i] << " here, " << other[i] << " in " << in;
    }
    std::printf("int8 results equal %s's bit for bit\n", in);
    return;
  }
  if (compared == 0) GTEST_SKIP() << "one int8 path on this CPU: nothing to compare";
}

}  // namespace
}  // namespace steady
