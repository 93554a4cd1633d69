// The CUDA backend against the CPU backend over the same steps (tests/model/backend/backend_test.cc and
// backend_cuda_test.cc): random token segments, and how far the logits and states end apart.
#ifndef STEADY_TESTS_MODEL_BACKEND_CUDA_COMPARE_H_
#define STEADY_TESTS_MODEL_BACKEND_CUDA_COMPARE_H_

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "model/backend/backend.h"
#include "tests/testutil.h"

#if STEADY_HAVE_CUDA
#include "kernels/cuda/device.h"
#endif

namespace steady {

#if STEADY_HAVE_CUDA
// Every launch in a binary that includes this is checked synchronously: a kernel fault fails the
// test that launched it, naming the kernel (kernels/cuda/cuda_check.h).
inline const bool kSyncLaunchChecks = (cuda::SetSyncLaunchChecks(true), true);
#endif

inline std::vector<double> D(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

inline std::vector<int32_t> RandomTokens(int n, std::mt19937_64& rng) {
  std::uniform_int_distribution<int32_t> tok(3, 511);
  std::vector<int32_t> out(n);
  for (int32_t& t : out) t = tok(rng);
  return out;
}

// A wider shape than TinyConfig's: group 4, head_dim 32 (the state rows span two warps' columns).
inline const nlohmann::json kWide = {{"hidden_size", 128}, {"num_attention_heads", 8}, {"num_key_value_heads", 2},
                                     {"head_dim", 32}, {"intermediate_size", 192}};
// The head shapes of real checkpoints: head_dim 64 with group 8 (two kv heads), and head_dim 128 with
// group 4 and with group 8 (one kv head).
inline const nlohmann::json kHd64Group8 = {{"hidden_size", 256}, {"num_attention_heads", 16}, {"num_key_value_heads", 2},
                                           {"head_dim", 64}, {"intermediate_size", 256}};
inline const nlohmann::json kHd128 = {{"hidden_size", 256}, {"num_attention_heads", 4}, {"num_key_value_heads", 1},
                                      {"head_dim", 128}, {"intermediate_size", 256}};
inline const nlohmann::json kHd128Group8 = {{"hidden_size", 256}, {"num_attention_heads", 8},
                                            {"num_key_value_heads", 1}, {"head_dim", 128}, {"intermediate_size", 256}};

// How far the CUDA backend ends from the CPU backend over the same steps.
struct Divergence {
  double logits = 0;
  double state = 0;
};

// Runs `steps` through a CPU and a CUDA backend with options `o`; the worst logit error relative to
// the CPU's largest |logit| per step, and the states' relative L2 error at the end.
inline Divergence Compare(const Model& m, const BackendOptions& o, const std::vector<std::vector<Segment>>& steps) {
  std::unique_ptr<Backend> cpu = MakeCpuBackend(m, o);
  auto gpu = MakeCudaBackend(m, o);
  EXPECT_TRUE(gpu.ok()) << gpu.status();
  if (!gpu.ok()) return {INFINITY, INFINITY};
  Divergence worst;
  for (const std::vector<Segment>& step : steps) {
    std::vector<float> want, got;
    cpu->Forward(step, &want);
    (*gpu)->Forward(step, &got);
    EXPECT_EQ(got.size(), want.size());
    if (got.size() != want.size()) return {INFINITY, INFINITY};
    worst.logits = std::max(worst.logits, testing::MaxRelError(D(got), D(want)));
  }
  for (int slot = 0; slot < o.slots; ++slot) {
    EXPECT_EQ((*gpu)->position(slot), cpu->position(slot));
    const SlotState want = cpu->ReadSlot(slot), got = (*gpu)->ReadSlot(slot);
    if (!want.fixed.empty()) worst.state = std::max(worst.state, testing::RelL2Error(D(got.fixed), D(want.fixed)));
    for (size_t l = 0; l < want.growing.size(); ++l) {
      if (!want.growing[l].empty()) {
        worst.state = std::max(worst.state, testing::RelL2Error(D(got.growing[l]), D(want.growing[l])));
      }
    }
  }
  return worst;
}

// A mixed step (a 37-token prompt, a 5-token segment with logits for every row, a one-token
// segment), then 6 decode steps of the three slots together.
inline Divergence Compare(const Model& m, bool bf16, uint64_t seed) {
  std::mt19937_64 rng(seed);
  BackendOptions o;
  o.slots = 3;
  o.max_context = 64;
  o.cuda_bf16 = bf16;
  std::vector<std::vector<Segment>> steps = {
      {{0, RandomTokens(37, rng), false}, {1, RandomTokens(5, rng), true}, {2, RandomTokens(1, rng), false}}};
  for (int s = 0; s < 6; ++s) {
    steps.push_back({{2, RandomTokens(1, rng), false}, {0, RandomTokens(1, rng), false}, {1, RandomTokens(1, rng), false}});
  }
  return Compare(m, o, steps);
}

}  // namespace steady

#endif  // STEADY_TESTS_MODEL_BACKEND_CUDA_COMPARE_H_
