// What steady-loadtest sends: prompt and output lengths drawn from a distribution, prompt text made
// of words, and open-loop arrival times. Everything is a pure function of the seed and the request
// index, so two runs with the same flags send the same requests at the same offsets.
#ifndef STEADY_CLIENTS_LOADTEST_WORKLOAD_H_
#define STEADY_CLIENTS_LOADTEST_WORKLOAD_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace steady::loadtest {

// "fixed:N", "uniform:A:B" (inclusive) or "file:PATH" (one integer per line, '#' starts a comment;
// each request draws one line uniformly at random).
struct LengthDistribution {
  std::string spec;
  std::vector<int64_t> values;  // fixed: {N}; uniform: {A, B}; file: the lines
  enum class Kind { kFixed, kUniform, kFile } kind = Kind::kFixed;

  static absl::StatusOr<LengthDistribution> Parse(const std::string& flag, const std::string& spec);
  int64_t Sample(std::mt19937_64& rng) const;
};

// One request's shape, before it is turned into a GenerateRequest.
struct RequestSpec {
  int64_t index = 0;
  int64_t prompt_tokens_target = 0;
  int64_t output_tokens_target = 0;  // sent as max_tokens
  std::string prompt;                // words; roughly prompt_tokens_target tokens
  int64_t prompt_words = 0;
};

// A generator seeded per request index: request i is the same whatever the concurrency or order.
std::mt19937_64 RngFor(uint64_t seed, uint64_t stream, uint64_t index);

// `words` words drawn from a fixed list of common English words. `leading_space` for text appended
// to a session that already holds text, so the first word does not glue onto the previous one.
std::string MakePromptText(int64_t words, bool leading_space, std::mt19937_64& rng);

RequestSpec MakeRequestSpec(uint64_t seed, int64_t index, const LengthDistribution& prompt_tokens,
                            const LengthDistribution& output_tokens, double tokens_per_word, bool leading_space);

// Open-loop arrival offsets in seconds from the start: gaps drawn from a gamma distribution with
// shape `burstiness` and mean 1 / rate (burstiness 1: exponential gaps, a Poisson process; < 1 burstier,
// > 1 more regular), as vLLM's benchmark_serving does. Stops at `count` arrivals or past
// `duration_s` (whichever is set, > 0).
std::vector<double> ArrivalOffsets(uint64_t seed, double rate, double burstiness, int64_t count, double duration_s);

}  // namespace steady::loadtest

#endif  // STEADY_CLIENTS_LOADTEST_WORKLOAD_H_
