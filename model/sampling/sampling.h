// Token sampling: greedy, temperature, top-k, top-p, repetition penalty, seeded; and stop strings.
#ifndef STEADY_MODEL_SAMPLING_SAMPLING_H_
#define STEADY_MODEL_SAMPLING_SAMPLING_H_

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace steady {

struct SamplingParams {
  float temperature = 0.0f;         // 0: greedy (argmax)
  int top_k = 0;                    // 0: off
  float top_p = 1.0f;               // 1: off
  float repetition_penalty = 1.0f;  // 1: off; >1 discourages tokens already in the context
  uint64_t seed = 0;
};

// INVALID_ARGUMENT naming the field for NaN or out-of-range values.
absl::Status ValidateSamplingParams(const SamplingParams& p);

// A token and its log-probability.
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

// log-softmax(logits)[token], computed in double.
float Logprob(const float* logits, int vocab, int32_t token);
// The n most likely tokens under softmax(logits), most likely first (ties: lower id first).
std::vector<TokenLogprob> TopLogprobs(const float* logits, int vocab, int n);

// Samples one token per call. The same params, seed and logits give the same tokens.
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // `logits` [vocab] is modified (penalty, temperature). `context` holds the tokens the repetition
  // penalty applies to (the prompt and what was generated so far).
  int Sample(float* logits, int vocab, const std::vector<int32_t>& context);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int>> candidates_;  // scratch
};

// Stop strings over streamed text: holds back the tail that could still begin a stop string, so what
// it releases never contains one. Feed text pieces; Release returns the text safe to emit.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  // Adds `text`; returns what can be emitted now. After a stop string is found, stopped() is true and
  // the text before it has been returned.
  std::string Add(std::string_view text);
  // At the end of generation: whatever is held back.
  std::string Flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace steady

#endif  // STEADY_MODEL_SAMPLING_SAMPLING_H_
