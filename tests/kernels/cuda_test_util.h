// Shared by the CUDA kernel tests (tests/kernels/cuda_*_test.cc, one binary: cuda_ops_test): fresh
// random inputs with the seed printed, device buffers poisoned with NaN before an op writes them,
// element-wise comparison with a tolerance, and the fixture that skips visibly without a GPU. No absl
// or model code, so that the binary needs only the CUDA libraries, OpenBLAS and libstdc++.
#ifndef STEADY_TESTS_KERNELS_CUDA_TEST_UTIL_H_
#define STEADY_TESTS_KERNELS_CUDA_TEST_UTIL_H_

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

#include "kernels/cuda/device.h"

namespace steady::cuda {

// Fresh per run unless STEADY_TEST_SEED is set (as tests/testutil.h; not linked here, so that this
// binary needs only the CUDA libraries, OpenBLAS and libstdc++ and can be carried to a GPU machine).
inline uint64_t TestSeed() {
  static const uint64_t seed = []() -> uint64_t {
    if (const char* s = std::getenv("STEADY_TEST_SEED")) return std::strtoull(s, nullptr, 10);
    return uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  }();
  return seed;
}

inline std::vector<float> RandomNormal(size_t n, std::mt19937_64& rng, double stddev) {
  std::normal_distribution<double> dist(0.0, stddev);
  std::vector<float> out(n);
  for (float& x : out) x = float(dist(rng));
  return out;
}

inline uint16_t ToBf16(float f) {  // round to nearest even (inputs are finite)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

inline float FromBf16(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

template <typename T>
DeviceBuffer Upload(const std::vector<T>& v) {
  DeviceBuffer b(v.size() * sizeof(T));
  b.CopyFromHost(v.data(), v.size() * sizeof(T));
  return b;
}

// An output buffer of n elements, every byte 0xFF (NaN for fp32 and bf16).
template <typename T>
DeviceBuffer Poisoned(size_t n) {
  DeviceBuffer b(n * sizeof(T));
  b.Fill(0xFF);
  return b;
}

template <typename T>
std::vector<T> Download(const DeviceBuffer& b, size_t n) {
  std::vector<T> v(n);
  b.CopyToHost(v.data(), n * sizeof(T));
  return v;
}

// Every element finite and within tol(i, ref[i]); reports the count and the first few misses.
inline void ExpectClose(const std::vector<float>& got, const std::vector<float>& ref,
                 const std::function<double(size_t, float)>& tol, const char* what) {
  ASSERT_EQ(got.size(), ref.size());
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(double(got[i]) - double(ref[i]));
    if (!std::isfinite(got[i]) || !(d <= tol(i, ref[i]))) {
      if (++bad <= 5) {
        ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << " want " << ref[i] << " (tol "
                      << tol(i, ref[i]) << ")";
      }
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements off or unwritten";
}

// Skips visibly without a device; turns on synchronous launch checks, so a kernel fault fails the
// test that launched it, naming the kernel.
class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device (or driver) on this machine";
    SetSyncLaunchChecks(true);
    const uint64_t seed = TestSeed();
    std::printf("random test inputs: STEADY_TEST_SEED=%llu\n", static_cast<unsigned long long>(seed));
    rng_.seed(seed);
    stream_ = CreateStream();
  }
  void TearDown() override {
    if (stream_ != nullptr) DestroyStream(stream_);
  }
  std::vector<float> Randn(size_t n, double stddev = 1.0) {
    return RandomNormal(n, rng_, stddev);
  }
  void Sync() { SynchronizeStream(stream_); }

  std::mt19937_64 rng_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace steady::cuda

#endif  // STEADY_TESTS_KERNELS_CUDA_TEST_UTIL_H_
