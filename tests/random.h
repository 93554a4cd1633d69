// Random test inputs, for every test binary; nothing above the standard library (the kernels'
// tests use it alone, also cross-built for AArch64: tests/cli/arm64_kernels.sh).
#ifndef STEADY_TESTS_RANDOM_H_
#define STEADY_TESTS_RANDOM_H_

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace steady::testing {

// Seed for random test inputs: fresh per run (printed by the test so a failure can be replayed),
// unless STEADY_TEST_SEED is set.
uint64_t TestSeed();

template <typename T>
std::vector<T> RandomNormal(size_t n, std::mt19937_64& rng, double stddev = 1.0) {
  std::normal_distribution<double> dist(0.0, stddev);
  std::vector<T> out(n);
  for (T& x : out) x = T(dist(rng));
  return out;
}

}  // namespace steady::testing

#endif  // STEADY_TESTS_RANDOM_H_
