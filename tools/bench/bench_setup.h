// Shared by the decode benchmarks (decode_bench, step_instructions): the mechanisms measured, the
// tiny model shape, and how a session is brought to a context of L tokens (see decode_bench.cc).
#ifndef STEADY_TOOLS_BENCH_BENCH_SETUP_H_
#define STEADY_TOOLS_BENCH_BENCH_SETUP_H_

#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "model/decoder/model.h"
#include "model/decoder/state_pool.h"
#include "model/generate.h"

namespace steady {

struct MechanismSpec {
  const char* name;
  const char* mechanism;
  nlohmann::json params;
};

inline const std::vector<MechanismSpec>& Specs() {
  static const std::vector<MechanismSpec> specs = {
      {"softmax", "softmax", nlohmann::json::object()},
      {"taylor_p2", "taylor", {{"order", 2}}},
      {"taylor_p3", "taylor", {{"order", 3}}},
      {"taylor_p4", "taylor", {{"order", 4}}},
      {"slay", "slay", nlohmann::json::object()},
      {"dark", "dark", nlohmann::json::object()},
      {"sliced_relu", "sliced_relu", nlohmann::json::object()},
      {"sliced_relu_bump", "sliced_relu_bump", nlohmann::json::object()},
  };
  return specs;
}

// The "tiny" shape of the shipped models: hidden 128, 4 layers, 8 heads, 4 kv heads, head_dim 16.
inline const Model& GetModel(int spec) {
  static std::map<int, Model> cache;
  auto it = cache.find(spec);
  if (it != cache.end()) return it->second;
  nlohmann::json j = {{"vocab_size", 512},       {"hidden_size", 128},        {"intermediate_size", 384},
                      {"num_hidden_layers", 4},  {"num_attention_heads", 8}, {"num_key_value_heads", 4},
                      {"head_dim", 16},          {"rope_theta", 10000.0},     {"qk_norm", true},
                      {"tie_word_embeddings", true}, {"bos_token_id", 1},    {"eos_token_id", 2}};
  nlohmann::json a = Specs()[spec].params;
  a["mechanism"] = Specs()[spec].mechanism;
  j["attention"] = a;
  auto config = ParseModelConfig(j.dump(), "bench");
  auto model = Model::Random(*config, 42);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", std::string(model.status().message()).c_str());
    std::abort();
  }
  return cache.emplace(spec, *std::move(model)).first->second;
}

// prefill_tokens: real tokens absorbed by a constant-state session before its position is set to L.
inline void FillContext(const Model& m, StatePool& pool, int64_t context, int prefill_tokens = 1024) {
  std::mt19937_64 rng(7);
  if (m.config().layer_attention[0].mechanism == "softmax") {
    std::normal_distribution<float> g(0.0f, 1.0f);
    const size_t row = size_t(m.config().num_kv_heads) * 2 * m.config().head_dim;
    for (int l = 0; l < m.config().num_layers; ++l) {
      std::vector<float>& cache = pool.Growing(0, l);
      cache.resize(row * context);
      for (float& x : cache) x = g(rng);
    }
  } else {
    std::uniform_int_distribution<int32_t> tok(3, m.vocab_size() - 1);
    std::vector<int32_t> tokens(prefill_tokens);
    for (int32_t& t : tokens) t = tok(rng);
    ForwardWorkspace ws;
    std::vector<float> logits;
    for (int begin = 0; begin < prefill_tokens; begin += 256) {
      const int end = std::min(prefill_tokens, begin + 256);
      m.Forward({Segment{0, std::vector<int32_t>(tokens.begin() + begin, tokens.begin() + end), false}}, pool, ws,
                &logits);
    }
  }
  pool.set_position(0, context);
}

}  // namespace steady

#endif  // STEADY_TOOLS_BENCH_BENCH_SETUP_H_
