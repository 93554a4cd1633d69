// Helpers shared by the test binaries (the random inputs: tests/random.h).
#ifndef STEADY_TESTS_TESTUTIL_H_
#define STEADY_TESTS_TESTUTIL_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/checkpoint/config.h"
#include "model/decoder/model.h"
#include "tests/random.h"

namespace steady::testing {

// Path of a file in the source tree / build tree.
std::string SourcePath(const std::string& relative);
std::string BinaryPath(const std::string& relative);
// A fresh empty directory under this test process's temp dir ($TEST_TMPDIR or $TMPDIR), removed
// with everything in it when the process exits.
std::string MakeTempDir(const std::string& name);

// The tests' small model shape: vocab 512, hidden 32, 2 layers, 4 heads / 2 kv heads, head_dim 8,
// RoPE, QK-norm, BOS 1, EOS 2, attention {mechanism, params}. `patch` is merged into config.json
// (JSON merge patch: {"eos_token_id": null} removes the key).
ModelConfig TinyConfig(const std::string& mechanism, const nlohmann::json& params,
                       const nlohmann::json& patch = nlohmann::json::object());
// Random weights of that shape (fails the calling test on a bad config).
Model TinyModel(const std::string& mechanism, const nlohmann::json& params, uint64_t seed,
                const nlohmann::json& patch = nlohmann::json::object());

// max_i |a_i - b_i| / max(max_i |b_i|, tiny): error relative to the reference's scale.
double MaxRelError(const std::vector<double>& a, const std::vector<double>& ref);
// ||a - ref|| / ||ref|| (L2).
double RelL2Error(const std::vector<double>& a, const std::vector<double>& ref);

}  // namespace steady::testing

#endif  // STEADY_TESTS_TESTUTIL_H_
