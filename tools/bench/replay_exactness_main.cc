// Can a session be recovered by replaying its tokens? The question behind the durability design
// (docs/durability.md): a write-ahead journal of token ids recovers a session by feeding them
// through the model again, which is exact only if the state a segment leaves does not depend on the
// other sessions' rows that shared its steps.
//
// For each mechanism, session 0 absorbs 40 steps of segments (a 37-token prompt chunk every 10
// steps, single decode tokens otherwise) batched with 1 to 5 other sessions' rows, as a serving
// engine runs it; a second pool replays the same segments for session 0 alone. Printed: whether the
// two states are bit-identical, and their largest relative difference.
//   replay_exactness [--seed S]
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "base/flags.h"
#include "model/decoder/model.h"
#include "model/decoder/state_pool.h"

namespace steady {
namespace {

constexpr char kUsage[] = R"(usage: replay_exactness [--seed S]

Whether replaying a session's segments alone reproduces, bit for bit, the state it reached when its
steps were batched with other sessions; per mechanism, on a random model of hidden size 128.
)";

ModelConfig Config(const std::string& mechanism) {
  nlohmann::json j = {{"vocab_size", 512}, {"hidden_size", 128}, {"intermediate_size", 384}, {"num_hidden_layers", 2},
                      {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"head_dim", 32}, {"rope_theta", 10000.0},
                      {"qk_norm", true}, {"bos_token_id", 1}, {"eos_token_id", 2}};
  j["attention"] = {{"mechanism", mechanism}};
  if (mechanism == "taylor") j["attention"]["order"] = 2;
  return *ParseModelConfig(j.dump(), mechanism);
}

int Main(int argc, char** argv) {
  const Flags flags = ParseFlagsOrExit(argc, argv, {.with_value = {"seed"}}, kUsage);
  auto seed = flags.GetUint("seed", 1);
  ExitOnUsageError(argv[0], seed.status(), kUsage);
  std::printf("| mechanism | state floats | replayed alone == batched | largest relative difference |\n");
  std::printf("|---|---|---|---|\n");
  for (const char* mechanism : {"taylor", "slay", "dark", "sliced_relu"}) {
    auto model = Model::Random(Config(mechanism), 7);
    if (!model.ok()) {
      std::fprintf(stderr, "%s: %s\n", mechanism, std::string(model.status().message()).c_str());
      return 1;
    }
    const Model& m = *model;
    std::mt19937 rng{uint32_t(*seed)};
    auto tokens = [&](int n) {
      std::vector<int32_t> t(n);
      for (int32_t& x : t) x = int32_t(3 + rng() % 500);
      return t;
    };
    StatePool batched(m, 6), alone(m, 6);
    ForwardWorkspace batched_ws, alone_ws;
    std::vector<float> logits;
    std::vector<std::vector<int32_t>> history;
    for (int step = 0; step < 40; ++step) {
      std::vector<Segment> segments = {{0, step % 10 == 0 ? tokens(37) : tokens(1), false}};
      history.push_back(segments[0].tokens);
      const int others = 1 + int(rng() % 5);
      for (int s = 1; s <= others; ++s) segments.push_back({s, rng() % 3 == 0 ? tokens(1 + rng() % 50) : tokens(1), false});
      m.Forward(segments, batched, batched_ws, &logits);
    }
    for (const std::vector<int32_t>& segment : history) m.Forward({Segment{0, segment, false}}, alone, alone_ws, &logits);
    const float* a = batched.SlotData(0);
    const float* b = alone.SlotData(0);
    const size_t n = m.StateFloats();
    double scale = 0, diff = 0;
    for (size_t i = 0; i < n; ++i) {
      scale = std::max(scale, std::abs(double(a[i])));
      diff = std::max(diff, std::abs(double(a[i]) - double(b[i])));
    }
    std::printf("| %s | %zu | %s | %.2e |\n", mechanism, n, std::memcmp(a, b, n * sizeof(float)) == 0 ? "yes" : "no",
                scale > 0 ? diff / scale : 0.0);
  }
  return 0;
}

}  // namespace
}  // namespace steady

int main(int argc, char** argv) { return steady::Main(argc, argv); }
