// kernels/cuda against kernels/cpu on fresh random inputs (seed printed; STEADY_TEST_SEED replays).
// Every output buffer is poisoned with NaN (all bytes 0xFF) before the op, and every element is
// checked, so an element the kernel never wrote fails. Without a CUDA device every GPU test is
// SKIPPED with the reason, never passed.
//
// Tolerances (per op and dtype; the reason is beside each constant):
//   RmsNorm fp32   |d| <= 2e-5 * max(1, |ref|): fp32 block reduction vs the CPU's fp64 sum.
//   RmsNorm bf16   |d| <= 2^-7 * |ref| + 1e-6: output rounded to bf16 (2^-9 relative) plus the
//                  inverse rms in fp32; inputs are the same bf16 values on both sides.
//   RoPE fp32      |d| <= 1e-5 * (1 + |ref|): fp32 angle after fp64 reduction (<= 5e-7 rad) and
//                  fp32 sincosf vs the CPU's fp64 cos/sin rounded to fp32.
//   SwiGLU fp32    |d| <= 2e-6 * |ref| + 1e-7: expf and the division, a few ulps.
//   Add, Gather, bf16 conversions: exact (correctly rounded on both sides, or copies).
//   GEMM fp32      |d| <= 1e-5 * sum_k |x_k w_k| + 1e-6: fp32 accumulation in a different order
//                  (no TF32: the handle uses CUBLAS_DEFAULT_MATH).
//   GEMM bf16      |d| <= 5e-5 * sum_k |x_k w_k| + 1e-6: bf16 inputs (rounded the same on both
//                  sides, so products are exact in fp32), tensor-core fp32 accumulation.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/ops.h"
#include "tests/kernels/cuda_test_util.h"

namespace steady::cuda {
namespace {

// Runs everywhere: the device query must answer (false here) without aborting.
TEST(CudaDeviceTest, DeviceQueryDoesNotAbort) {
  const bool available = CudaDeviceAvailable();
  std::printf("CUDA device available: %s\n", available ? "yes" : "no");
  EXPECT_EQ(available, CudaDeviceAvailable());  // stable across calls (no sticky error)
}

TEST_F(CudaOpsTest, RmsNormFp32) {
  for (const int dim : {8, 96, 1000, 4099}) {
    const int rows = 5;
    const auto x = Randn(size_t(rows) * dim, 3.0), w = Randn(dim);
    std::vector<float> ref(x.size());
    cpu::RmsNorm(x.data(), w.data(), rows, dim, 1e-6f, ref.data());
    DeviceBuffer dx = Upload(x), dw = Upload(w), dout = Poisoned<float>(x.size());
    RmsNorm(dx.as<float>(), dw.as<float>(), rows, dim, 1e-6f, dout.as<float>(), stream_);
    Sync();
    ExpectClose(Download<float>(dout, x.size()), ref,
                [](size_t, float r) { return 2e-5 * std::max(1.0, std::fabs(double(r))); }, "rmsnorm");
    // In place (out aliases x).
    RmsNorm(dx.as<float>(), dw.as<float>(), rows, dim, 1e-6f, dx.as<float>(), stream_);
    Sync();
    ExpectClose(Download<float>(dx, x.size()), ref,
                [](size_t, float r) { return 2e-5 * std::max(1.0, std::fabs(double(r))); }, "rmsnorm in place");
  }
}

TEST_F(CudaOpsTest, RmsNormBf16) {
  const int rows = 6, dim = 2050;
  auto x = Randn(size_t(rows) * dim, 2.0);
  const auto w = Randn(dim);
  std::vector<uint16_t> xb(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    xb[i] = ToBf16(x[i]);
    x[i] = FromBf16(xb[i]);  // the reference sees the same bf16 values
  }
  std::vector<float> ref(x.size());
  cpu::RmsNorm(x.data(), w.data(), rows, dim, 1e-6f, ref.data());
  DeviceBuffer dx = Upload(xb), dw = Upload(w), dout = Poisoned<uint16_t>(x.size());
  RmsNormBf16(dx.as<uint16_t>(), dw.as<float>(), rows, dim, 1e-6f, dout.as<uint16_t>(), stream_);
  Sync();
  const auto outb = Download<uint16_t>(dout, x.size());
  std::vector<float> got(outb.size());
  for (size_t i = 0; i < got.size(); ++i) got[i] = FromBf16(outb[i]);
  ExpectClose(got, ref, [](size_t, float r) { return std::ldexp(std::fabs(double(r)), -7) + 1e-6; },
              "rmsnorm bf16");
}

TEST_F(CudaOpsTest, Rope) {
  for (const double theta : {10000.0, 1000000.0}) {
    const int rows = 9, heads = 3, dim = 64;
    std::vector<float> inv_freq(dim / 2);
    for (int i = 0; i < dim / 2; ++i) inv_freq[i] = float(std::pow(theta, -2.0 * i / dim));
    std::vector<int64_t> pos(rows);
    std::uniform_int_distribution<int64_t> small(0, 4096), large(0, 2000000);
    for (int r = 0; r < rows; ++r) pos[r] = r % 2 ? large(rng_) : small(rng_);
    const auto x = Randn(size_t(rows) * heads * dim);
    auto ref = x;
    cpu::Rope(ref.data(), rows, heads, dim, pos.data(), inv_freq.data());
    DeviceBuffer dx = Upload(x), dpos = Upload(pos), dfreq = Upload(inv_freq);
    Rope(dx.as<float>(), rows, heads, dim, dpos.as<int64_t>(), dfreq.as<float>(), stream_);
    Sync();
    // In place, so it cannot be poisoned: an element left untouched keeps its input value, which
    // misses the rotated reference unless its angle is 0 mod 2*pi (random positions make that rare).
    ExpectClose(Download<float>(dx, x.size()), ref,
                [](size_t, float r) { return 1e-5 * (1.0 + std::fabs(double(r))); }, "rope");
  }
}

TEST_F(CudaOpsTest, SwiGlu) {
  const int64_t n = 100003;
  const auto gate = Randn(n, 4.0), up = Randn(n);
  std::vector<float> ref(n);
  cpu::SwiGlu(gate.data(), up.data(), n, ref.data());
  DeviceBuffer dg = Upload(gate), du = Upload(up), dout = Poisoned<float>(n);
  SwiGlu(dg.as<float>(), du.as<float>(), n, dout.as<float>(), stream_);
  Sync();
  ExpectClose(Download<float>(dout, n), ref,
              [](size_t, float r) { return 2e-6 * std::fabs(double(r)) + 1e-7; }, "swiglu");
}

TEST_F(CudaOpsTest, AddInPlace) {
  const int64_t n = 70001;
  const auto x = Randn(n), y = Randn(n);
  auto ref = x;
  cpu::AddInPlace(ref.data(), y.data(), n);
  DeviceBuffer dx = Upload(x), dy = Upload(y);
  AddInPlace(dx.as<float>(), dy.as<float>(), n, stream_);
  Sync();
  ExpectClose(Download<float>(dx, n), ref, [](size_t, float) { return 0.0; }, "add");
}

TEST_F(CudaOpsTest, GatherRows) {
  const int vocab = 301, dim = 129, rows = 37;
  const auto table = Randn(size_t(vocab) * dim);
  std::vector<int32_t> ids(rows);
  std::uniform_int_distribution<int32_t> pick(0, vocab - 1);
  for (auto& id : ids) id = pick(rng_);
  std::vector<float> ref(size_t(rows) * dim);
  cpu::GatherRows(table.data(), dim, ids.data(), rows, ref.data());
  DeviceBuffer dt = Upload(table), di = Upload(ids), dout = Poisoned<float>(ref.size());
  GatherRows(dt.as<float>(), dim, di.as<int32_t>(), rows, dout.as<float>(), stream_);
  Sync();
  ExpectClose(Download<float>(dout, ref.size()), ref, [](size_t, float) { return 0.0; }, "gather");
}

TEST_F(CudaOpsTest, Bf16Conversions) {
  const int64_t n = 4099;
  const auto x = Randn(n, 100.0);
  DeviceBuffer dx = Upload(x), db = Poisoned<uint16_t>(n), dback = Poisoned<float>(n);
  FloatToBf16(dx.as<float>(), n, db.as<uint16_t>(), stream_);
  Bf16ToFloat(db.as<uint16_t>(), n, dback.as<float>(), stream_);
  Sync();
  const auto bits = Download<uint16_t>(db, n);
  std::vector<float> got(n), ref(n);
  for (int64_t i = 0; i < n; ++i) {
    got[i] = FromBf16(bits[i]);
    ref[i] = FromBf16(ToBf16(x[i]));
  }
  ExpectClose(got, ref, [](size_t, float) { return 0.0; }, "float->bf16");
  ExpectClose(Download<float>(dback, n), ref, [](size_t, float) { return 0.0; }, "bf16->float");
}

// |d| <= rel * sum_k |x_k w_k| + 1e-6 for every y[r, o].
std::function<double(size_t, float)> GemmTol(const std::vector<float>& x, const std::vector<float>& w,
                                             int in, int out, double rel) {
  return [&x, &w, in, out, rel](size_t i, float) {
    const size_t r = i / out, o = i % out;
    double s = 0;
    for (int k = 0; k < in; ++k) s += std::fabs(double(x[r * in + k]) * w[o * size_t(in) + k]);
    return rel * s + 1e-6;
  };
}

TEST_F(CudaOpsTest, MatMulNTFp32) {
  Blas blas(stream_);
  for (const int rows : {1, 3, 17}) {
    const int in = 257, out = 129;
    const auto x = Randn(size_t(rows) * in), w = Randn(size_t(out) * in);
    std::vector<float> ref(size_t(rows) * out);
    cpu::MatMulNT(x.data(), rows, in, w.data(), out, ref.data());
    DeviceBuffer dx = Upload(x), dw = Upload(w), dy = Poisoned<float>(ref.size());
    MatMulNT(blas, dx.as<float>(), rows, in, dw.as<float>(), out, dy.as<float>());
    Sync();
    ExpectClose(Download<float>(dy, ref.size()), ref, GemmTol(x, w, in, out, 1e-5), "gemm fp32");
  }
}

// fp64 (the sliced score projections' reference precision): against a long-double loop, within a
// few fp64 roundings of the sum of |terms|.
TEST_F(CudaOpsTest, MatMulNTFp64) {
  Blas blas(stream_);
  for (const int rows : {1, 4, 33}) {
    const int in = 130, out = 67;
    const auto xf = Randn(size_t(rows) * in), wf = Randn(size_t(out) * in);
    const std::vector<double> x(xf.begin(), xf.end()), w(wf.begin(), wf.end());
    std::vector<double> ref(size_t(rows) * out), bound(ref.size());
    for (int r = 0; r < rows; ++r) {
      for (int o = 0; o < out; ++o) {
        long double acc = 0, mag = 0;
        for (int i = 0; i < in; ++i) {
          acc += (long double)x[size_t(r) * in + i] * w[size_t(o) * in + i];
          mag += std::fabs((long double)x[size_t(r) * in + i] * w[size_t(o) * in + i]);
        }
        ref[size_t(r) * out + o] = double(acc);
        bound[size_t(r) * out + o] = double(mag) * in * 0x1p-52 + 1e-300;
      }
    }
    DeviceBuffer dx = Upload(x), dw = Upload(w), dy = Poisoned<double>(ref.size());
    MatMulNT(blas, dx.as<double>(), rows, in, dw.as<double>(), out, dy.as<double>());
    Sync();
    const std::vector<double> got = Download<double>(dy, ref.size());
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) bad += !(std::fabs(got[i] - ref[i]) <= bound[i]);
    EXPECT_EQ(bad, 0u) << "of " << got.size() << " outputs, fp64 GEMM vs a long-double loop";
  }
}

TEST_F(CudaOpsTest, MatMulNTBf16) {
  Blas blas(stream_);
  for (const int rows : {1, 5, 64}) {
    const int in = 512, out = 200;
    auto x = Randn(size_t(rows) * in), w = Randn(size_t(out) * in);
    std::vector<uint16_t> xb(x.size()), wb(w.size());
    for (size_t i = 0; i < x.size(); ++i) x[i] = FromBf16(xb[i] = ToBf16(x[i]));
    for (size_t i = 0; i < w.size(); ++i) w[i] = FromBf16(wb[i] = ToBf16(w[i]));
    std::vector<float> ref(size_t(rows) * out);
    cpu::MatMulNT(x.data(), rows, in, w.data(), out, ref.data());
    DeviceBuffer dx = Upload(xb), dw = Upload(wb), dy = Poisoned<float>(ref.size());
    MatMulNTBf16(blas, dx.as<uint16_t>(), rows, in, dw.as<uint16_t>(), out, dy.as<float>());
    Sync();
    ExpectClose(Download<float>(dy, ref.size()), ref, GemmTol(x, w, in, out, 5e-5), "gemm bf16");
  }
}

// Greedy rows (temperature 0, or top_k 1) pick the first maximum, as the CPU Sampler does; ties are
// planted so "first" matters.
TEST_F(CudaOpsTest, SampleRowsGreedyIsTheFirstMaximum) {
  const int rows = 33, vocab = 5003;
  auto logits = Randn(size_t(rows) * vocab, 3.0);
  std::vector<RowSampling> params(rows);
  std::vector<int32_t> want(rows);
  for (int r = 0; r < rows; ++r) {
    float* x = logits.data() + size_t(r) * vocab;
    const int i = int(rng_() % vocab), j = int(rng_() % vocab);
    x[i] = x[j] = 50.0f;  // a tie for the maximum
    want[r] = std::min(i, j);
    params[r].temperature = r % 2 ? 0.0f : 1.0f;
    params[r].top_k = r % 2 ? 0 : 1;
    params[r].seed = rng_();
  }
  DeviceBuffer dl = Upload(logits), dp = Upload(params), di = Poisoned<int32_t>(rows);
  SampleRows(dl.as<float>(), rows, vocab, dp.as<RowSampling>(), di.as<int32_t>(), stream_);
  Sync();
  EXPECT_EQ(Download<int32_t>(di, rows), want);
}

// The kept set and its probabilities as model/sampling/sampling.cc computes them (no ties here).
std::vector<double> ReferenceDistribution(const std::vector<float>& x, float temperature, int top_k, float top_p) {
  const int vocab = int(x.size());
  std::vector<int> order(vocab);
  for (int i = 0; i < vocab; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](int a, int b) { return x[a] > x[b]; });
  const int keep_k = top_k > 0 && top_k < vocab ? top_k : vocab;
  std::vector<double> w(keep_k);
  double total = 0;
  for (int n = 0; n < keep_k; ++n) total += w[n] = std::exp(double(x[order[n]] - x[order[0]]) / temperature);
  int keep = keep_k;
  if (top_p < 1.0f) {
    double mass = 0;
    int n = 0;
    while (n < keep_k && mass < top_p * total) mass += w[n++];
    keep = std::max(n, 1);
    total = mass;
  }
  std::vector<double> p(vocab, 0.0);
  for (int n = 0; n < keep; ++n) p[order[n]] = w[n] / total;
  return p;
}

// 40,000 draws of one row (the same logits, counters 0..N-1): nothing outside the top-k / top-p set
// is ever drawn, every token's frequency is within 5 binomial standard deviations of its
// probability, and the same (seed, counter) draws the same token again.
TEST_F(CudaOpsTest, SampleRowsDrawsFromTheTopKTopPDistribution) {
  const int vocab = 64, draws = 40000;
  struct Case {
    float temperature;
    int top_k;
    float top_p;
  };
  for (const Case c : {Case{1.0f, 0, 1.0f}, Case{0.7f, 10, 1.0f}, Case{1.3f, 0, 0.8f}, Case{0.9f, 20, 0.9f}}) {
    SCOPED_TRACE(testing::Message() << "T " << c.temperature << " top_k " << c.top_k << " top_p " << c.top_p);
    const auto x = Randn(vocab, 1.5);
    std::vector<float> logits;
    for (int r = 0; r < draws; ++r) logits.insert(logits.end(), x.begin(), x.end());
    std::vector<RowSampling> params(draws);
    const uint64_t seed = rng_();
    for (int r = 0; r < draws; ++r) params[r] = {c.temperature, c.top_k, c.top_p, seed, uint64_t(r)};
    DeviceBuffer dl = Upload(logits), dp = Upload(params), di = Poisoned<int32_t>(draws);
    SampleRows(dl.as<float>(), draws, vocab, dp.as<RowSampling>(), di.as<int32_t>(), stream_);
    Sync();
    const std::vector<int32_t> ids = Download<int32_t>(di, draws);
    DeviceBuffer again = Poisoned<int32_t>(draws);
    SampleRows(dl.as<float>(), draws, vocab, dp.as<RowSampling>(), again.as<int32_t>(), stream_);
    Sync();
    EXPECT_EQ(Download<int32_t>(again, draws), ids);
    const std::vector<double> p = ReferenceDistribution(x, c.temperature, c.top_k, c.top_p);
    std::vector<int> count(vocab, 0);
    for (int32_t id : ids) {
      ASSERT_TRUE(id >= 0 && id < vocab) << id;
      ++count[id];
    }
    for (int i = 0; i < vocab; ++i) {
      if (p[i] == 0) {
        EXPECT_EQ(count[i], 0) << "token " << i << " is outside the kept set";
        continue;
      }
      const double sigma = std::sqrt(draws * p[i] * (1 - p[i]));
      EXPECT_NEAR(count[i], draws * p[i], 5 * sigma + 1) << "token " << i;
    }
  }
}

}  // namespace
}  // namespace steady::cuda
