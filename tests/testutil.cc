#include "tests/testutil.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <mutex>

#include <unistd.h>

#include <gtest/gtest.h>

namespace steady::testing {

std::string SourcePath(const std::string& relative) { return std::string(STEADY_SOURCE_DIR) + "/" + relative; }
std::string BinaryPath(const std::string& relative) { return std::string(STEADY_BINARY_DIR) + "/" + relative; }

namespace {

// One directory per test process holds everything MakeTempDir makes; it is removed when the process
// exits, after a failed test too (ctest runs each test in a process of its own).
// STEADY_KEEP_TEST_FILES=1 keeps it for a look.
std::string* temp_root = nullptr;  // leaked on purpose: read by the atexit handler
pid_t temp_root_owner = 0;

void RemoveTempRoot() {
  if (::getpid() != temp_root_owner || std::getenv("STEADY_KEEP_TEST_FILES") != nullptr) return;
  std::error_code ec;
  std::filesystem::remove_all(*temp_root, ec);
}

const std::string& TempRoot() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* base = std::getenv("TEST_TMPDIR");
    const std::filesystem::path dir =
        std::filesystem::path(base ? base : std::filesystem::temp_directory_path().string()) /
        ("steady_test_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    temp_root = new std::string(dir.string());
    temp_root_owner = ::getpid();
    std::atexit(RemoveTempRoot);
  });
  return *temp_root;
}

}  // namespace

std::string MakeTempDir(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(TempRoot()) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

ModelConfig TinyConfig(const std::string& mechanism, const nlohmann::json& params, const nlohmann::json& patch) {
  nlohmann::json j = {{"vocab_size", 512},      {"hidden_size", 32},        {"intermediate_size", 64},
                      {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                      {"head_dim", 8},          {"rope_theta", 10000.0},    {"qk_norm", true},
                      {"bos_token_id", 1},      {"eos_token_id", 2}};
  nlohmann::json a = params;
  a["mechanism"] = mechanism;
  j["attention"] = a;
  j.merge_patch(patch);
  auto c = ParseModelConfig(j.dump(), "tiny test config");
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : ModelConfig{};
}

Model TinyModel(const std::string& mechanism, const nlohmann::json& params, uint64_t seed, const nlohmann::json& patch) {
  auto m = Model::Random(TinyConfig(mechanism, params, patch), seed);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) std::abort();  // nothing sensible to return
  return *std::move(m);
}

double MaxRelError(const std::vector<double>& a, const std::vector<double>& ref) {
  double scale = 1e-300, err = 0;
  for (size_t i = 0; i < ref.size(); ++i) scale = std::max(scale, std::abs(ref[i]));
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = std::abs(a[i] - ref[i]);
    err = std::max(err, std::isnan(d) ? INFINITY : d);
  }
  return err / scale;
}

double RelL2Error(const std::vector<double>& a, const std::vector<double>& ref) {
  double num = 0, den = 1e-300;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::isnan(num) ? INFINITY : std::sqrt(num / den);
}

}  // namespace steady::testing
