// The CPU kernels against their plain references (kernels/cpu): the small-row GEMM against a
// double-precision dot product, its batch and thread invariance, and the thread pool itself. Nothing
// above kernels/cpu: the binary is also cross-built for AArch64 and run under qemu
// (tests/cli/arm64_kernels.sh). A forward step on those kernels: tests/model/decoder/cpu_forward_test.cc.
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <limits>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include "kernels/cpu/kv_attention.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/state_update.h"
#include "tests/random.h"

namespace steady {
namespace {

// Restores the default thread count when a test that changes it ends, also on failure.
struct ThreadsGuard {
  ~ThreadsGuard() { cpu::SetComputeThreads(0); }
};

// Runs fn once on every SIMD target this CPU has and the binary was built for (the kernels' AVX2 or
// SSE4 code as well as the widest), then restores the default choice.
template <typename Fn>
void ForEachTarget(const Fn& fn) {
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    fn();
  }
  hwy::SetSupportedTargetsForTest(0);
}

struct Problem {
  int rows, in, out;
  std::vector<float> x, w;
};

Problem MakeProblem(int rows, int in, int out, std::mt19937_64& rng) {
  return {rows, in, out, testing::RandomNormal<float>(size_t(rows) * in, rng),
          testing::RandomNormal<float>(size_t(out) * in, rng)};
}

std::vector<float> Multiply(const Problem& p, void (*fn)(const float*, int, int, const float*, int, float*)) {
  std::vector<float> y(size_t(p.rows) * p.out, NAN);
  fn(p.x.data(), p.rows, p.in, p.w.data(), p.out, y.data());
  return y;
}

// fp32 products summed in fp32 lanes: each element is within a few ulps of sum |x_k w_k| per term
// (the bound of a sum of `in` terms in any order is in * eps * sum |x_k w_k|; the lanes make it far
// tighter in practice, so `in` * eps is a safe, still failing-capable bound).
void ExpectClose(const Problem& p, const std::vector<float>& got, const std::vector<float>& want) {
  for (int r = 0; r < p.rows; ++r) {
    for (int j = 0; j < p.out; ++j) {
      double mag = 0;
      for (int k = 0; k < p.in; ++k) mag += std::abs(double(p.x[size_t(r) * p.in + k]) * p.w[size_t(j) * p.in + k]);
      const size_t i = size_t(r) * p.out + j;
      ASSERT_NEAR(got[i], want[i], 1e-30 + p.in * 1.2e-7 * mag)
          << "rows " << p.rows << " in " << p.in << " out " << p.out << " at (" << r << ", " << j << ")";
    }
  }
}

// On every SIMD target this CPU has (AVX2's and SSE4's 3-column tiles as well as AVX-512's 4).
TEST(CpuMatMulTest, SmallRowsMatchTheReferenceAtEveryShape) {
  std::mt19937_64 rng(testing::TestSeed());
  ForEachTarget([&] {
    for (int rows : {1, 2, 3, 4, 5, 7, 8, 13, 16, 31, 64}) {
      for (int in : {1, 7, 16, 33, 64, 257}) {
        for (int out : {1, 3, 5, 47, 48, 49, 130}) {
          const Problem p = MakeProblem(rows, in, out, rng);
          ExpectClose(p, Multiply(p, cpu::MatMulNTSmallRows), Multiply(p, cpu::MatMulNTReference));
        }
      }
    }
  });
}

TEST(CpuMatMulTest, MatMulNTMatchesTheReferenceOnBothSidesOfTheSmallRowLimit) {
  std::mt19937_64 rng(testing::TestSeed());
  for (int rows : {1, cpu::kSmallRowsMax, cpu::kSmallRowsMax + 1, 100}) {
    const Problem p = MakeProblem(rows, 96, 200, rng);
    ExpectClose(p, Multiply(p, cpu::MatMulNT), Multiply(p, cpu::MatMulNTReference));
  }
}

// A row's result is bit for bit the same alone, in any batch, at any position in it: a session's
// logits do not depend on which other sessions share its decode step.
TEST(CpuMatMulTest, ARowsResultDoesNotDependOnTheBatch) {
  std::mt19937_64 rng(testing::TestSeed());
  for (int in : {64, 100}) {
    const Problem batch = MakeProblem(cpu::kSmallRowsMax, in, 150, rng);
    const std::vector<float> all = Multiply(batch, cpu::MatMulNTSmallRows);
    std::vector<int> order(batch.rows);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    for (int n : {1, 3, 4, 9}) {
      Problem sub{n, in, batch.out, {}, batch.w};
      for (int i = 0; i < n; ++i) {
        sub.x.insert(sub.x.end(), batch.x.begin() + size_t(order[i]) * in, batch.x.begin() + size_t(order[i] + 1) * in);
      }
      const std::vector<float> got = Multiply(sub, cpu::MatMulNTSmallRows);
      for (int i = 0; i < n; ++i) {
        for (int j = 0; j < batch.out; ++j) {
          ASSERT_EQ(got[size_t(i) * batch.out + j], all[size_t(order[i]) * batch.out + j])
              << "row " << order[i] << " in a batch of " << n << ", column " << j;
        }
      }
    }
  }
}

// sliced_relu's projections of several tokens (a batch's rows scored at once): each vector's result
// is the same bits as MatVecF64 of that vector alone, at every count around the 4-vector tile, with
// one thread or two, on every SIMD target.
TEST(CpuMatMulTest, Fp64MatVecsGiveEachVectorMatVecF64sBits) {
  ForEachTarget([&] {
    ThreadsGuard restore;
    std::mt19937_64 rng(testing::TestSeed());
    for (int rows : {1, 7, 300}) {
      for (int in : {1, 5, 16, 33, 517}) {
        const std::vector<float> w = testing::RandomNormal<float>(size_t(rows) * in, rng);
        const std::vector<float> bias = testing::RandomNormal<float>(rows, rng);
        for (int n : {1, 3, 4, 5, 8, 11, 21, 37}) {
          const std::vector<double> x = testing::RandomNormal<double>(size_t(n) * in, rng);
          for (int threads : {1, 2}) {
            cpu::SetComputeThreads(threads);
            std::vector<double> all(size_t(n) * rows, NAN), one(rows, NAN);
            cpu::MatVecsF64(w.data(), rows, in, n, x.data(), bias.data(), all.data());
            for (int r = 0; r < n; ++r) {
              cpu::MatVecF64(w.data(), rows, in, x.data() + size_t(r) * in, bias.data(), one.data());
              for (int i = 0; i < rows; ++i) {
                ASSERT_EQ(all[size_t(r) * rows + i], one[i])
                    << "rows " << rows << " in " << in << " vector " << r << " of " << n << " row " << i;
              }
            }
          }
        }
      }
    }
  });
}

// y = x w with w input-major (the mechanisms' feature projections): against the double reference
// at shapes around every tile edge (rows 1-9 around the 4-row tile; columns around the vector and
// block widths, with partial vectors), and each row's result the same bits alone as in any batch, on
// every SIMD target.
TEST(CpuMatMulTest, MatMulNNMatchesTheReferenceAndARowsResultDoesNotDependOnTheBatch) {
  ForEachTarget([&] {
    std::mt19937_64 rng(testing::TestSeed());
    for (int rows : {1, 2, 3, 4, 5, 8, 9}) {
      for (int in : {1, 7, 64}) {
        for (int out : {1, 5, 15, 16, 17, 48, 63, 64, 65, 100, 256}) {
          // Problem's w is [out, in] for MatMulNT; here the same values stored input-major.
          const Problem p = MakeProblem(rows, in, out, rng);
          std::vector<float> wt(p.w.size());
          for (int j = 0; j < out; ++j) {
            for (int k = 0; k < in; ++k) wt[size_t(k) * out + j] = p.w[size_t(j) * in + k];
          }
          std::vector<float> got(size_t(rows) * out, NAN), want(got.size(), NAN);
          cpu::MatMulNN(p.x.data(), rows, in, wt.data(), out, got.data());
          cpu::MatMulNNReference(p.x.data(), rows, in, wt.data(), out, want.data());
          ExpectClose(p, got, want);
          for (int r = 0; r < rows; ++r) {
            std::vector<float> alone(out, NAN);
            cpu::MatMulNN(p.x.data() + size_t(r) * in, 1, in, wt.data(), out, alone.data());
            for (int j = 0; j < out; ++j) {
              ASSERT_EQ(alone[j], got[size_t(r) * out + j])
                  << "row " << r << " of " << rows << " in " << in << " out " << out << " column " << j;
            }
          }
        }
      }
    }
    // Nothing past the last row and column is written.
    std::vector<float> x(3 * 5, 1.0f), w(5 * 17, 1.0f), y(3 * 17 + 8, -7.0f);
    cpu::MatMulNN(x.data(), 3, 5, w.data(), 17, y.data());
    for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(y[i], i < 3 * 17 ? 5.0f : -7.0f) << i;
  });
}

// The fp64 MatMulNN (taylor's chunked prefill): every y[r, j] is one multiply-add per k in order
// from zero, fused where the target has FMA (AVX2, AVX3) and a multiply then an add where it has not
// (SSE4, SSSE3, scalar), so it equals that loop bit for bit, at shapes around the tile and vector
// edges (partial vectors) and with nothing written past the end, on every SIMD target.
TEST(CpuMatMulTest, Fp64MatMulNNIsMultiplyAddsInOrder) {
  ForEachTarget([&] {
    std::mt19937_64 rng(testing::TestSeed());
    std::normal_distribution<double> normal;
    int64_t fused_misses = 0, plain_misses = 0, values = 0;
    for (int rows : {1, 3, 4, 5, 9}) {
      for (int in : {1, 7, 64}) {
        for (int out : {1, 3, 7, 8, 9, 24, 25, 64, 65}) {
          std::vector<double> x(size_t(rows) * in), w(size_t(in) * out);
          for (double& e : x) e = normal(rng);
          for (double& e : w) e = normal(rng);
          std::vector<double> got(size_t(rows) * out + 5, -7.0);
          cpu::MatMulNNF64(x.data(), rows, in, w.data(), out, got.data());
          for (int r = 0; r < rows; ++r) {
            for (int j = 0; j < out; ++j) {
              double fused = 0, plain = 0;
              for (int k = 0; k < in; ++k) {
                const double a = x[size_t(r) * in + k], b = w[size_t(k) * out + j];
                fused = std::fma(a, b, fused);
                volatile double product = a * b;  // not contracted into an FMA by the compiler
                plain = plain + product;
              }
              fused_misses += got[size_t(r) * out + j] != fused;
              plain_misses += got[size_t(r) * out + j] != plain;
              ++values;
            }
          }
          for (size_t i = size_t(rows) * out; i < got.size(); ++i) EXPECT_EQ(got[i], -7.0);
        }
      }
    }
    EXPECT_TRUE(fused_misses == 0 || plain_misses == 0)
        << fused_misses << " of " << values << " differ from the fused loop, " << plain_misses << " from the plain one";
  });
}

// sliced_relu's fp64 projections: the SIMD matrix-vector product against the plain loop (within
// fp64 rounding of a sum in another order), and the same bits with one thread or two.
TEST(CpuMatMulTest, Fp64MatVecMatchesTheReference) {
  ThreadsGuard restore;
  std::mt19937_64 rng(testing::TestSeed());
  for (int rows : {1, 7, 64, 300}) {
    for (int in : {1, 5, 16, 33, 1000}) {
      const std::vector<float> w = testing::RandomNormal<float>(size_t(rows) * in, rng);
      const std::vector<float> bias = testing::RandomNormal<float>(rows, rng);
      const std::vector<double> x = testing::RandomNormal<double>(in, rng);
      std::vector<double> got(rows), want(rows), one(rows);
      cpu::SetComputeThreads(2);
      cpu::MatVecF64(w.data(), rows, in, x.data(), bias.data(), got.data());
      cpu::MatVecF64Reference(w.data(), rows, in, x.data(), bias.data(), want.data());
      cpu::SetComputeThreads(1);
      cpu::MatVecF64(w.data(), rows, in, x.data(), bias.data(), one.data());
      EXPECT_EQ(got, one) << "rows " << rows << " in " << in;
      for (int i = 0; i < rows; ++i) {
        double mag = std::abs(double(bias[i]));
        for (int k = 0; k < in; ++k) mag += std::abs(double(w[size_t(i) * in + k]) * x[k]);
        ASSERT_NEAR(got[i], want[i], in * 2.3e-16 * mag) << "rows " << rows << " in " << in << " row " << i;
      }
    }
  }
}

// The 16-bit weight formats the widening kernels read as stored: bf16 and IEEE half (f16 checkpoints).
using HalfKernel = void (*)(const float*, int, int, const uint16_t*, int, float*);
struct HalfFormat {
  const char* name;
  uint16_t (*round)(float);
  float (*widen)(uint16_t);
  HalfKernel kernel, reference;
};
const HalfFormat kHalfFormats[] = {
    {"bf16", cpu::FloatToBf16, cpu::Bf16ToFloat, cpu::MatMulNTBf16, cpu::MatMulNTBf16Reference},
    {"f16", cpu::FloatToF16, cpu::F16ToFloat, cpu::MatMulNTF16, cpu::MatMulNTF16Reference}};

// p's weights rounded to the format; p->w becomes the values as stored (for the error bound).
std::vector<uint16_t> RoundWeights(const HalfFormat& f, Problem* p) {
  std::vector<uint16_t> w16(p->w.size());
  for (size_t i = 0; i < w16.size(); ++i) {
    w16[i] = f.round(p->w[i]);
    p->w[i] = f.widen(w16[i]);
  }
  return w16;
}

// bf16 and f16 weights: the kernel against a double-precision product with the same stored weights,
// on every SIMD target (AVX2's and SSE4's 3-column tiles as well as AVX-512's 4), at any row count
// (prefill too) and column count around the tiles' edges, and each row's result independent of the
// batch.
TEST(CpuMatMulTest, SixteenBitWeightsMatchTheReferenceAndTheBatchOnEveryTarget) {
  std::mt19937_64 rng(testing::TestSeed());
  for (const HalfFormat& f : kHalfFormats) {
    SCOPED_TRACE(f.name);
    ForEachTarget([&] {
      for (int rows : {1, 2, 3, 4, 5, 16, 33, 100}) {
        for (int in : {1, 7, 64, 257}) {
          for (int out : {1, 3, 47, 48, 49, 97, 130}) {
            Problem p = MakeProblem(rows, in, out, rng);
            const std::vector<uint16_t> w16 = RoundWeights(f, &p);
            std::vector<float> got(size_t(rows) * out, NAN), want(got.size()), alone(out, NAN);
            f.kernel(p.x.data(), rows, in, w16.data(), out, got.data());
            f.reference(p.x.data(), rows, in, w16.data(), out, want.data());
            ExpectClose(p, got, want);
            const int r = rows - 1;
            f.kernel(p.x.data() + size_t(r) * in, 1, in, w16.data(), out, alone.data());
            ASSERT_EQ(0, std::memcmp(alone.data(), got.data() + size_t(r) * out, alone.size() * sizeof(float)))
                << "the last row alone differs from the same row in a batch of " << rows << " (in " << in << ", out "
                << out << ")";
          }
        }
      }
    });
  }
}

// q8_0 weights: quantization within half a step of each weight, the kernel against a double
// reference, and (up to 32 rows) bit for bit the fp32 kernel on the dequantized weights, on every
// SIMD target.
TEST(CpuMatMulTest, Q8WeightsQuantizeWithinHalfAStepAndMatchTheFp32Kernel) {
  std::mt19937_64 rng(testing::TestSeed());
  for (const auto [in, out] : {std::pair{5, 41}, {32, 41}, {64, 41}, {100, 41}, {257, 41}, {64, 1}, {100, 48}, {257, 130}}) {
    const int blocks = (in + cpu::kQ8Block - 1) / cpu::kQ8Block;
    std::vector<float> w = testing::RandomNormal<float>(size_t(out) * in, rng);
    w[3] = 0.0f;
    for (int k = 0; k < std::min(in, cpu::kQ8Block); ++k) w[size_t(out - 1) * in + k] = 0.0f;  // an all-zero block
    std::vector<int8_t> q(w.size());
    std::vector<float> scales(size_t(out) * blocks), dequantized(w.size());
    cpu::QuantizeQ8(w.data(), out, in, q.data(), scales.data());
    for (int j = 0; j < out; ++j) {
      for (int k = 0; k < in; ++k) {
        const size_t i = size_t(j) * in + k;
        const float scale = scales[size_t(j) * blocks + k / cpu::kQ8Block];
        dequantized[i] = float(q[i]) * scale;
        // Half a step, and three fp32 roundings of up to 127 steps (1 / scale, w * inv, q * scale): each
        // moves the weight by at most 127 * 2^-24 of a step. The bound 0.5 * (1 + 1e-5) steps failed on
        // a time-based seed (2026-11-28, under qemu: 1.3e-5 steps over half).
        ASSERT_LE(std::abs(dequantized[i] - w[i]), scale * (0.5f + 3 * 127 * 0x1p-24f) + 1e-30f) << "weight " << i;
        ASSERT_LE(std::abs(int(q[i])), 127);
      }
    }
    ForEachTarget([&] {
      for (int rows : {1, 4, 16, 32, 45}) {
        Problem p = MakeProblem(rows, in, out, rng);
        p.w = dequantized;
        std::vector<float> got(size_t(rows) * out), want(got.size()), fp32(got.size());
        cpu::MatMulNTQ8(p.x.data(), rows, in, {q.data(), scales.data()}, out, got.data());
        cpu::MatMulNTQ8Reference(p.x.data(), rows, in, {q.data(), scales.data()}, out, want.data());
        ExpectClose(p, got, want);
        if (rows <= cpu::kSmallRowsMax) {
          cpu::MatMulNTSmallRows(p.x.data(), rows, in, dequantized.data(), out, fp32.data());
          EXPECT_EQ(0, std::memcmp(got.data(), fp32.data(), got.size() * sizeof(float))) << rows << " x " << in;
        }
      }
    });
  }
}

TEST(CpuMatMulTest, Bf16RoundsToNearestEven) {
  EXPECT_EQ(cpu::FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(cpu::Bf16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(cpu::FloatToBf16(1.0f + 0x1p-8f), 0x3f80);  // halfway: to the even neighbour (down)
  EXPECT_EQ(cpu::FloatToBf16(1.0f + 0x3p-8f), 0x3f82);  // halfway: to the even neighbour (up)
  EXPECT_EQ(cpu::FloatToBf16(1.0f + 0x1p-7f + 0x1p-9f), 0x3f81);
  EXPECT_EQ(cpu::FloatToBf16(-2.5f), 0xc020);
  EXPECT_TRUE(std::isnan(cpu::Bf16ToFloat(cpu::FloatToBf16(NAN))));
  EXPECT_EQ(cpu::Bf16ToFloat(cpu::FloatToBf16(INFINITY)), INFINITY);
}

TEST(CpuMatMulTest, ThreadCountDoesNotChangeABit) {
  ThreadsGuard restore;
  std::mt19937_64 rng(testing::TestSeed());
  const Problem p = MakeProblem(16, 200, 1000, rng);
  cpu::SetComputeThreads(1);
  const std::vector<float> one = Multiply(p, cpu::MatMulNTSmallRows);
  for (int threads : {2, 3, 8}) {
    cpu::SetComputeThreads(threads);
    EXPECT_EQ(cpu::ComputeThreads(), threads);
    EXPECT_EQ(Multiply(p, cpu::MatMulNTSmallRows), one) << threads << " threads";
  }
}

// The same for the widening kernels of the stored formats: bf16, f16 and q8_0 weights.
TEST(CpuMatMulTest, ThreadCountDoesNotChangeABitOfTheWideningKernels) {
  ThreadsGuard restore;
  std::mt19937_64 rng(testing::TestSeed());
  for (int rows : {1, 16, 45}) {
    Problem p = MakeProblem(rows, 200, 1000, rng);
    for (const HalfFormat& f : kHalfFormats) {
      const std::vector<uint16_t> w16 = RoundWeights(f, &p);
      std::vector<float> one(size_t(rows) * p.out), got(one.size());
      cpu::SetComputeThreads(1);
      f.kernel(p.x.data(), rows, p.in, w16.data(), p.out, one.data());
      for (int threads : {2, 3, 8}) {
        cpu::SetComputeThreads(threads);
        f.kernel(p.x.data(), rows, p.in, w16.data(), p.out, got.data());
        EXPECT_EQ(got, one) << f.name << ", " << rows << " rows, " << threads << " threads";
      }
    }
    const int blocks = (p.in + cpu::kQ8Block - 1) / cpu::kQ8Block;
    std::vector<int8_t> q(p.w.size());
    std::vector<float> scales(size_t(p.out) * blocks), one(size_t(rows) * p.out), got(one.size());
    cpu::QuantizeQ8(p.w.data(), p.out, p.in, q.data(), scales.data());
    cpu::SetComputeThreads(1);
    cpu::MatMulNTQ8(p.x.data(), rows, p.in, {q.data(), scales.data()}, p.out, one.data());
    for (int threads : {2, 3, 8}) {
      cpu::SetComputeThreads(threads);
      cpu::MatMulNTQ8(p.x.data(), rows, p.in, {q.data(), scales.data()}, p.out, got.data());
      EXPECT_EQ(got, one) << "q8, " << rows << " rows, " << threads << " threads";
    }
  }
}

TEST(ParallelForTest, EveryTaskRunsOnceAlsoNestedAndFromSeveralThreads) {
  ThreadsGuard restore;
  cpu::SetComputeThreads(4);
  for (int tasks : {0, 1, 2, 5, 64, 1000}) {
    std::vector<std::atomic<int>> runs(tasks);
    cpu::ParallelFor(tasks, [&](int t) { runs[t].fetch_add(1); });
    for (int t = 0; t < tasks; ++t) ASSERT_EQ(runs[t].load(), 1) << "task " << t << " of " << tasks;
  }
  // A ParallelFor inside a task runs on that task's thread.
  std::vector<std::atomic<int>> inner(8 * 8);
  cpu::ParallelFor(8, [&](int outer) { cpu::ParallelFor(8, [&](int t) { inner[outer * 8 + t].fetch_add(1); }); });
  for (auto& n : inner) ASSERT_EQ(n.load(), 1);
  // Callers on several threads at once (engines of one process): each gets all its tasks run.
  std::vector<std::thread> callers;
  std::vector<std::vector<int>> sums(4, std::vector<int>(200));
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&, c] {
      for (int round = 0; round < 200; ++round) {
        std::atomic<int> sum{0};
        cpu::ParallelFor(37, [&](int t) { sum.fetch_add(t); });
        sums[c][round] = sum.load();
      }
    });
  }
  for (auto& t : callers) t.join();
  for (const auto& s : sums) {
    for (int v : s) ASSERT_EQ(v, 37 * 36 / 2);
  }
}

TEST(ParallelForTest, ParallelRangeCoversEveryItemOnceInPiecesOfAtLeastTheGrain) {
  ThreadsGuard restore;
  for (int threads : {1, 2, 3, 8}) {
    cpu::SetComputeThreads(threads);
    for (int64_t n : {0, 1, 7, 100, 4095, 4096, 100000}) {
      for (int64_t grain : {1, 10, 4096, 1 << 20}) {
        std::vector<std::atomic<int>> runs(static_cast<size_t>(n));
        std::atomic<int> pieces{0}, short_pieces{0};
        cpu::ParallelRange(n, grain, [&](int64_t b, int64_t e) {
          pieces.fetch_add(1);
          if (e - b < std::min(grain, n)) short_pieces.fetch_add(1);
          for (int64_t i = b; i < e; ++i) runs[size_t(i)].fetch_add(1);
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(runs[size_t(i)].load(), 1) << "item " << i << " of " << n;
        // At most one piece (the last) is shorter than the grain, and no more than 2 per thread.
        EXPECT_LE(short_pieces.load(), 1) << n << " items, grain " << grain;
        EXPECT_LE(pieces.load(), std::max(1, 2 * threads)) << n << " items, grain " << grain;
      }
    }
  }
}

// The decode step's per-row and elementwise ops split over the threads (ParallelRange): the same
// bits as their plain loops, at every thread count.
TEST(CpuOpsTest, NormAndSwiGluAreTheirPlainLoopsAtEveryThreadCount) {
  ThreadsGuard restore;
  std::mt19937_64 rng(testing::TestSeed());
  const int rows = 37, dim = 2048;
  const std::vector<float> x = testing::RandomNormal<float>(size_t(rows) * dim, rng);
  const std::vector<float> up = testing::RandomNormal<float>(size_t(rows) * dim, rng);
  const std::vector<float> weight = testing::RandomNormal<float>(size_t(dim), rng);
  std::vector<float> norm_want(x.size()), glu_want(x.size());
  for (int r = 0; r < rows; ++r) {
    const float* xr = x.data() + size_t(r) * dim;
    // The four running sums of SumOfSquares (element i in sum i mod 4), written out here.
    double part[4] = {0, 0, 0, 0};
    for (int i = 0; i < dim; ++i) part[i % 4] += double(xr[i]) * xr[i];
    const double ss = (part[0] + part[1]) + (part[2] + part[3]);
    ASSERT_EQ(cpu::SumOfSquares(xr, dim), ss);
    long double exact = 0;
    for (int i = 0; i < dim; ++i) exact += (long double)xr[i] * xr[i];
    ASSERT_NEAR(double(exact), ss, 1e-13 * ss);
    const float inv = float(1.0 / std::sqrt(ss / dim + 1e-5f));
    for (int i = 0; i < dim; ++i) norm_want[size_t(r) * dim + i] = xr[i] * inv * weight[size_t(i)];
  }
  // SwiGLU's lanes (swiglu.cc): on one thread over the whole array, each element within a few ulp of
  // silu(x) up in double (Highway's Exp is within 1 ulp of e^x, then a division, a product).
  cpu::SetComputeThreads(1);
  cpu::SwiGlu(x.data(), up.data(), int64_t(x.size()), glu_want.data());
  for (size_t i = 0; i < x.size(); ++i) {
    const double exact = double(x[i]) / (1.0 + std::exp(-double(x[i]))) * double(up[i]);
    ASSERT_LE(std::abs(glu_want[i] - exact), 4 * std::abs(exact) * std::numeric_limits<float>::epsilon()) << "element " << i;
  }
  // RoPE over 37 rows of 32 heads of 64 (positions far apart): each row on its own, so the rows'
  // split over the threads does not change a bit.
  std::vector<int64_t> positions(rows);
  for (int r = 0; r < rows; ++r) positions[size_t(r)] = int64_t(r) * 7919 + r * r;
  std::vector<float> inv_freq(32);
  for (int i = 0; i < 32; ++i) inv_freq[size_t(i)] = float(std::pow(10000.0, -2.0 * i / 64));
  std::vector<float> rope_want = x;
  cpu::Rope(rope_want.data(), rows, 32, 64, positions.data(), inv_freq.data());
  for (int threads : {1, 2, 3, 8}) {
    cpu::SetComputeThreads(threads);
    std::vector<float> rope = x;
    cpu::Rope(rope.data(), rows, 32, 64, positions.data(), inv_freq.data());
    ASSERT_EQ(rope, rope_want) << threads << " threads";
    for (int n : {1, 2, 5, rows}) {
      std::vector<float> norm(size_t(n) * dim, NAN), glu(size_t(n) * dim, NAN);
      cpu::RmsNorm(x.data(), weight.data(), n, dim, 1e-5f, norm.data());
      cpu::SwiGlu(x.data(), up.data(), int64_t(n) * dim, glu.data());
      ASSERT_EQ(std::memcmp(norm.data(), norm_want.data(), sizeof(float) * norm.size()), 0) << n << " rows, " << threads << " threads";
      ASSERT_EQ(std::memcmp(glu.data(), glu_want.data(), sizeof(float) * glu.size()), 0) << n << " rows, " << threads << " threads";
      // An element's bits do not depend on where the array starts or ends (a tail shorter than a
      // vector goes through a padded one).
      const int64_t len = int64_t(n) * dim - 4;
      std::vector<float> shifted(size_t(len), NAN);
      cpu::SwiGlu(x.data() + 3, up.data() + 3, len - 3, shifted.data());
      ASSERT_EQ(std::memcmp(shifted.data(), glu_want.data() + 3, sizeof(float) * size_t(len - 3)), 0) << n << " rows, " << threads << " threads";
    }
  }
}

// SumOfSquares at lengths that end inside its groups of four (the tail's elements go to their own
// sums), against the sum in long double.
TEST(CpuOpsTest, SumOfSquaresAtShortAndOddLengths) {
  std::mt19937_64 rng(testing::TestSeed());
  const std::vector<float> x = testing::RandomNormal<float>(67, rng);
  for (int n = 0; n <= 67; ++n) {
    long double exact = 0;
    for (int i = 0; i < n; ++i) exact += (long double)x[size_t(i)] * x[size_t(i)];
    EXPECT_NEAR(cpu::SumOfSquares(x.data(), n), double(exact), 1e-15 * double(exact)) << n;
  }
  const float big[] = {3e38f, 3e38f, 1.0f};
  const double b = big[0];
  EXPECT_DOUBLE_EQ(cpu::SumOfSquares(big, 3), 2 * b * b + 1.0);  // no overflow: squares in double
}

// SwiGLU where e^-x overflows, at zero and at non-finite inputs: the values std::exp's formula gives.
TEST(CpuOpsTest, SwiGluAtTheEdgesOfExp) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> gate = {-1000.0f, -200.0f, -104.5f, -89.0f, -88.0f, -0.0f, 0.0f, 88.0f, 200.0f, 1e30f, inf, -inf};
  const std::vector<float> up(gate.size(), 3.0f);
  std::vector<float> got(gate.size());
  cpu::SwiGlu(gate.data(), up.data(), int64_t(gate.size()), got.data());
  for (size_t i = 0; i < gate.size(); ++i) {
    const float want = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got[i])) << gate[i];
    } else if (std::isinf(want)) {
      EXPECT_EQ(got[i], want) << gate[i];
    } else {
      EXPECT_NEAR(got[i], want, 4 * std::abs(want) * std::numeric_limits<float>::epsilon() + 1e-37f) << gate[i];
    }
  }
  const float nan_gate = std::nanf("");
  float out = 0.0f;
  cpu::SwiGlu(&nan_gate, up.data(), 1, &out);
  EXPECT_TRUE(std::isnan(out));
}

// The SIMD state updates equal the scalar reference bit for bit, sums and compensations, over many
// updates of rows whose magnitudes straddle the products' (both branches of the compensated add),
// at lengths that end inside a vector.
TEST(CpuStateUpdateTest, SimdEqualsTheScalarReferenceBitForBit) {
  std::mt19937_64 rng(testing::TestSeed());
  std::uniform_real_distribution<float> scale(-6.0f, 6.0f);
  for (int n : {1, 3, 8, 15, 16, 17, 33, 64, 65, 127}) {
    std::vector<float> row = testing::RandomNormal<float>(n, rng), comp(n, 0.0f);
    for (float& r : row) r *= std::exp2(scale(rng));
    std::vector<float> row_ref = row, comp_ref = comp, plain = row, plain_ref = row;
    for (int update = 0; update < 200; ++update) {
      const std::vector<float> v = testing::RandomNormal<float>(n, rng);
      const float x = float(std::exp2(scale(rng))) * (update % 2 ? 1.0f : -1.0f);
      cpu::KahanAxpy(x, v.data(), row.data(), comp.data(), n);
      cpu::KahanAxpyReference<float>(x, v.data(), row_ref.data(), comp_ref.data(), n);
      cpu::Axpy(x, v.data(), plain.data(), n);
      cpu::AxpyReference<float>(x, v.data(), plain_ref.data(), n);
    }
    EXPECT_EQ(0, std::memcmp(row.data(), row_ref.data(), n * sizeof(float))) << "sums, n " << n;
    EXPECT_EQ(0, std::memcmp(comp.data(), comp_ref.data(), n * sizeof(float))) << "compensations, n " << n;
    EXPECT_EQ(0, std::memcmp(plain.data(), plain_ref.data(), n * sizeof(float))) << "plain, n " << n;
    bool compensated = false;
    for (float c : comp) compensated |= c != 0.0f;
    EXPECT_TRUE(compensated) << "n " << n << ": the test never exercised the compensation";
  }
}

// The SIMD state reads equal their scalar references bit for bit: a group of queries into fp32 over
// every row (slay, dark), with and without compensations, and into fp64 row by row (taylor),
// at lengths that end inside a vector and groups wider than the kernel's registers.
TEST(CpuStateUpdateTest, SimdReadsEqualTheScalarReferenceBitForBit) {
  std::mt19937_64 rng(testing::TestSeed());
  for (int n : {1, 3, 8, 15, 16, 17, 33, 64, 65, 127}) {
    for (int group : {1, 4, 9}) {
      const int rows = 40;
      const std::vector<float> sums = testing::RandomNormal<float>(size_t(rows) * n, rng);
      std::vector<float> comp = testing::RandomNormal<float>(size_t(rows) * n, rng);
      for (float& c : comp) c *= 1e-7f;
      const std::vector<float> w = testing::RandomNormal<float>(size_t(group) * rows, rng);  // [group, rows]
      for (const float* c : {static_cast<const float*>(comp.data()), static_cast<const float*>(nullptr)}) {
        std::vector<double> group_out(size_t(group) * n, 0.25), group_ref = group_out;
        for (int r = 0; r < rows; ++r) {
          const float* row = sums.data() + size_t(r) * n;
          const float* crow = c != nullptr ? c + size_t(r) * n : nullptr;
          cpu::ReadRowGroup(w.data() + r, rows, group, row, crow, group_out.data(), n);
          cpu::ReadRowGroupReference<float>(w.data() + r, rows, group, row, crow, group_ref.data(), n);
        }
        // Every row for the whole group in one call, with a factor on the weights.
        std::vector<float> rows_out = testing::RandomNormal<float>(size_t(group) * n, rng), rows_ref = rows_out;
        const std::vector<float> rows_start = rows_out;
        cpu::ReadRows(rows, n, group, w.data(), rows, 0.75f, sums.data(), c, rows_out.data());
        cpu::ReadRowsReference<float>(rows, n, group, w.data(), rows, 0.75f, sums.data(), c, rows_ref.data());
        const char* kind = c != nullptr ? "compensated" : "plain";
        EXPECT_EQ(0, std::memcmp(rows_out.data(), rows_ref.data(), rows_out.size() * sizeof(float)))
            << kind << " rows for a group of " << group << ", n " << n;
        EXPECT_EQ(0, std::memcmp(group_out.data(), group_ref.data(), group_out.size() * sizeof(double)))
            << kind << " group of " << group << ", n " << n;
        EXPECT_NE(0, std::memcmp(rows_out.data(), rows_start.data(), rows_out.size() * sizeof(float))) << "nothing was read";
      }
    }
  }
}

// sliced_relu's compensated fp32 pairs: the SIMD insert (AddToSum on a row), read (ReadSum) and
// add into running sums equal the scalar reference bit for bit over many inserts of values whose magnitudes straddle the
// sums' (both branches of the compensated add), compensated and plain.
TEST(CpuStateUpdateTest, SlicedSumsEqualTheScalarReferenceBitForBit) {
  std::mt19937_64 rng(testing::TestSeed());
  std::uniform_real_distribution<double> scale(-8.0, 8.0);
  for (int n : {1, 5, 8, 9, 31, 131}) {
    for (bool compensated : {true, false}) {
      std::vector<float> sums(n, 0.0f), comps(n, 0.0f), sums_ref = sums, comps_ref = comps;
      float* c = compensated ? comps.data() : nullptr;
      float* c_ref = compensated ? comps_ref.data() : nullptr;
      for (int insert = 0; insert < 300; ++insert) {
        std::vector<double> x = testing::RandomNormal<double>(n, rng);
        for (double& v : x) v *= std::exp2(scale(rng));
        cpu::AddRowToSums(x.data(), sums.data(), c, n);
        cpu::AddRowToSumsReference<float>(x.data(), sums_ref.data(), c_ref, n);
      }
      EXPECT_EQ(0, std::memcmp(sums.data(), sums_ref.data(), n * sizeof(float))) << "sums, n " << n;
      EXPECT_EQ(0, std::memcmp(comps.data(), comps_ref.data(), n * sizeof(float))) << "comps, n " << n;
      std::vector<double> wide(n), wide_ref(n);
      cpu::WidenSums(sums.data(), c, wide.data(), n);
      cpu::WidenSumsReference<float>(sums.data(), c, wide_ref.data(), n);
      EXPECT_EQ(0, std::memcmp(wide.data(), wide_ref.data(), n * sizeof(double))) << "read, n " << n;
      // Added into running sums (the histogram's pass over its bins).
      std::vector<double> running = testing::RandomNormal<double>(n, rng), running_ref = running;
      cpu::AddWidenedSums(sums.data(), c, running.data(), n);
      cpu::AddWidenedSumsReference<float>(sums.data(), c, running_ref.data(), n);
      EXPECT_EQ(0, std::memcmp(running.data(), running_ref.data(), n * sizeof(double))) << "running, n " << n;
      if (compensated) {
        bool used = false;
        for (float v : comps) used |= v != 0.0f;
        EXPECT_TRUE(used) << "n " << n << ": the compensations were never exercised";
      }
    }
  }
}

// dark's feature exps in SIMD against std::exp: within a few ulps, down to underflow.
// The features' shift: the SIMD max is exactly std::max_element's value wherever the largest
// element sits (first, last, in the tail past the whole vectors), for every length, on every target.
TEST(CpuStateUpdateTest, MaxOfIsTheLargestElement) {
  ForEachTarget([&] {
    std::mt19937_64 rng(testing::TestSeed());
    for (int n = 1; n <= 70; ++n) {
      for (int at : {0, n / 2, n - 1}) {
        std::vector<float> x = testing::RandomNormal<float>(n, rng);
        for (float& v : x) v = -std::abs(v) - 1.0f;  // all negative: a zero start would be wrong
        x[at] = -0.5f;
        EXPECT_EQ(cpu::MaxOf(x.data(), n), -0.5f) << "n " << n << " at " << at;
        x[at] = -INFINITY;
        EXPECT_EQ(cpu::MaxOf(x.data(), n), *std::max_element(x.begin(), x.end())) << "n " << n << " at " << at;
      }
    }
  });
}

TEST(CpuStateUpdateTest, ExpFeaturesMatchStdExp) {
  std::mt19937_64 rng(testing::TestSeed());
  for (int n : {1, 15, 16, 17, 256}) {
    std::vector<float> x = testing::RandomNormal<float>(n, rng, 30.0);
    x[0] = -1e30f;  // far below the shift: exp underflows to 0
    const float shift = *std::max_element(x.begin(), x.end()), scale = 0.0625f;
    std::vector<float> got = x;
    cpu::ExpFeatures(got.data(), n, shift, scale);
    for (int i = 0; i < n; ++i) {
      const double want = std::exp(double(x[i] - shift)) * scale;  // the difference in fp32, as the kernel
      EXPECT_NEAR(got[i], want, 4e-7 * want + 1e-38) << "n " << n << " x " << x[i];
    }
  }
}

// The SIMD softmax attention over a KV cache against a double-precision reference: GQA groups (of
// four heads at a time and the rest one by one), head sizes that end inside a vector or hold four
// vectors and more, one cached row to several 128-row chunks of them (combined across chunks), and
// the same bits with one thread or two.
TEST(CpuKvAttentionTest, MatchesTheReference) {
  ThreadsGuard restore;
  std::mt19937_64 rng(testing::TestSeed());
  for (const auto& [kv_heads, group, dk, dv] : {std::array{1, 1, 16, 16}, std::array{2, 4, 64, 64}, std::array{3, 2, 17, 9},
                                                std::array{1, 8, 128, 128}, std::array{2, 5, 23, 70}}) {
    for (int64_t len : {1, 2, 15, 16, 17, 127, 129, 300, 1100}) {
      const int64_t row = int64_t(kv_heads) * (dk + dv);
      const std::vector<float> q = testing::RandomNormal<float>(size_t(kv_heads) * group * dk, rng, 2.0);
      const std::vector<float> cache = testing::RandomNormal<float>(size_t(len * row), rng);
      const float scale = 0.7f;
      std::vector<float> y(size_t(kv_heads) * group * dv, NAN);
      cpu::SetComputeThreads(2);
      cpu::AttendKvCache(kv_heads, group, dk, dv, scale, q.data(), cache.data(), len, y.data());
      std::vector<float> one_thread(y.size());
      cpu::SetComputeThreads(1);
      cpu::AttendKvCache(kv_heads, group, dk, dv, scale, q.data(), cache.data(), len, one_thread.data());
      ASSERT_EQ(0, std::memcmp(y.data(), one_thread.data(), y.size() * sizeof(float))) << "len " << len;
      for (int g = 0; g < kv_heads; ++g) {
        for (int h = 0; h < group; ++h) {
          const float* qh = q.data() + (size_t(g) * group + h) * dk;
          std::vector<double> l(len);
          for (int64_t j = 0; j < len; ++j) {
            double dot = 0;
            for (int d = 0; d < dk; ++d) dot += double(qh[d]) * cache[size_t(j * row + g * (dk + dv) + d)];
            l[j] = scale * dot;
          }
          const double top = *std::max_element(l.begin(), l.end());
          double den = 0;
          for (double& x : l) den += x = std::exp(x - top);
          for (int d = 0; d < dv; ++d) {
            double want = 0;
            for (int64_t j = 0; j < len; ++j) want += l[j] / den * cache[size_t(j * row + g * (dk + dv) + dk + d)];
            ASSERT_NEAR(y[(size_t(g) * group + h) * dv + d], want, 2e-5)
                << "kv_heads " << kv_heads << " group " << group << " dk " << dk << " dv " << dv << " len " << len;
          }
        }
      }
    }
  }
}

// The rows as two spans (sliding_window's ring buffer: the older part, then the newer) give the same
// bits as the rows copied into one span, wherever the split falls: inside a 128-row chunk, on a
// chunk boundary, at either end.
TEST(CpuKvAttentionTest, TwoSpansEqualOneSpan) {
  ThreadsGuard restore;
  std::mt19937_64 rng(testing::TestSeed());
  const int kv_heads = 2, group = 4, dk = 17, dv = 9;
  const int64_t row = int64_t(kv_heads) * (dk + dv);
  const std::vector<float> q = testing::RandomNormal<float>(size_t(kv_heads) * group * dk, rng, 2.0);
  for (int64_t len : {1, 5, 512, 1300}) {
    const std::vector<float> rows = testing::RandomNormal<float>(size_t(len * row), rng);
    std::vector<float> one(size_t(kv_heads) * group * dv);
    cpu::SetComputeThreads(2);
    cpu::AttendKvCache(kv_heads, group, dk, dv, 0.4f, q.data(), rows.data(), len, one.data());
    for (int64_t split : {int64_t(0), int64_t(1), len / 2, std::min<int64_t>(len, 128), len - 1, len}) {
      if (split < 0) continue;
      // The newer rows first in memory, as in a ring whose cursor stands at `len - split`.
      std::vector<float> ring(rows.begin() + split * row, rows.end());
      ring.insert(ring.end(), rows.begin(), rows.begin() + split * row);
      std::vector<float> two(one.size(), NAN);
      cpu::SetComputeThreads(split % 2 + 1);
      cpu::AttendKvRows(kv_heads, group, dk, dv, 0.4f, q.data(), ring.data() + (len - split) * row, split, ring.data(),
                        len - split, two.data());
      EXPECT_EQ(0, std::memcmp(one.data(), two.data(), one.size() * sizeof(float))) << "len " << len << " split " << split;
    }
  }
}

// n query rows side by side (speculative verification, softmax's prefill chunk): query t over its
// own prefix gives AttendKvRows' bits over that prefix alone, wherever the prefixes end against the
// 128-row chunks, for one span or two, for any number of rows and threads, with GQA groups that
// take the four-head path and the one-head path.
TEST(CpuKvAttentionTest, CausalRowsEqualEachRowOverItsPrefix) {
  ThreadsGuard restore;
  std::mt19937_64 rng(testing::TestSeed());
  const int kv_heads = 2, group = 5, dk = 19, dv = 70, heads = kv_heads * group;
  const int64_t row = int64_t(kv_heads) * (dk + dv);
  for (int64_t len : {1, 4, 9, 126, 131, 256, 520}) {
    const std::vector<float> rows = testing::RandomNormal<float>(size_t(len * row), rng);
    for (int n : {1, 2, 4, 9}) {
      if (n > len) continue;
      const std::vector<float> q = testing::RandomNormal<float>(size_t(n) * heads * dk, rng, 2.0);
      std::vector<float> want(size_t(n) * heads * dv);
      cpu::SetComputeThreads(1);
      for (int t = 0; t < n; ++t) {
        cpu::AttendKvCache(kv_heads, group, dk, dv, 0.4f, q.data() + size_t(t) * heads * dk, rows.data(),
                           len - n + 1 + t, want.data() + size_t(t) * heads * dv);
      }
      for (int threads : {1, 2, 3}) {
        for (int64_t split : {len, len / 3}) {  // the rows as one span, or a ring's two
          std::vector<float> ring(rows.begin() + split * row, rows.end());
          ring.insert(ring.end(), rows.begin(), rows.begin() + split * row);
          std::vector<float> got(want.size(), NAN);
          cpu::SetComputeThreads(threads);
          cpu::AttendKvRowsCausal(kv_heads, group, dk, dv, 0.4f, n, q.data(), ring.data() + (len - split) * row, split,
                                  ring.data(), len - split, got.data());
          EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
              << "len " << len << " n " << n << " threads " << threads << " split " << split;
        }
      }
    }
  }
}

// Each query over its own window (sliding-window verification): query t of n over the last `window`
// of the first len - n + 1 + t rows, the rows given as three spans (a ring's older and newer parts,
// then the new rows). The same bits as AttendKvCache over that window's rows alone, with any
// thread count; windows smaller than n, of one row, past a 128- or 512-row chunk, and the whole cache.
// Each head's largest logit and sum of exps (window_dark's weights) agree with fp64 sums over the
// same window, and asking for them leaves y's bits as they were.
TEST(CpuKvAttentionTest, WindowedRowsEqualEachRowOverItsWindow) {
  ThreadsGuard restore;
  std::mt19937_64 rng(testing::TestSeed());
  const int kv_heads = 2, group = 3, dk = 16, dv = 35, heads = kv_heads * group;
  const int64_t row = int64_t(kv_heads) * (dk + dv);
  for (int64_t len : {5, 40, 300, 700}) {
    const std::vector<float> rows = testing::RandomNormal<float>(size_t(len * row), rng);
    for (int n : {1, 3, 5}) {
      for (int64_t window : {int64_t(1), int64_t(4), int64_t(130), int64_t(520), len}) {
        const std::vector<float> q = testing::RandomNormal<float>(size_t(n) * heads * dk, rng, 2.0);
        std::vector<float> want(size_t(n) * heads * dv);
        cpu::SetComputeThreads(1);
        for (int t = 0; t < n; ++t) {
          const int64_t end = len - n + 1 + t, begin = std::max<int64_t>(0, end - window);
          cpu::AttendKvCache(kv_heads, group, dk, dv, 0.4f, q.data() + size_t(t) * heads * dk,
                             rows.data() + begin * row, end - begin, want.data() + size_t(t) * heads * dv);
        }
        // Spans: [0, a) and [a, len - n) as a ring stores them (newer part first in memory), then the n rows.
        const int64_t old = len - n, a = old / 3;
        std::vector<float> ring(rows.begin() + a * row, rows.begin() + old * row);
        ring.insert(ring.end(), rows.begin(), rows.begin() + a * row);
        const cpu::KvSpans spans{{ring.data() + (old - a) * row, ring.data(), rows.data() + old * row}, {a, old - a, n}};
        for (int threads : {1, 2, 3}) {
          std::vector<float> got(want.size(), NAN);
          cpu::SetComputeThreads(threads);
          cpu::AttendKvRowsWindowed(kv_heads, group, dk, dv, 0.4f, n, q.data(), spans, window, got.data());
          EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
              << "len " << len << " n " << n << " window " << window << " threads " << threads;
          std::vector<float> with_sums(want.size(), NAN), top(size_t(n) * heads, NAN), den(top.size(), NAN);
          cpu::AttendKvRowsWindowed(kv_heads, group, dk, dv, 0.4f, n, q.data(), spans, window, with_sums.data(),
                                    top.data(), den.data());
          EXPECT_EQ(0, std::memcmp(want.data(), with_sums.data(), want.size() * sizeof(float)));
          for (int t = 0; t < n; ++t) {
            const int64_t end = len - n + 1 + t, begin = std::max<int64_t>(0, end - window);
            for (int h = 0; h < heads; ++h) {
              const float* qh = q.data() + (size_t(t) * heads + h) * dk;
              std::vector<double> logits;
              for (int64_t j = begin; j < end; ++j) {
                const float* kj = rows.data() + j * row + (h / group) * (dk + dv);
                double dot = 0;
                for (int d = 0; d < dk; ++d) dot += double(qh[d]) * kj[d];
                logits.push_back(0.4 * dot);
              }
              const double best = *std::max_element(logits.begin(), logits.end());
              double sum = 0;
              for (double l : logits) sum += std::exp(l - best);
              const size_t i = size_t(t) * heads + h;
              EXPECT_NEAR(top[i], best, 1e-5 * std::max(1.0, std::abs(best))) << "t " << t << " head " << h;
              EXPECT_NEAR(den[i], sum, 1e-4 * sum) << "t " << t << " head " << h;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace steady
