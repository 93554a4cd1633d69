// The CPU backend's choice of the dot-product kernels (kernels/cpu/matmul_dot.h): --cpu-gemm auto
// packs bf16, q8, q4 and q4k matrices for them and names the extension, avxvnni and avx2 force a
// 256-bit int8 path (the same logits bit for bit), simd keeps the widening kernels; their logits
// against the fp32 weights'. The kernels themselves: cpu_dot_test.cc. Where the CPU lacks the
// instructions these tests skip naming them.
#include <cmath>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/amx.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_dot.h"
#include "kernels/cpu/q4k.h"
#include "model/backend/backend.h"
#include "model/decoder/cpu_weights.h"
#include "model/decoder/model.h"
#include "tests/testutil.h"

namespace steady {
namespace {

constexpr char kNoInt8Path[] = "no int8 path (AVX2 + FMA + F16C at least) on this CPU";

// The logits of one step of two sessions (12 and 3 prompt tokens) through the CPU backend; `name`
// gets the backend's name.
// With `path`, the int8 kernels take it once the backend is made (which sets --cpu-gemm's path).
std::vector<double> BackendStep(const Model& m, CpuWeights weights, CpuGemm gemm, std::string* name,
                                std::optional<cpu::Int8Path> path = std::nullopt) {
  BackendOptions o;
  o.slots = 2;
  o.cpu_weights = weights;
  o.cpu_gemm = gemm;
  auto backend = MakeBackend(m, "cpu", o);
  EXPECT_TRUE(backend.ok()) << backend.status();
  if (!backend.ok()) return {};
  *name = (*backend)->Name();
  if (path) cpu::SetInt8Path(*path);
  std::vector<float> logits;
  (*backend)->Forward({{0, std::vector<int32_t>(12, 9), false}, {1, {4, 5, 6}, false}}, &logits);
  return std::vector<double>(logits.begin(), logits.end());
}

// Through the backend, each path forced by --cpu-gemm: auto packs bf16 and q8 matrices for the dot
// kernels (and says so in its name), simd keeps the widening kernels on the same stored weights. Both
// steps' logits are close to the fp32 weights' (the rounding of weights and activations moves them a
// little), and the dot step's differ from the widening one's (the packed matrices were read).
// `dot_gemm` is the --cpu-gemm that takes them (auto, or avx512vnni for bf16 where auto takes AMX).
void ExpectBackendTakesTheDotKernels(CpuWeights weights, const std::string& dot_name, const std::string& simd_name,
                                     WeightType packed_type, CpuGemm dot_gemm = CpuGemm::kAuto) {
  const Model m = testing::TinyModel("taylor", nlohmann::json::object(), 31);
  std::string dot_got, simd_got, f32_got;
  const std::vector<double> dot = BackendStep(m, weights, dot_gemm, &dot_got);
  const std::vector<double> simd = BackendStep(m, weights, CpuGemm::kSimd, &simd_got);
  const std::vector<double> f32 = BackendStep(m, CpuWeights::kF32, CpuGemm::kSimd, &f32_got);
  EXPECT_EQ(dot_got, dot_name);
  EXPECT_EQ(simd_got, simd_name);
  ASSERT_EQ(dot.size(), f32.size());
  ASSERT_EQ(simd.size(), f32.size());
  EXPECT_GT(testing::MaxRelError(dot, simd), 0.0) << "the packed matrices were not read";
  const double dot_err = testing::MaxRelError(dot, f32), simd_err = testing::MaxRelError(simd, f32);
  EXPECT_LT(dot_err, 0.05) << "against the fp32 weights' logits (the widening kernel: " << simd_err << ")";
  EXPECT_LT(simd_err, 0.05);
  // The packed copies replace the row-major ones.
  const CpuMatrices packed = CpuMatrices::From(m, weights, /*amx=*/false, /*dot=*/true);
  for (const CpuMatrices::Layer& l : packed.layers) {
    for (const WeightMatrix* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      EXPECT_EQ(w->type(), packed_type);
    }
  }
  EXPECT_EQ(packed.lm_head.type(), packed_type);
  EXPECT_GE(packed.Bytes(), CpuMatrices::From(m, weights).Bytes());
}

// The widest bf16 kernel the CPU has: VDPBF16PS ("AVX512_BF16"), AVX2's FMAs ("AVX2") or Arm's
// BFMMLA and BFDOT ("BF16"). Where the CPU has AMX, auto puts bf16 on the tiles (cpu_amx_test) and
// avx512vnni on VDPBF16PS.
TEST(CpuDotBackendTest, TheBackendTakesTheBf16KernelForBf16UnlessTold) {
  if (cpu::WidestBf16Path() == cpu::Bf16Path::kNone) GTEST_SKIP() << "no bf16 kernel (AVX2 + FMA at least) on this CPU";
  const std::string name = std::string("cpu (bf16 weights on ") + cpu::Bf16PathExtension(cpu::WidestBf16Path()) + ")";
  const CpuGemm gemm = cpu::AmxAvailable() ? CpuGemm::kAvx512Vnni : CpuGemm::kAuto;
  ExpectBackendTakesTheDotKernels(CpuWeights::kBf16, name, "cpu (bf16 weights)", WeightType::kDotBf16, gemm);
}

// --cpu-gemm avx2 and avxvnni put bf16 on AVX2's FMAs even where the CPU has VDPBF16PS (the name says
// so), avx512vnni and auto on the widest; simd on none (the widening kernel). Their logits: AVX2's within bf16 rounding of
// the widest path's (the same bits where the CPU's VDPBF16PS adds as its definition says and nothing
// is subnormal; cpu_dot_test compares the kernels), the paths' own settings reported by CpuGemmPaths.
TEST(CpuDotBackendTest, TheBackendForcesABf16Path) {
  if (!cpu::Bf16PathAvailable(cpu::Bf16Path::kAvx2)) GTEST_SKIP() << "no AVX2 and FMA on this CPU";
  EXPECT_EQ(Bf16PathFor(CpuGemm::kAvx512Vnni), cpu::WidestBf16Path());
  const Model m = testing::TinyModel("taylor", nlohmann::json::object(), 31);
  std::string widest_name;
  const CpuGemm widest_gemm = cpu::AmxAvailable() ? CpuGemm::kAvx512Vnni : CpuGemm::kAuto;
  const std::vector<double> widest = BackendStep(m, CpuWeights::kBf16, widest_gemm, &widest_name);
  EXPECT_EQ(cpu::CurrentBf16Path(), cpu::WidestBf16Path());
  for (CpuGemm gemm : {CpuGemm::kAvx2, CpuGemm::kAvxVnni}) {
    EXPECT_EQ(Bf16PathFor(gemm), cpu::Bf16Path::kAvx2);
    if (!CpuGemmAvailable(gemm).ok()) {
      std::printf("skipped --cpu-gemm %s: %s\n", CpuGemmName(gemm).c_str(), CpuGemmAvailable(gemm).ToString().c_str());
      continue;
    }
    std::string name;
    const std::vector<double> forced = BackendStep(m, CpuWeights::kBf16, gemm, &name);
    EXPECT_EQ(cpu::CurrentBf16Path(), cpu::Bf16Path::kAvx2);
    EXPECT_EQ(name, "cpu (bf16 weights on AVX2)");
    for (const auto& [format, path] : CpuGemmPaths(gemm, CpuWeights::kBf16)) {
      if (format == "bf16") EXPECT_EQ(path, "avx2 (FMA on bf16 pairs)");
    }
    ASSERT_EQ(forced.size(), widest.size());
    EXPECT_LT(testing::MaxRelError(forced, widest), 0.05) << CpuGemmName(gemm);
    if (cpu::WidestBf16Path() == cpu::Bf16Path::kAvx2) EXPECT_EQ(forced, widest) << "the same kernel";
  }
  std::string simd_name;
  BackendStep(m, CpuWeights::kBf16, CpuGemm::kSimd, &simd_name);
  EXPECT_EQ(simd_name, "cpu (bf16 weights)");
  for (const auto& [format, path] : CpuGemmPaths(CpuGemm::kSimd, CpuWeights::kBf16)) {
    if (format == "bf16") EXPECT_EQ(path.find("widening"), 0u) << path;
  }
  EXPECT_EQ(cpu::CurrentBf16Path(), cpu::WidestBf16Path());
}

// Only auto puts bf16 on AMX tiles: every other --cpu-gemm value's paths say so on any CPU (an AMX
// one checks the AMX wording), and auto's bf16 path names the tiles exactly where the CPU has them.
TEST(CpuDotBackendTest, OnlyAutoPutsBf16OnAmxTiles) {
  for (const char* name : {"auto", "simd", "openblas", "avx512vnni", "avxvnni", "avx2", "armdot"}) {
    auto gemm = ParseCpuGemm(name);
    ASSERT_TRUE(gemm.ok()) << gemm.status();
    EXPECT_EQ(UsesAmxTiles(*gemm), *gemm == CpuGemm::kAuto) << name;
    for (const CpuWeights weights : {CpuWeights::kAuto, CpuWeights::kBf16}) {
      std::string bf16;
      for (const auto& [format, path] : CpuGemmPaths(*gemm, weights)) {
        if (format == "bf16") bf16 = path;
      }
      const bool tiles = bf16.find("amx") != std::string::npos;
      EXPECT_EQ(tiles, *gemm == CpuGemm::kAuto && cpu::AmxAvailable()) << name << ": " << bf16;
    }
  }
}

// A checkpoint saved in bf16, read as stored: --cpu-weights auto packs its matrices for the widest bf16 kernel (as
// for AMX where the CPU has it) and says so; stored keeps the widening kernel, whose logits are
// --cpu-weights bf16 --cpu-gemm simd's bit for bit (the same numbers, the same arithmetic); auto's
// stay close to them but differ (the packed matrices were read, the activations rounded to bf16).
TEST(CpuDotBackendTest, AutoPutsACheckpointsOwnBf16OnTheBf16Kernel) {
  if (cpu::WidestBf16Path() == cpu::Bf16Path::kNone) GTEST_SKIP() << "no bf16 kernel (AVX2 + FMA at least) on this CPU";
  if (cpu::AmxAvailable()) GTEST_SKIP() << "this CPU has AMX: bf16 goes on the tiles (cpu_amx_test)";
  const Model original = testing::TinyModel("taylor", nlohmann::json::object(), 33);
  const std::string dir = testing::MakeTempDir("bf16_checkpoint");
  ASSERT_TRUE(original.Save(dir, DType::kBF16).ok());
  auto m = Model::Load(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  std::string auto_name, stored_name, simd_name;
  const std::vector<double> fast = BackendStep(*m, CpuWeights::kAuto, CpuGemm::kAuto, &auto_name);
  const std::vector<double> stored = BackendStep(*m, CpuWeights::kStored, CpuGemm::kAuto, &stored_name);
  const std::vector<double> simd = BackendStep(*m, CpuWeights::kBf16, CpuGemm::kSimd, &simd_name);
  EXPECT_EQ(auto_name, std::string("cpu (bf16 weights on ") + cpu::Bf16PathExtension(cpu::WidestBf16Path()) + ")");
  EXPECT_EQ(stored_name, "cpu (bf16 weights)");
  EXPECT_EQ(stored, simd);
  ASSERT_EQ(fast.size(), stored.size());
  EXPECT_GT(testing::MaxRelError(fast, stored), 0.0) << "the packed matrices were not read";
  EXPECT_LT(testing::MaxRelError(fast, stored), 0.05);
}

// A checkpoint saved in f16, read as stored: --cpu-weights auto packs its matrices for the f16 kernel
// where the bf16 ones take AVX2's FMAs (on this CPU by default, or with --cpu-gemm avx2) and says so,
// else keeps the widening kernel; stored and simd keep the widening kernel everywhere. The f16
// kernel's logits are within fp32 rounding of the widening kernel's (the same products, summed in
// another order; the activations stay fp32).
TEST(CpuDotBackendTest, AutoPutsACheckpointsOwnF16OnTheF16Kernel) {
  const Model original = testing::TinyModel("taylor", nlohmann::json::object(), 34);
  const std::string dir = testing::MakeTempDir("f16_checkpoint");
  ASSERT_TRUE(original.Save(dir, DType::kF16).ok());
  auto m = Model::Load(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_TRUE(CpuMatrices::From(*m, CpuWeights::kStored).Has(WeightType::kF16));
  std::string stored_name, simd_name;
  const std::vector<double> stored = BackendStep(*m, CpuWeights::kStored, CpuGemm::kAuto, &stored_name);
  BackendStep(*m, CpuWeights::kAuto, CpuGemm::kSimd, &simd_name);
  EXPECT_EQ(stored_name, "cpu (f16 weights)");
  EXPECT_EQ(simd_name, "cpu (f16 weights)");
  int packed = 0;
  for (const CpuGemm gemm : {CpuGemm::kAuto, CpuGemm::kAvx2}) {
    if (!CpuGemmAvailable(gemm).ok()) continue;
    const bool f16 = cpu::F16DotRunsOn(Bf16PathFor(gemm));
    std::string name;
    const std::vector<double> fast = BackendStep(*m, CpuWeights::kAuto, gemm, &name);
    EXPECT_EQ(name, f16 ? "cpu (f16 weights on F16C)" : "cpu (f16 weights)") << CpuGemmName(gemm);
    for (const auto& [format, path] : CpuGemmPaths(gemm, CpuWeights::kAuto)) {
      if (format == "f16") EXPECT_EQ(path, cpu::F16DotPathName(Bf16PathFor(gemm))) << CpuGemmName(gemm);
    }
    ASSERT_EQ(fast.size(), stored.size());
    EXPECT_LT(testing::MaxRelError(fast, stored), 1e-4) << CpuGemmName(gemm);
    if (!f16) continue;
    ++packed;
    const CpuMatrices read = CpuMatrices::From(*m, CpuWeights::kAuto, /*amx=*/false, /*dot=*/true);
    EXPECT_EQ(read.lm_head.type(), WeightType::kDotF16);
    for (const CpuMatrices::Layer& l : read.layers) {
      for (const WeightMatrix* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
        EXPECT_EQ(w->type(), WeightType::kDotF16);
      }
    }
    EXPECT_EQ(read.Kernels(), "F16C");
  }
  cpu::SetBf16Path(cpu::WidestBf16Path());
  if (packed == 0) GTEST_SKIP() << "no f16 kernel (AVX2, FMA and F16C where bf16 takes AVX2's FMAs) on this CPU";
}

// The widest int8 path's extension, as the backend's name says it ("AVX512_VNNI" here).
std::string WidestInt8() { return cpu::Int8PathExtension(cpu::WidestInt8Path()); }

TEST(CpuDotBackendTest, TheBackendTakesTheInt8KernelsForQ8UnlessTold) {
  if (!cpu::Int8DotAvailable()) GTEST_SKIP() << kNoInt8Path;
  ExpectBackendTakesTheDotKernels(CpuWeights::kQ8, "cpu (q8 weights on " + WidestInt8() + ")", "cpu (q8 weights)",
                                  WeightType::kDotQ8);
}

// --cpu-gemm avx512vnni, avxvnni, avx2 and armdot put q8, q4 and q4k on that path (the name says so) and give
// the logits of auto's path bit for bit; the widest path again afterwards. A path this CPU lacks is
// refused.
TEST(CpuDotBackendTest, TheBackendForcesAnInt8Path) {
  const Model m = testing::TinyModel("taylor", nlohmann::json::object(), 31);
  int compared = 0;
  for (const auto& [gemm, path] : {std::pair{CpuGemm::kAvx512Vnni, cpu::Int8Path::kAvx512Vnni},
                                   std::pair{CpuGemm::kAvxVnni, cpu::Int8Path::kAvxVnni}, std::pair{CpuGemm::kAvx2, cpu::Int8Path::kAvx2},
                                   std::pair{CpuGemm::kArmDot, cpu::Int8Path::kArmDot}}) {
    if (!cpu::Int8PathAvailable(path)) {
      std::printf("skipped --cpu-gemm %s: this CPU lacks %s\n", CpuGemmName(gemm).c_str(), cpu::Int8PathExtension(path));
      EXPECT_FALSE(CpuGemmAvailable(gemm).ok());
      continue;
    }
    EXPECT_TRUE(CpuGemmAvailable(gemm).ok());
    for (CpuWeights weights : {CpuWeights::kQ8, CpuWeights::kQ4, CpuWeights::kQ4K}) {
      std::string auto_name, forced_name;
      const std::vector<double> forced = BackendStep(m, weights, gemm, &forced_name);
      EXPECT_EQ(cpu::CurrentInt8Path(), path);
      const std::vector<double> widest = BackendStep(m, weights, CpuGemm::kAuto, &auto_name);
      EXPECT_EQ(cpu::CurrentInt8Path(), cpu::WidestInt8Path());
      const std::string format = CpuWeightsName(weights);
      EXPECT_EQ(forced_name, "cpu (" + format + " weights on " + cpu::Int8PathExtension(path) + ")");
      EXPECT_EQ(auto_name, "cpu (" + format + " weights on " + WidestInt8() + ")");
      EXPECT_EQ(forced, widest) << format << " on " << cpu::Int8PathName(path);
      ++compared;
    }
  }
  if (compared == 0) GTEST_SKIP() << "no second int8 path on this CPU";
}

// A whole step (a 12-token and a 3-token prompt, every projection and the head) on the AMX-INT8
// kernels gives VPDPBUSD's logits bit for bit, for q8, q4 and q4k: on the tiles where the CPU has
// AMX-INT8, else on the tile model (cpu::SetAmxInt8TileModel).
TEST(CpuDotBackendTest, AmxInt8GivesVpdpbusdsLogits) {
  if (!cpu::Int8PathAvailable(cpu::Int8Path::kAvx512Vnni)) GTEST_SKIP() << "no AVX512_VNNI on this CPU";
  const bool model = !cpu::Int8PathAvailable(cpu::Int8Path::kAmxInt8);
  const Model m = testing::TinyModel("taylor", nlohmann::json::object(), 31);
  for (CpuWeights weights : {CpuWeights::kQ8, CpuWeights::kQ4, CpuWeights::kQ4K}) {
    std::string vnni_name, amx_name;
    const std::vector<double> vnni = BackendStep(m, weights, CpuGemm::kAvx512Vnni, &vnni_name);
    cpu::SetAmxInt8TileModel(model);
    const std::vector<double> amx = BackendStep(m, weights, CpuGemm::kAuto, &amx_name, cpu::Int8Path::kAmxInt8);
    cpu::SetAmxInt8TileModel(false);
    cpu::SetInt8Path(cpu::WidestInt8Path());
    ASSERT_FALSE(vnni.empty());
    EXPECT_EQ(amx, vnni) << CpuWeightsName(weights) << (model ? " on the tile model" : " on AMX tiles");
  }
}

// --cpu-weights q4 packs every matrix as q4 (about 4.5 bits a weight), names VNNI, and its logits
// stay near the fp32 weights' (q4 moves them more than q8 does).
TEST(CpuDotBackendTest, TheBackendServesQ4) {
  if (!cpu::Int8DotAvailable()) GTEST_SKIP() << kNoInt8Path;
  const Model m = testing::TinyModel("taylor", nlohmann::json::object(), 31);
  std::string q4_name, q8_name, f32_name;
  const std::vector<double> q4 = BackendStep(m, CpuWeights::kQ4, CpuGemm::kAuto, &q4_name);
  const std::vector<double> q8 = BackendStep(m, CpuWeights::kQ8, CpuGemm::kAuto, &q8_name);
  const std::vector<double> f32 = BackendStep(m, CpuWeights::kF32, CpuGemm::kAuto, &f32_name);
  EXPECT_EQ(q4_name, "cpu (q4 weights on " + WidestInt8() + ")");
  const double q4_err = testing::MaxRelError(q4, f32), q8_err = testing::MaxRelError(q8, f32);
  EXPECT_GT(q4_err, q8_err) << "4 bits should cost more than 8";
  // Random weights are q4's worst case (no outliers to spend the steps on): 0.29 of the spread here.
  EXPECT_LT(q4_err, 0.5) << "against the fp32 weights' logits (q8: " << q8_err << ")";
  std::printf("max error of the logits against fp32 weights', of their spread: q4 %.3f, q8 %.3f\n", q4_err, q8_err);
  const CpuMatrices q4_matrices = CpuMatrices::From(m, CpuWeights::kQ4, /*amx=*/false, /*dot=*/true);
  EXPECT_EQ(q4_matrices.TypeNames(), "q4");
  EXPECT_EQ(q4_matrices.layers[0].wq.type(), WeightType::kDotQ4);
  EXPECT_LT(q4_matrices.Bytes(), CpuMatrices::From(m, CpuWeights::kQ8).Bytes() * 0.6);
  // The packed matrix reads back (RowsToFloat) as the kernel multiplies it.
  const WeightMatrix& w = q4_matrices.layers[0].wq;
  std::mt19937_64 rng(3);
  const std::vector<float> x = testing::RandomNormal<float>(size_t(w.cols()), rng);
  std::vector<float> got(size_t(w.rows())), want(size_t(w.rows()));
  MatMul(x.data(), 1, w, got.data());
  cpu::MatMulNTQ8ActivationsReference(x.data(), 1, int(w.cols()), w.ToFloat().data(), int(w.rows()), want.data());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << i;
  // With --cpu-gemm simd (and on a CPU without an int8 path) q4 stays row-major for the widening
  // kernel: the same values, x not rounded.
  std::string simd_name;
  const std::vector<double> simd = BackendStep(m, CpuWeights::kQ4, CpuGemm::kSimd, &simd_name);
  EXPECT_EQ(simd_name, "cpu (q4 weights)");
  EXPECT_LT(testing::MaxRelError(simd, f32), 0.5);
  const CpuMatrices rows = CpuMatrices::From(m, CpuWeights::kQ4);
  const WeightMatrix& wr = rows.layers[0].wq;
  EXPECT_EQ(wr.type(), WeightType::kQ4);
  EXPECT_EQ(wr.ToFloat(), w.ToFloat()) << "the row-major and packed q4 hold the same values";
  MatMul(x.data(), 1, wr, got.data());
  cpu::MatMulNTReference(x.data(), 1, int(wr.cols()), wr.ToFloat().data(), int(wr.rows()), want.data());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << i;
}

// --cpu-weights q4k: VPDPBUSD where the CPU has it (auto), the widening kernel with --cpu-gemm simd
// (and on CPUs without VNNI); both near the fp32 weights' logits, closer than q4_0's (the sub-block
// scales and minimums), and the matrices 4.5 bits a weight (ggml's block_q4_K).
TEST(CpuDotBackendTest, TheBackendServesQ4K) {
  const Model m = testing::TinyModel("taylor", nlohmann::json::object(), 31);
  std::string dot_name, simd_name, f32_name, q4_name;
  const std::vector<double> dot = BackendStep(m, CpuWeights::kQ4K, CpuGemm::kAuto, &dot_name);
  const std::vector<double> simd = BackendStep(m, CpuWeights::kQ4K, CpuGemm::kSimd, &simd_name);
  const std::vector<double> f32 = BackendStep(m, CpuWeights::kF32, CpuGemm::kSimd, &f32_name);
  EXPECT_EQ(simd_name, "cpu (q4k weights)");
  const double simd_err = testing::MaxRelError(simd, f32);
  EXPECT_LT(simd_err, 0.5);
  const CpuMatrices q4k = CpuMatrices::From(m, CpuWeights::kQ4K);
  EXPECT_EQ(q4k.TypeNames(), "q4k");
  // 4.5 bits a weight at whole super-blocks; the tiny model's short rows pad to 256.
  EXPECT_EQ(cpu::Q4KBytes(2048, 2048) * 8, 4.5 * 2048 * 2048);
  EXPECT_EQ(q4k.layers[0].wq.Bytes(), cpu::Q4KBytes(q4k.layers[0].wq.rows(), q4k.layers[0].wq.cols()));
  // The widening path reads the row-major matrix as the reference product does.
  const WeightMatrix& w = q4k.layers[0].wq;
  ASSERT_EQ(w.type(), WeightType::kQ4K);
  std::mt19937_64 rng(3);
  const std::vector<float> x = testing::RandomNormal<float>(size_t(w.cols()), rng);
  std::vector<float> got(size_t(w.rows())), want(size_t(w.rows()));
  MatMul(x.data(), 1, w, got.data());
  cpu::MatMulNTQ4KReference(x.data(), 1, int(w.cols()), w.q4k(), int(w.rows()), want.data());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << i;
  if (!cpu::Int8DotAvailable()) GTEST_SKIP() << kNoInt8Path << ": the widening kernel only";
  EXPECT_EQ(dot_name, "cpu (q4k weights on " + WidestInt8() + ")");
  const std::vector<double> q4 = BackendStep(m, CpuWeights::kQ4, CpuGemm::kAuto, &q4_name);
  const double dot_err = testing::MaxRelError(dot, f32), q4_err = testing::MaxRelError(q4, f32);
  std::printf("max error of the logits against fp32 weights', of their spread: q4k %.3f (widening %.3f), q4 %.3f\n",
              dot_err, simd_err, q4_err);
  EXPECT_GT(testing::MaxRelError(dot, simd), 0.0) << "the packed matrices were not read";
  EXPECT_LT(dot_err, q4_err);
  const CpuMatrices packed = CpuMatrices::From(m, CpuWeights::kQ4K, /*amx=*/false, /*dot=*/true);
  EXPECT_EQ(packed.layers[0].w_down.type(), WeightType::kDotQ4K);
  EXPECT_EQ(packed.lm_head.type(), WeightType::kDotQ4K);
}

}  // namespace
}  // namespace steady
