// The feature-map state's reads (model/mechanisms/feature_state.h) over the SIMD state kernels.
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/state_update.h"
#include "model/mechanisms/feature_state.h"
#include "tests/testutil.h"

namespace steady {
namespace {

// slay's and dark's decode step reads the state once for a GQA group: each query's output and
// denominator are the same bits as a read of its own (ReadState), compensated or plain.
TEST(CpuStateUpdateTest, AGroupReadEqualsOneReadPerQuery) {
  std::mt19937_64 rng(testing::TestSeed());
  const int m = 40, dv = 17, group = 4;
  for (Accumulation acc : {Accumulation::kKahan, Accumulation::kPlain}) {
    std::vector<float> state = testing::RandomNormal<float>(FeatureStateFloats(m, dv, acc), rng);
    const FeatureState<float> h = FeatureStateAt(state.data(), m, dv, acc);
    const std::vector<float> phi = testing::RandomNormal<float>(size_t(group) * m, rng);
    std::vector<float> num(size_t(group) * dv, 0.0f), den(group);
    ReadStateGroup(m, dv, group, phi.data(), 1.0f, h, num.data(), den.data());
    for (int i = 0; i < group; ++i) {
      std::vector<float> one(dv, 0.0f);
      const float d = ReadState(m, dv, phi.data() + size_t(i) * m, 1.0f, h, one.data());
      EXPECT_EQ(0, std::memcmp(one.data(), num.data() + size_t(i) * dv, dv * sizeof(float))) << "query " << i;
      EXPECT_EQ(d, den[i]) << "query " << i;
    }
  }
}

}  // namespace
}  // namespace steady
