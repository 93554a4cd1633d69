#include "tests/random.h"

#include <chrono>
#include <cstdlib>
#include <iostream>

namespace steady::testing {

uint64_t TestSeed() {
  static const uint64_t seed = []() -> uint64_t {
    if (const char* s = std::getenv("STEADY_TEST_SEED")) return std::strtoull(s, nullptr, 10);
    const uint64_t t = std::chrono::steady_clock::now().time_since_epoch().count();
    std::cerr << "random test inputs: STEADY_TEST_SEED=" << t << "\n";
    return t;
  }();
  return seed;
}

}  // namespace steady::testing
