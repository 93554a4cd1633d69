// The per-token cost of constrained decoding (Google Benchmark; docs/benchmarks.md, "Constrained
// decoding"): SampleNext, the engine's and GenerateText's sampling call, over one step's rows with a
// constraint (mask, apply, sample, advance) against the same call without one (sample only),
// measured in the same run. Vocabularies: the test tokenizer's 8K (always) and a real 150K one when
// STEADY_BENCH_TOKEN_BYTES names a file of per-token hex bytes (tools/bench/hf_token_bytes.py from
// Qwen3's tokenizer.json). Logits are random (a fresh row per step, temperature 1), so the sampled
// path wanders the grammar the way a model with no preference would; a state that completes starts over.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <random>

#include "absl/strings/escaping.h"
#include "model/constrain/constraint.h"
#include "model/constrain/token_bytes.h"
#include "model/generate.h"
#include "model/sampling/sampling.h"
#include "model/text/tokenizer.h"

namespace steady {
namespace {

// A JSON Schema of the kind agents send: an object of strings, numbers, an enum and an array.
constexpr char kSchema[] = R"({"type": "object", "properties": {
    "name": {"type": "string"}, "age": {"type": "integer", "minimum": 0},
    "email": {"type": "string"}, "role": {"enum": ["admin", "user", "guest"]},
    "tags": {"type": "array", "items": {"type": "string"}}},
  "required": ["name", "age", "email", "role", "tags"], "additionalProperties": false})";

std::shared_ptr<const TokenVocabulary> Vocabulary(int which) {
  static std::map<int, std::shared_ptr<const TokenVocabulary>> cache;
  if (auto it = cache.find(which); it != cache.end()) return it->second;
  std::shared_ptr<const TokenVocabulary> v;
  if (which == 0) {
    auto tokenizer = Tokenizer::Load(STEADY_SOURCE_DIR "/tests/data/tokenizer/tokenizer.model");
    if (!tokenizer.ok()) std::abort();
    auto made = MakeTokenVocabulary(**tokenizer, (*tokenizer)->vocab_size(), {2});
    if (!made.ok()) std::abort();
    v = *made;
  } else {
    const char* path = std::getenv("STEADY_BENCH_TOKEN_BYTES");
    if (path == nullptr) return nullptr;
    std::ifstream in(path);
    std::vector<std::string> bytes;
    for (std::string line; std::getline(in, line);) {
      bytes.push_back(absl::HexStringToBytes(line));
    }
    if (bytes.size() < 1000) std::abort();
    const int32_t eos = int32_t(bytes.size()) - 1;  // an id with no bytes stands for the end token
    bytes.back().clear();
    v = std::make_shared<TokenVocabulary>(std::move(bytes), std::vector<int32_t>{eos});
  }
  return cache.emplace(which, v).first->second;
}

// Args: vocabulary (0: 8K, 1: 150K), batch (rows per step), format (0: none, 1: json_object,
// 2: json_schema). Time per iteration: one step's sampling for every row.
void BM_SampleStep(benchmark::State& state) {
  auto vocab = Vocabulary(int(state.range(0)));
  if (!vocab) {
    state.SkipWithError("STEADY_BENCH_TOKEN_BYTES is not set");
    return;
  }
  const int rows = int(state.range(1));
  const int format = int(state.range(2));
  std::shared_ptr<const Constraint> constraint;
  if (format != 0) {
    auto c = Constraint::Compile({format == 1 ? ConstraintSpec::Kind::kJsonObject : ConstraintSpec::Kind::kJsonSchema,
                                  format == 1 ? "" : kSchema},
                                 vocab);
    if (!c.ok()) {
      state.SkipWithError(std::string(c.status().message()).c_str());
      return;
    }
    constraint = *c;
  }
  const int n = vocab->size();
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  // 64 random logit rows, cycled: fresh enough that the walk varies, no RNG in the timed loop.
  std::vector<std::vector<float>> pool(64, std::vector<float>(n));
  for (auto& row : pool)
    for (float& x : row) x = normal(rng);
  std::vector<float> logits(n);
  std::vector<Sampler> samplers;
  std::vector<std::unique_ptr<ConstraintState>> states(rows);
  std::vector<std::vector<uint64_t>> masks(rows);
  for (int r = 0; r < rows; ++r) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.seed = uint64_t(r);
    samplers.emplace_back(p);
    if (constraint) states[r] = std::make_unique<ConstraintState>(constraint);
  }
  const std::vector<int32_t> context;
  size_t step = 0;
  int64_t restarts = 0;
  for (auto _ : state) {
    for (int r = 0; r < rows; ++r) {
      const auto& src = pool[(step + r) % pool.size()];
      std::copy(src.begin(), src.end(), logits.begin());
      auto token = SampleNext(samplers[r], states[r].get(), &masks[r], logits.data(), n, context);
      if (!token.ok()) {
        state.SkipWithError(std::string(token.status().message()).c_str());
        return;
      }
      if (states[r] && (*token < 0 || vocab->is_end(*token) || states[r]->MustEnd())) {
        states[r] = std::make_unique<ConstraintState>(constraint);  // complete: the next answer
        ++restarts;
      }
      benchmark::DoNotOptimize(*token);
    }
    ++step;
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * rows);  // tokens
  state.counters["answers"] = double(restarts);
}

BENCHMARK(BM_SampleStep)
    ->ArgsProduct({{0, 1}, {1, 16}, {0, 1, 2}})
    ->ArgNames({"vocab150k", "batch", "format"})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace steady

BENCHMARK_MAIN();
