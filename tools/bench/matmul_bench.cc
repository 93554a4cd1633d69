// The decode GEMM y[rows, out] = x[rows, in] w[out, in]^T at llama1b's projection shapes: our
// small-row kernel (kernels/cpu/matmul.cc) against OpenBLAS's sgemm/sgemv on the same buffers, in
// one run (docs/cpu.md, docs/benchmarks.md). bytes_per_second counts the weights read once.
// BM_Bf16Widening/BM_Bf16Dot and BM_Q8Widening/BM_Q8Dot put the bf16 x bf16 and int8 x int8 kernels
// (kernels/cpu/matmul_dot.h) beside the widening ones they replace, at Llama 3.2 1B's shapes;
// BM_Q4Widening/BM_Q4Dot the q4 pair (q4_0: ggml's block_q4_0 row-major, and packed); BM_Q4KWidening/BM_Q4KDot the
// q4k pair (kernels/cpu/q4k.h), BM_Q5KWidening/BM_Q5KDot the q5k pair (kernels/cpu/q5k.h, random Q5_K
// blocks), BM_Q6KWidening/BM_Q6KDot the q6k pair (kernels/cpu/q6k.h, random
// Q6_K blocks). The int8 kernels run on each path the CPU has (the "path" argument:
// 0 AVX512_VNNI, 1 AVX-VNNI, 2 AVX2, 3 Arm SMMLA, 4 Arm SDOT; cpu::Int8Path), skipped where it lacks
// one. BM_MatVecsF64 is sliced_relu's fp64 score projections.
//
// BM_VpdpbusdIssue measures what the AVX-512 int8 kernels are held against on this CPU: a loop of
// 12 independent VPDPBUSD on 512-bit registers, alone or with 4 other instructions beside them (the
// fp32 steps of a q8_0 block's scaling, an integer multiply, a conversion, the 4-bit unpacking), on
// every compute thread at once. Its int8 multiply-adds a second, alone, are the peak the AVX512_VNNI
// kernels' `peak_fraction` counter divides by, measured once in the same process (docs/cpu.md:
// "VPDPBUSD's issue rate, measured in the tree"); with the others beside them, how much of it is left.
// BM_Vdpbf16psIssue is the same loop with 12 VDPBF16PS (32 bf16 multiply-adds each): the peak the
// AVX512_BF16 kernel's `peak_fraction` divides by; BM_FmaIssue with 12 256-bit VFMADD231PS (8
// multiply-adds each), the AVX2 bf16 kernel's and the f16 kernel's. BM_Bf16Dot runs on each bf16
// path the CPU has (its "path" argument: 0 AVX512_BF16, 1 AVX2, 2 Arm BF16; cpu::Bf16Path).
// BM_F16Widening/BM_F16Dot: f16 weights (a checkpoint's own) on the widening kernel and on the packed
// f16 kernel (AVX2, FMA, F16C).
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "base/flags.h"
#include "kernels/cpu/amx.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_dot.h"
#include "kernels/cpu/parallel.h"

namespace steady {
namespace {

struct Buffers {
  std::vector<float> x, w, y;
};

Buffers Make(int rows, int in, int out) {
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.0f, 1.0f);
  Buffers b{std::vector<float>(size_t(rows) * in), std::vector<float>(size_t(out) * in), std::vector<float>(size_t(rows) * out)};
  for (float& v : b.x) v = g(rng);
  for (float& v : b.w) v = g(rng);
  return b;
}

// bytes_per_second counts each weight once, at `weight_bytes` bytes.
void Report(benchmark::State& state, int rows, int in, int out, int64_t weight_bytes = sizeof(float)) {
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(in) * out * weight_bytes);
  state.counters["GFLOPs"] = benchmark::Counter(2.0 * rows * in * out, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = cpu::ComputeThreads();
}

std::vector<uint16_t> Bf16(const std::vector<float>& w) {
  std::vector<uint16_t> out(w.size());
  for (size_t i = 0; i < w.size(); ++i) out[i] = cpu::FloatToBf16(w[i]);
  return out;
}

// Args: rows, in, out.
void BM_SmallRowsKernel(benchmark::State& state) {
  const int rows = int(state.range(0)), in = int(state.range(1)), out = int(state.range(2));
  Buffers b = Make(rows, in, out);
  for (auto _ : state) {
    cpu::MatMulNTSmallRows(b.x.data(), rows, in, b.w.data(), out, b.y.data());
    benchmark::DoNotOptimize(b.y.data());
  }
  Report(state, rows, in, out);
  state.SetLabel(cpu::SimdTargetName());
}

// The same kernel reading bf16 weights (--cpu-weights bf16 where the CPU lacks AMX).
void BM_SmallRowsBf16(benchmark::State& state) {
  const int rows = int(state.range(0)), in = int(state.range(1)), out = int(state.range(2));
  Buffers b = Make(rows, in, out);
  const std::vector<uint16_t> w = Bf16(b.w);
  for (auto _ : state) {
    cpu::MatMulNTBf16(b.x.data(), rows, in, w.data(), out, b.y.data());
    benchmark::DoNotOptimize(b.y.data());
  }
  Report(state, rows, in, out, sizeof(uint16_t));
}

// bf16 weights on AMX tiles (kernels/cpu/amx.h), where the CPU has them.
void BM_AmxBf16(benchmark::State& state) {
  if (!cpu::AmxAvailable()) return state.SkipWithError("no AMX on this CPU");
  const int rows = int(state.range(0)), in = int(state.range(1)), out = int(state.range(2));
  Buffers b = Make(rows, in, out);
  std::vector<uint16_t> packed(size_t(cpu::AmxPackedSize(out, in)));
  cpu::PackAmxBf16(Bf16(b.w).data(), out, in, packed.data());
  for (auto _ : state) {
    cpu::MatMulNTAmxBf16(b.x.data(), rows, in, packed.data(), out, b.y.data());
    benchmark::DoNotOptimize(b.y.data());
  }
  Report(state, rows, in, out, sizeof(uint16_t));
}

// What MatMulNT called before: sgemv for one row, sgemm (transposed weight) for more.
void BM_OpenBlas(benchmark::State& state) {
  const int rows = int(state.range(0)), in = int(state.range(1)), out = int(state.range(2));
  Buffers b = Make(rows, in, out);
  for (auto _ : state) {
    if (rows == 1) {
      cblas_sgemv(CblasRowMajor, CblasNoTrans, out, in, 1.0f, b.w.data(), in, b.x.data(), 1, 0.0f, b.y.data(), 1);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, out, in, 1.0f, b.x.data(), in, b.w.data(), in, 0.0f,
                  b.y.data(), out);
    }
    benchmark::DoNotOptimize(b.y.data());
  }
  Report(state, rows, in, out);
}

// llama1b: q/o 2048x2048, gate/up 5632x2048, down 2048x5632.
void Shapes(benchmark::internal::Benchmark* b) {
  for (const auto& [in, out] : {std::pair{2048, 2048}, std::pair{2048, 5632}, std::pair{5632, 2048}}) {
    for (int rows : {1, 2, 4, 16, 32, 64}) b->Args({rows, in, out});
  }
}
// Weights for the low-precision pairs, made once per shape and kept (the 2048 x 128256 head is 525 MB
// in bf16): normal values from a fast generator, as bf16 and as q8_0.
struct LowPrecisionWeights {
  std::vector<uint16_t> bf16;
  std::vector<int8_t> q8;
  std::vector<float> q8_scales;
  std::vector<uint16_t> bf16_dot;  // packed for the dot-product kernels (PackBf16Dot, PackQ8Dot)
  std::vector<uint8_t> q8_dot, q4, q4_dot;  // q4: its blocks row-major (QuantizeQ4)
  std::vector<uint8_t> q4k, q4k_dot;  // q4k's blocks, and packed for VPDPBUSD
  std::vector<uint8_t> q5k, q5k_dot;  // random Q5_K blocks, and packed
  std::vector<uint8_t> q6k, q6k_dot;  // random Q6_K blocks, and packed
  std::vector<uint16_t> f16, f16_dot;  // the same normal values in f16, row-major and packed (PackF16Dot)
  cpu::Q4KWeights q4k_weights() const { return {q4k.data()}; }
};

const LowPrecisionWeights& WeightsFor(int in, int out) {
  static std::map<std::pair<int, int>, LowPrecisionWeights> cache;
  auto [it, fresh] = cache.try_emplace({in, out});
  if (!fresh) return it->second;
  LowPrecisionWeights& lw = it->second;
  std::mt19937 rng(9);
  std::normal_distribution<float> g(0.0f, 1.0f);
  constexpr int64_t kBand = 16;  // rows made at a time: q4 packs whole groups of 16
  std::vector<float> band(static_cast<size_t>(kBand * in));
  lw.bf16.resize(size_t(out) * in);
  lw.f16.resize(size_t(out) * in);
  lw.q8.resize(size_t(out) * in);
  lw.q8_scales.resize(size_t(out * cpu::Q8BlocksPerRow(in)));
  lw.q4.resize(size_t(cpu::Q4Bytes(out, in)));
  lw.q4k.resize(size_t(cpu::Q4KBytes(out, in)));
  lw.q6k.resize(size_t(cpu::Q6KBytes(out, in)));
  lw.q5k.resize(size_t(cpu::Q5KBytes(out, in)));
  for (int64_t b = 0; b < out * cpu::Q5KBlocksPerRow(in); ++b) {
    uint8_t* block = lw.q5k.data() + b * cpu::kQ5KBlockBytes;
    const uint16_t d[2] = {cpu::FloatToF16(1e-3f), cpu::FloatToF16(2e-3f)};
    std::memcpy(block, d, 4);
    for (int i = 4; i < cpu::kQ5KBlockBytes; ++i) block[i] = uint8_t(rng());
  }
  for (int64_t b = 0; b < out * cpu::Q6KBlocksPerRow(in); ++b) {
    uint8_t* block = lw.q6k.data() + b * cpu::kQ6KBlockBytes;
    for (int i = 0; i < 208; ++i) block[i] = uint8_t(rng());
    const uint16_t d = cpu::FloatToF16(1e-3f);
    std::memcpy(block + 208, &d, 2);
  }
  for (int64_t j0 = 0; j0 < out; j0 += kBand) {
    const int64_t n = std::min<int64_t>(kBand, out - j0);
    for (int64_t i = 0; i < n * in; ++i) band[size_t(i)] = g(rng);
    for (int64_t i = 0; i < n * in; ++i) lw.bf16[size_t(j0 * in + i)] = cpu::FloatToBf16(band[size_t(i)]);
    for (int64_t i = 0; i < n * in; ++i) lw.f16[size_t(j0 * in + i)] = cpu::FloatToF16(band[size_t(i)]);
    cpu::QuantizeQ8(band.data(), n, in, lw.q8.data() + j0 * in, lw.q8_scales.data() + j0 * cpu::Q8BlocksPerRow(in));
    cpu::QuantizeQ4(band.data(), n, in, lw.q4.data() + cpu::Q4Bytes(j0, in));
    cpu::QuantizeQ4K(band.data(), n, in, lw.q4k.data() + cpu::Q4KBytes(j0, in));
  }
  if (cpu::Bf16DotAvailable()) {
    lw.bf16_dot.resize(size_t(cpu::Bf16DotPackedSize(out, in)));
    cpu::PackBf16Dot(lw.bf16.data(), out, in, lw.bf16_dot.data());
  }
  if (cpu::F16DotRunsOn(cpu::Bf16Path::kAvx2)) {
    lw.f16_dot.resize(size_t(cpu::F16DotPackedSize(out, in)));
    cpu::PackF16Dot(lw.f16.data(), out, in, lw.f16_dot.data());
  }
  if (cpu::Int8DotAvailable()) {
    lw.q8_dot.resize(size_t(cpu::Q8DotPackedSize(out, in)));
    cpu::PackQ8Dot({lw.q8.data(), lw.q8_scales.data()}, out, in, lw.q8_dot.data());
    lw.q4_dot.resize(size_t(cpu::Q4DotPackedSize(out, in)));
    cpu::PackQ4Dot({lw.q4.data()}, out, in, lw.q4_dot.data());
    lw.q4k_dot.resize(size_t(cpu::Q4KDotPackedSize(out, in)));
    cpu::PackQ4KDot(lw.q4k_weights(), out, in, lw.q4k_dot.data());
    lw.q5k_dot.resize(size_t(cpu::Q5KDotPackedSize(out, in)));
    cpu::PackQ5KDot({lw.q5k.data()}, out, in, lw.q5k_dot.data());
    lw.q6k_dot.resize(size_t(cpu::Q6KDotPackedSize(out, in)));
    cpu::PackQ6KDot({lw.q6k.data()}, out, in, lw.q6k_dot.data());
  }
  return lw;
}

// What runs beside the 12 VPDPBUSD of BM_VpdpbusdIssue's loop (4 of each a turn); kBf16: 12
// VDPBF16PS in their place and nothing beside (BM_Vdpbf16psIssue); kAvx2Product: 12 of AVX2's int8
// products in their place (BM_MaddubswIssue); kAvx2Fma: 12 256-bit FMAs (BM_FmaIssue).
enum class Beside { kNothing, kFma, kMulps, kVpmulld, kCvt, kUnpack, kBf16, kAvx2Product, kAvx2Fma };
constexpr int64_t kIssueTurns = 1 << 24;  // turns of the loop per thread and iteration
#if defined(__x86_64__)
constexpr bool kX86 = true;
#else
constexpr bool kX86 = false;
#endif

#if defined(__x86_64__)
// One thread's turns of 12 VPDPBUSD (and 4 of kBeside), each into an accumulator of its own so that
// none waits for another; the empty asm keeps every register live and the loop from being folded.
template <Beside kBeside>
__attribute__((target("avx512f,avx512bw,avx512vnni,avx512bf16"))) int32_t IssueLoop(int64_t turns) {
  __m512i a0 = _mm512_set1_epi32(1), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0,
          a9 = a0, a10 = a0, a11 = a0;
  __m512i e0 = _mm512_set1_epi32(3), e1 = e0, e2 = e0, e3 = e0;
  __m512 f0 = _mm512_set1_ps(1.0f), f1 = f0, f2 = f0, f3 = f0;
  const __m512i w = _mm512_set1_epi32(0x01020304), x = _mm512_set1_epi32(0x01010101), low = _mm512_set1_epi8(0x0f);
  const __m512 m = _mm512_set1_ps(0.999f);
  for (int64_t t = 0; t < turns; ++t) {
#define STEADY_DP(acc)                                                                                                   \
  acc = kBeside == Beside::kBf16 ? _mm512_castps_si512(_mm512_dpbf16_ps(_mm512_castsi512_ps(acc), (__m512bh)w, (__m512bh)x)) \
                                 : _mm512_dpbusd_epi32(acc, w, x);
    STEADY_DP(a0) STEADY_DP(a1) STEADY_DP(a2) STEADY_DP(a3) STEADY_DP(a4) STEADY_DP(a5)
    STEADY_DP(a6) STEADY_DP(a7) STEADY_DP(a8) STEADY_DP(a9) STEADY_DP(a10) STEADY_DP(a11)
#undef STEADY_DP
    if constexpr (kBeside == Beside::kFma) {
      f0 = _mm512_fmadd_ps(f0, m, m), f1 = _mm512_fmadd_ps(f1, m, m), f2 = _mm512_fmadd_ps(f2, m, m), f3 = _mm512_fmadd_ps(f3, m, m);
    } else if constexpr (kBeside == Beside::kMulps) {
      f0 = _mm512_mul_ps(f0, m), f1 = _mm512_mul_ps(f1, m), f2 = _mm512_mul_ps(f2, m), f3 = _mm512_mul_ps(f3, m);
    } else if constexpr (kBeside == Beside::kVpmulld) {
      e0 = _mm512_mullo_epi32(e0, w), e1 = _mm512_mullo_epi32(e1, w), e2 = _mm512_mullo_epi32(e2, w), e3 = _mm512_mullo_epi32(e3, w);
    } else if constexpr (kBeside == Beside::kCvt) {
      f0 = _mm512_maskz_cvtepi32_ps(0xffff, e0), f1 = _mm512_maskz_cvtepi32_ps(0xffff, e1);
      f2 = _mm512_maskz_cvtepi32_ps(0xffff, e2), f3 = _mm512_maskz_cvtepi32_ps(0xffff, e3);  // maskz: no undefined source
    } else if constexpr (kBeside == Beside::kUnpack) {
      e0 = _mm512_and_si512(_mm512_srli_epi16(e0, 4), low), e1 = _mm512_and_si512(_mm512_srli_epi16(e1, 4), low);
      e2 = _mm512_and_si512(_mm512_srli_epi16(e2, 4), low), e3 = _mm512_and_si512(_mm512_srli_epi16(e3, 4), low);
    }
    __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7), "+v"(a8),
                     "+v"(a9), "+v"(a10), "+v"(a11));
    __asm__ volatile("" : "+v"(e0), "+v"(e1), "+v"(e2), "+v"(e3), "+v"(f0), "+v"(f1), "+v"(f2), "+v"(f3));
  }
  __m512i sum = _mm512_xor_si512(_mm512_castps_si512(_mm512_add_ps(_mm512_add_ps(f0, f1), _mm512_add_ps(f2, f3))),
                                 _mm512_add_epi32(_mm512_add_epi32(e0, e1), _mm512_add_epi32(e2, e3)));
  for (__m512i v : {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11}) sum = _mm512_add_epi32(sum, v);
  alignas(64) int32_t lanes[16];
  _mm512_store_si512(lanes, sum);
  return lanes[0];  // a lane of every register: nothing folds away
}

// 12 AVX2 int8 products a turn, each VPMADDUBSW, VPMADDWD by ones and VPADDD into an accumulator of
// its own (32 int8 multiply-adds: what the AVX2 kernels take where VPDPBUSD takes one instruction for
// 64), each product reading its accumulator so that none is computed once for all; 12 chains of a
// few cycles' latency keep the pipes full.
__attribute__((target("avx2"))) int32_t Avx2ProductLoop(int64_t turns) {
  __m256i a0 = _mm256_set1_epi32(0x01020304), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0,
          a9 = a0, a10 = a0, a11 = a0;
  const __m256i w = _mm256_set1_epi8(3), ones = _mm256_set1_epi16(1);
  for (int64_t t = 0; t < turns; ++t) {
#define STEADY_P(acc) acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(acc, w), ones));
    STEADY_P(a0) STEADY_P(a1) STEADY_P(a2) STEADY_P(a3) STEADY_P(a4) STEADY_P(a5)
    STEADY_P(a6) STEADY_P(a7) STEADY_P(a8) STEADY_P(a9) STEADY_P(a10) STEADY_P(a11)
#undef STEADY_P
    __asm__ volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5), "+x"(a6), "+x"(a7), "+x"(a8),
                     "+x"(a9), "+x"(a10), "+x"(a11));
  }
  __m256i sum = a0;
  for (__m256i v : {a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11}) sum = _mm256_add_epi32(sum, v);
  alignas(32) int32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), sum);
  return lanes[0];
}

// 12 VFMADD231PS on ymm registers a turn, each into an accumulator of its own (12 chains of 4 cycles'
// latency keep two FMA pipes full): what the AVX2 bf16 kernel's fused multiply-adds are held against.
__attribute__((target("avx2,fma"))) int32_t Avx2FmaLoop(int64_t turns) {
  __m256 a0 = _mm256_set1_ps(1.0f), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0, a9 = a0,
         a10 = a0, a11 = a0;
  const __m256 m = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(1e-3f);  // converges to 1: no subnormals
  for (int64_t t = 0; t < turns; ++t) {
#define STEADY_F(acc) acc = _mm256_fmadd_ps(acc, m, c);
    STEADY_F(a0) STEADY_F(a1) STEADY_F(a2) STEADY_F(a3) STEADY_F(a4) STEADY_F(a5)
    STEADY_F(a6) STEADY_F(a7) STEADY_F(a8) STEADY_F(a9) STEADY_F(a10) STEADY_F(a11)
#undef STEADY_F
    __asm__ volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5), "+x"(a6), "+x"(a7), "+x"(a8),
                     "+x"(a9), "+x"(a10), "+x"(a11));
  }
  __m256 sum = a0;
  for (__m256 v : {a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11}) sum = _mm256_add_ps(sum, v);
  return int32_t(_mm256_cvtss_f32(sum));
}

int32_t IssueLoop(Beside beside, int64_t turns) {
  switch (beside) {
    case Beside::kAvx2Product: return Avx2ProductLoop(turns);
    case Beside::kAvx2Fma: return Avx2FmaLoop(turns);
    case Beside::kNothing: return IssueLoop<Beside::kNothing>(turns);
    case Beside::kFma: return IssueLoop<Beside::kFma>(turns);
    case Beside::kMulps: return IssueLoop<Beside::kMulps>(turns);
    case Beside::kVpmulld: return IssueLoop<Beside::kVpmulld>(turns);
    case Beside::kCvt: return IssueLoop<Beside::kCvt>(turns);
    case Beside::kUnpack: return IssueLoop<Beside::kUnpack>(turns);
    case Beside::kBf16: return IssueLoop<Beside::kBf16>(turns);
  }
  return 0;
}
#endif

// The loop on every compute thread at once, `turns` each: the seconds it took, and its
// instructions (VPDPBUSD, or VDPBF16PS) a second.
struct IssueRun {
  double seconds = 0, rate = 0;
};
IssueRun RunIssue(Beside beside, int64_t turns) {
  std::atomic<int32_t> sink{0};
  const auto start = std::chrono::steady_clock::now();
#if defined(__x86_64__)
  cpu::ParallelFor(cpu::ComputeThreads(), [&](int) { sink += IssueLoop(beside, turns); });
#else
  (void)beside, (void)turns;  // BM_VpdpbusdIssue skips and ReportPeakFraction never asks off x86
#endif
  benchmark::DoNotOptimize(sink.load());
  IssueRun run;
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.rate = 12.0 * double(turns) * cpu::ComputeThreads() / run.seconds;
  return run;
}

// The multiply-adds a second of `loop` alone (kNothing: VPDPBUSD, 64 int8 ones each; kBf16:
// VDPBF16PS, 32 bf16 ones) on every compute thread, the best of three runs of about a tenth of a
// second each.
double MeasurePeak(Beside loop, double macs_per_instruction) {
  double best = 0;
  RunIssue(loop, kIssueTurns / 16);  // warm up
  for (int i = 0; i < 3; ++i) best = std::max(best, macs_per_instruction * RunIssue(loop, kIssueTurns / 8).rate);
  return best;
}
// Each measured at its first call.
double Int8Peak() {
  static const double peak = MeasurePeak(Beside::kNothing, 64);
  return peak;
}
double Bf16Peak() {
  static const double peak = MeasurePeak(Beside::kBf16, 32);
  return peak;
}
double Avx2Int8Peak() {
  static const double peak = MeasurePeak(Beside::kAvx2Product, 32);
  return peak;
}
double Avx2FmaPeak() {  // in multiply-adds: 8 an FMA (the AVX2 bf16 and f16 kernels)
  static const double peak = MeasurePeak(Beside::kAvx2Fma, 8);
  return peak;
}

// The benchmark's iterations of the loop (each timed as its own): the best one's rate.
double BestIssueRate(benchmark::State& state, Beside loop) {
  double rate = 0;
  for (auto _ : state) {
    const IssueRun run = RunIssue(loop, kIssueTurns / 8);
    state.SetIterationTime(run.seconds);
    rate = std::max(rate, run.rate);
  }
  return rate;
}

void BM_VpdpbusdIssue(benchmark::State& state) {
  if (!cpu::Int8PathAvailable(cpu::Int8Path::kAvx512Vnni)) return state.SkipWithError("no AVX512_VNNI on this CPU");
  const double rate = BestIssueRate(state, Beside(state.range(0)));
  state.counters["G_VPDPBUSD_per_s"] = rate / 1e9;
  state.counters["int8_GMACs"] = 64 * rate / 1e9;
  state.counters["threads"] = cpu::ComputeThreads();
  static const char* const kBeside[] = {"alone", "+4 VFMADD231PS", "+4 VMULPS", "+4 VPMULLD", "+4 VCVTDQ2PS",
                                        "+4 VPSRLW and VPANDD"};
  state.SetLabel(kBeside[state.range(0)]);
}
BENCHMARK(BM_VpdpbusdIssue)->DenseRange(0, 5)->ArgNames({"beside"})->Unit(benchmark::kMillisecond)->UseManualTime()
    ->Iterations(5);

// The same loop with 12 VDPBF16PS: the peak the bf16 kernel's `peak_fraction` divides by.
void BM_Vdpbf16psIssue(benchmark::State& state) {
  if (!kX86 || !cpu::Bf16PathAvailable(cpu::Bf16Path::kAvx512Bf16)) return state.SkipWithError("no AVX512_BF16 on this CPU");
  const double rate = BestIssueRate(state, Beside::kBf16);
  state.counters["G_VDPBF16PS_per_s"] = rate / 1e9;
  state.counters["bf16_GMACs"] = 32 * rate / 1e9;
  state.counters["threads"] = cpu::ComputeThreads();
}
BENCHMARK(BM_Vdpbf16psIssue)->Unit(benchmark::kMillisecond)->UseManualTime()->Iterations(5);

// The same loop with 12 of AVX2's int8 products (VPMADDUBSW, VPMADDWD, VPADDD: 32 multiply-adds):
// the peak the AVX2 int8 kernels' `peak_fraction` divides by (the kernels add a VPSIGNB per product
// and a VPXOR and VPABSB per weight vector, on other pipes).
void BM_MaddubswIssue(benchmark::State& state) {
  if (!kX86 || !cpu::Int8PathAvailable(cpu::Int8Path::kAvx2)) return state.SkipWithError("no AVX2 on this CPU");
  const double rate = BestIssueRate(state, Beside::kAvx2Product);
  state.counters["G_products_per_s"] = rate / 1e9;
  state.counters["int8_GMACs"] = 32 * rate / 1e9;
  state.counters["threads"] = cpu::ComputeThreads();
}
BENCHMARK(BM_MaddubswIssue)->Unit(benchmark::kMillisecond)->UseManualTime()->Iterations(5);

// The same loop with 12 256-bit FMAs (8 multiply-adds each): the peak the AVX2 bf16 kernel's
// `peak_fraction` divides by.
void BM_FmaIssue(benchmark::State& state) {
  if (!kX86 || !cpu::Bf16PathAvailable(cpu::Bf16Path::kAvx2)) return state.SkipWithError("no AVX2 and FMA on this CPU");
  const double rate = BestIssueRate(state, Beside::kAvx2Fma);
  state.counters["G_FMA_per_s"] = rate / 1e9;
  state.counters["GMACs"] = 8 * rate / 1e9;
  state.counters["threads"] = cpu::ComputeThreads();
}
BENCHMARK(BM_FmaIssue)->Unit(benchmark::kMillisecond)->UseManualTime()->Iterations(5);

template <typename Fn>
void RunLowPrecision(benchmark::State& state, double weight_bytes_x8, const char* label, const Fn& fn) {
  const int rows = int(state.range(0)), in = int(state.range(1)), out = int(state.range(2));
  const LowPrecisionWeights& lw = WeightsFor(in, out);
  std::vector<float> x(size_t(rows) * in), y(size_t(rows) * out);
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (float& v : x) v = g(rng);
  for (auto _ : state) {
    fn(x.data(), rows, in, lw, out, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(int64_t(double(state.iterations()) * double(in) * out * weight_bytes_x8 / 8));
  state.counters["GFLOPs"] = benchmark::Counter(2.0 * rows * in * out, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = cpu::ComputeThreads();
  state.SetLabel(label);
}

// A kernel's multiply-adds a second as a share of `peak` (a rate counter of multiply-adds / peak per
// iteration is that share; the console prints it with a "/s"): an int8 kernel on AVX512_VNNI
// against Int8Peak(), on AVX2 against Avx2Int8Peak(), the bf16 kernel against Bf16Peak().
void ReportPeakFraction(benchmark::State& state, double peak) {
  const double macs = double(state.range(0)) * double(state.range(1)) * double(state.range(2));
  state.counters["peak_fraction"] = benchmark::Counter(macs / peak, benchmark::Counter::kIsIterationInvariantRate);
}
void ReportPeakFraction(benchmark::State& state) {
  if (cpu::CurrentInt8Path() == cpu::Int8Path::kAvx512Vnni) ReportPeakFraction(state, Int8Peak());
  if (cpu::CurrentInt8Path() == cpu::Int8Path::kAvx2) ReportPeakFraction(state, Avx2Int8Peak());
}

void BM_Bf16Widening(benchmark::State& state) {
  RunLowPrecision(state, 16, cpu::SimdTargetName(), [](const float* x, int rows, int in, const LowPrecisionWeights& lw,
                                                        int out, float* y) {
    cpu::MatMulNTBf16(x, rows, in, lw.bf16.data(), out, y);
  });
}
// The bf16 paths by argument 3 ("path:N" in the names): 0 AVX512_BF16, 1 AVX2, 2 Arm BF16.
constexpr cpu::Bf16Path kBenchBf16Paths[] = {cpu::Bf16Path::kAvx512Bf16, cpu::Bf16Path::kAvx2, cpu::Bf16Path::kArmBf16};
struct WidestBf16PathAfter {
  ~WidestBf16PathAfter() { cpu::SetBf16Path(cpu::WidestBf16Path()); }
};
void BM_Bf16Dot(benchmark::State& state) {
  const cpu::Bf16Path path = kBenchBf16Paths[state.range(3)];
  if (!cpu::Bf16PathAvailable(path)) return state.SkipWithError("this CPU lacks the bf16 path");
  cpu::SetBf16Path(path);
  WidestBf16PathAfter restore;
  RunLowPrecision(state, 16, cpu::Bf16DotPath(), [](const float* x, int rows, int in, const LowPrecisionWeights& lw,
                                                     int out, float* y) {
    cpu::MatMulNTBf16Dot(x, rows, in, lw.bf16_dot.data(), out, y);
  });
  // Against VDPBF16PS's or the FMAs' issue rate (the Arm kernels have no issue loop).
  if (path == cpu::Bf16Path::kAvx512Bf16) ReportPeakFraction(state, Bf16Peak());
  if (path == cpu::Bf16Path::kAvx2) ReportPeakFraction(state, Avx2FmaPeak());
}
// f16 weights: the widening kernel (F16C in registers, row-major) and the packed kernel (AVX2's FMAs,
// fp32 activations), which runs where bf16 takes AVX2's FMAs (set here for the run).
void BM_F16Widening(benchmark::State& state) {
  RunLowPrecision(state, 16, cpu::SimdTargetName(), [](const float* x, int rows, int in, const LowPrecisionWeights& lw,
                                                        int out, float* y) {
    cpu::MatMulNTF16(x, rows, in, lw.f16.data(), out, y);
  });
}
void BM_F16Dot(benchmark::State& state) {
  if (!cpu::F16DotRunsOn(cpu::Bf16Path::kAvx2)) return state.SkipWithError("this CPU lacks AVX2, FMA or F16C");
  cpu::SetBf16Path(cpu::Bf16Path::kAvx2);
  WidestBf16PathAfter restore;
  RunLowPrecision(state, 16, cpu::F16DotPath(), [](const float* x, int rows, int in, const LowPrecisionWeights& lw,
                                                    int out, float* y) {
    cpu::MatMulNTF16Dot(x, rows, in, lw.f16_dot.data(), out, y);
  });
  ReportPeakFraction(state, Avx2FmaPeak());
}
// q8_0 is 9 bytes per 8 weights: the int8 values and an fp32 scale per 32.
void BM_Q8Widening(benchmark::State& state) {
  RunLowPrecision(state, 9, cpu::SimdTargetName(), [](const float* x, int rows, int in, const LowPrecisionWeights& lw,
                                                       int out, float* y) {
    cpu::MatMulNTQ8(x, rows, in, {lw.q8.data(), lw.q8_scales.data()}, out, y);
  });
}
// The int8 paths by argument 3 ("path:N" in the names): 0 AVX512_VNNI, 1 AVX-VNNI, 2 AVX2, 3 SMMLA,
// 4 SDOT, 5 AMX-INT8 (numbered so, not by the enum, so that earlier runs' filters still name the same paths).
constexpr cpu::Int8Path kBenchInt8Paths[] = {cpu::Int8Path::kAvx512Vnni, cpu::Int8Path::kAvxVnni, cpu::Int8Path::kAvx2,
                                             cpu::Int8Path::kArmI8mm, cpu::Int8Path::kArmDot, cpu::Int8Path::kAmxInt8};
// The int8 kernels on the path of argument 3, the widest again afterwards; false where the CPU lacks it.
bool UseInt8Path(benchmark::State& state) {
  const cpu::Int8Path path = kBenchInt8Paths[state.range(3)];
  if (!cpu::Int8PathAvailable(path)) {
    state.SkipWithError("this CPU lacks the int8 path");
    return false;
  }
  cpu::SetInt8Path(path);
  return true;
}
struct WidestInt8PathAfter {
  ~WidestInt8PathAfter() { cpu::SetInt8Path(cpu::WidestInt8Path()); }
};

void BM_Q8Dot(benchmark::State& state) {
  if (!UseInt8Path(state)) return;
  WidestInt8PathAfter restore;
  RunLowPrecision(state, 9, cpu::Int8DotPath(), [](const float* x, int rows, int in, const LowPrecisionWeights& lw,
                                                   int out, float* y) {
    cpu::MatMulNTQ8Dot(x, rows, in, lw.q8_dot.data(), out, y);
  });
  ReportPeakFraction(state);
}
// q4_0 is 18 bytes per 32 weights: 4 bits each and an fp16 scale.
void BM_Q4Widening(benchmark::State& state) {
  RunLowPrecision(state, 4.5, cpu::SimdTargetName(), [](const float* x, int rows, int in,
                                                               const LowPrecisionWeights& lw, int out, float* y) {
    cpu::MatMulNTQ4(x, rows, in, {lw.q4.data()}, out, y);
  });
}
void BM_Q4Dot(benchmark::State& state) {
  if (!UseInt8Path(state)) return;
  WidestInt8PathAfter restore;
  RunLowPrecision(state, 4.5, cpu::Int8DotPath(), [](const float* x, int rows, int in, const LowPrecisionWeights& lw,
                                                    int out, float* y) {
    cpu::MatMulNTQ4Dot(x, rows, in, lw.q4_dot.data(), out, y);
  });
  ReportPeakFraction(state);
}

// q4k is 144 bytes per 256 weights (4.5 bits): per 256 two fp16, 12 bytes of scales and the nibbles
// (packed: 4.625 bits, the scales a byte each).
void BM_Q4KWidening(benchmark::State& state) {
  RunLowPrecision(state, 4.5, cpu::SimdTargetName(), [](const float* x, int rows, int in,
                                                               const LowPrecisionWeights& lw, int out, float* y) {
    cpu::MatMulNTQ4K(x, rows, in, lw.q4k_weights(), out, y);
  });
}
void BM_Q4KDot(benchmark::State& state) {
  if (!UseInt8Path(state)) return;
  WidestInt8PathAfter restore;
  RunLowPrecision(state, 37 * 8 / 64.0, cpu::Int8DotPath(), [](const float* x, int rows, int in,
                                                            const LowPrecisionWeights& lw, int out, float* y) {
    cpu::MatMulNTQ4KDot(x, rows, in, lw.q4k_dot.data(), out, y);
  });
  ReportPeakFraction(state);
}
// q5k is 176 bytes per 256 weights (5.5 bits; packed: 5.625, the scales a byte each).
void BM_Q5KWidening(benchmark::State& state) {
  RunLowPrecision(state, 5.5, cpu::SimdTargetName(), [](const float* x, int rows, int in,
                                                       const LowPrecisionWeights& lw, int out, float* y) {
    cpu::MatMulNTQ5K(x, rows, in, {lw.q5k.data()}, out, y);
  });
}
void BM_Q5KDot(benchmark::State& state) {
  if (!UseInt8Path(state)) return;
  WidestInt8PathAfter restore;
  RunLowPrecision(state, 5.625, cpu::Int8DotPath(), [](const float* x, int rows, int in,
                                                     const LowPrecisionWeights& lw, int out, float* y) {
    cpu::MatMulNTQ5KDot(x, rows, in, lw.q5k_dot.data(), out, y);
  });
  ReportPeakFraction(state);
}
// q6k is 210 bytes per 256 weights (6.5625 bits), row-major or packed.
void BM_Q6KWidening(benchmark::State& state) {
  RunLowPrecision(state, 6.5625, cpu::SimdTargetName(), [](const float* x, int rows, int in,
                                                         const LowPrecisionWeights& lw, int out, float* y) {
    cpu::MatMulNTQ6K(x, rows, in, {lw.q6k.data()}, out, y);
  });
}
void BM_Q6KDot(benchmark::State& state) {
  if (!UseInt8Path(state)) return;
  WidestInt8PathAfter restore;
  RunLowPrecision(state, 6.5625, cpu::Int8DotPath(), [](const float* x, int rows, int in,
                                                      const LowPrecisionWeights& lw, int out, float* y) {
    cpu::MatMulNTQ6KDot(x, rows, in, lw.q6k_dot.data(), out, y);
  });
  ReportPeakFraction(state);
}

// Llama 3.2 1B: q/o 2048x2048, gate/up 2048->8192, down 8192->2048, the head 2048->128256.
void DotShapes(benchmark::internal::Benchmark* b) {
  for (const auto& [in, out] : {std::pair{2048, 2048}, std::pair{2048, 8192}, std::pair{8192, 2048}, std::pair{2048, 128256}}) {
    for (int rows : {1, 4, 16, 64}) b->Args({rows, in, out});
  }
}
BENCHMARK(BM_Bf16Widening)->Apply(DotShapes)->ArgNames({"rows", "in", "out"})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_Q8Widening)->Apply(DotShapes)->ArgNames({"rows", "in", "out"})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_F16Widening)->Apply(DotShapes)->ArgNames({"rows", "in", "out"})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_F16Dot)->Apply(DotShapes)->ArgNames({"rows", "in", "out"})->Unit(benchmark::kMicrosecond)->UseRealTime();
// DotShapes on each bf16 path.
void Bf16DotShapes(benchmark::internal::Benchmark* b) {
  for (const auto& [in, out] : {std::pair{2048, 2048}, std::pair{2048, 8192}, std::pair{8192, 2048}, std::pair{2048, 128256}}) {
    for (int rows : {1, 4, 16, 64}) {
      for (int64_t path = 0; path < int64_t(std::size(kBenchBf16Paths)); ++path) b->Args({rows, in, out, path});
    }
  }
}
BENCHMARK(BM_Bf16Dot)->Apply(Bf16DotShapes)->ArgNames({"rows", "in", "out", "path"})->Unit(benchmark::kMicrosecond)->UseRealTime();
// DotShapes on each int8 path.
void Int8DotShapes(benchmark::internal::Benchmark* b) {
  for (const auto& [in, out] : {std::pair{2048, 2048}, std::pair{2048, 8192}, std::pair{8192, 2048}, std::pair{2048, 128256}}) {
    for (int rows : {1, 4, 16, 64}) {
      for (int64_t path = 0; path < int64_t(std::size(kBenchInt8Paths)); ++path) b->Args({rows, in, out, path});
    }
  }
}
BENCHMARK(BM_Q4Widening)->Apply(DotShapes)->ArgNames({"rows", "in", "out"})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_Q4Dot)->Apply(Int8DotShapes)->ArgNames({"rows", "in", "out", "path"})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_Q4KWidening)->Apply(DotShapes)->ArgNames({"rows", "in", "out"})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_Q4KDot)->Apply(Int8DotShapes)->ArgNames({"rows", "in", "out", "path"})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_Q5KWidening)->Apply(DotShapes)->ArgNames({"rows", "in", "out"})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_Q5KDot)->Apply(Int8DotShapes)->ArgNames({"rows", "in", "out", "path"})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_Q6KWidening)->Apply(DotShapes)->ArgNames({"rows", "in", "out"})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_Q6KDot)->Apply(Int8DotShapes)->ArgNames({"rows", "in", "out", "path"})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_Q8Dot)->Apply(Int8DotShapes)->ArgNames({"rows", "in", "out", "path"})->Unit(benchmark::kMicrosecond)->UseRealTime();

// sliced_relu's score projections (cpu::MatVecsF64: fp32 weights, fp64 vectors and sums) at
// llama1b's query side, the MLP's 2048 x 2048: one vector (a lone session) to a batch's 64.
// Args: vectors, in (= rows of w).
void BM_MatVecsF64(benchmark::State& state) {
  const int n = int(state.range(0)), in = int(state.range(1)), rows = in;
  const Buffers b = Make(1, in, rows);
  std::vector<double> x(size_t(n) * in), y(size_t(n) * rows);
  for (size_t i = 0; i < x.size(); ++i) x[i] = b.w[i % b.w.size()];
  const std::vector<float> bias(rows, 0.5f);
  for (auto _ : state) {
    cpu::MatVecsF64(b.w.data(), rows, in, n, x.data(), bias.data(), y.data());
    benchmark::DoNotOptimize(y.data());
  }
  Report(state, n, in, rows);
  state.SetLabel(cpu::SimdTargetName());
}
BENCHMARK(BM_MatVecsF64)->ArgsProduct({{1, 4, 16, 64}, {512, 2048}})->ArgNames({"vectors", "in"})
    ->Unit(benchmark::kMicrosecond)->UseRealTime();

BENCHMARK(BM_SmallRowsKernel)->Apply(Shapes)->ArgNames({"rows", "in", "out"})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_SmallRowsBf16)->Apply(Shapes)->ArgNames({"rows", "in", "out"})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_AmxBf16)->Apply(Shapes)->ArgNames({"rows", "in", "out"})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_OpenBlas)->Apply(Shapes)->ArgNames({"rows", "in", "out"})->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace steady

// Google Benchmark's main, after taking `--threads=N` or `--threads N` (the compute threads, as steady's --threads;
// every core by default) out of the arguments.
int main(int argc, char** argv) {
  std::vector<std::string> ours;  // --threads=N, or --threads N
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--threads=", 10) == 0) {
      ours.push_back(argv[i]);
    } else if (std::strcmp(argv[i], "--threads") == 0) {
      ours.push_back(argv[i]);
      if (i + 1 < argc) ours.push_back(argv[++i]);
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  const std::string usage = "usage: matmul_bench [--threads=N] [Google Benchmark flags]\n";
  const absl::StatusOr<steady::Flags> flags = steady::Flags::Parse(ours, {.with_value = {"threads"}});
  steady::ExitOnUsageError(argv[0], flags.status(), usage);
  const absl::StatusOr<int64_t> threads = flags->GetInt("threads", 0, 1, 4096);
  steady::ExitOnUsageError(argv[0], threads.status(), usage);
  if (*threads > 0) steady::cpu::SetComputeThreads(int(*threads));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
