// Helpers shared by the test binaries.
#ifndef STEADY_TESTS_TESTUTIL_H_
#define STEADY_TESTS_TESTUTIL_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace steady::testing {

// Path of a file in the source tree / build tree.
std::string SourcePath(const std::string& relative);
std::string BinaryPath(const std::string& relative);
// A fresh empty directory under the test temp dir.
std::string MakeTempDir(const std::string& name);

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

// max_i |a_i - b_i| / max(max_i |b_i|, tiny): error relative to the reference's scale.
double MaxRelError(const std::vector<double>& a, const std::vector<double>& ref);
// ||a - ref|| / ||ref|| (L2).
double RelL2Error(const std::vector<double>& a, const std::vector<double>& ref);

}  // namespace steady::testing

#endif  // STEADY_TESTS_TESTUTIL_H_
