// Token sampling: greedy, temperature, top-k, top-p, repetition penalty, OpenAI's presence and
// frequency penalties and logit bias, seeded; and stop strings.
#ifndef STEADY_MODEL_SAMPLING_SAMPLING_H_
#define STEADY_MODEL_SAMPLING_SAMPLING_H_

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace steady {

struct SamplingParams {
  float temperature = 0.0f;         // 0: greedy (argmax)
  int top_k = 0;                    // 0: off
  float top_p = 1.0f;               // 1: off
  float repetition_penalty = 1.0f;  // 1: off; >1 discourages tokens already in the context
  uint64_t seed = 0;
  // As OpenAI defines them: logit[t] -= frequency_penalty * c[t] + presence_penalty * (c[t] > 0),
  // c[t] = how often t was sampled so far (the generated tokens, not the prompt); each in [-2, 2].
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // (token, bias in [-100, 100]) added to the token's logit before sampling: -100 bans it, 100
  // all but forces it.
  std::vector<std::pair<int32_t, float>> logit_bias;

  // Any step that changes the logits before temperature (the host applies them).
  bool ChangesLogits() const {
    return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f || !logit_bias.empty();
  }
};

inline constexpr float kMaxLogitBias = 100.0f;
inline constexpr float kMaxOpenAIPenalty = 2.0f;

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
  // `logits` [vocab] is modified (penalties, bias, temperature). `context` holds the tokens the
  // repetition penalty applies to (the prompt and what was generated so far); the presence and
  // frequency penalties count this sampler's own draws.
  int Sample(float* logits, int vocab, const std::vector<int32_t>& context);

 private:
  SamplingParams params_;
  // Temperature, top-k and top-p over the final logits.
  int Draw(float* logits, int vocab);
  // An index into probs_, drawn in proportion to them (`mass` their sum).
  size_t DrawIndex(double mass);

  std::vector<std::pair<int32_t, int32_t>> sampled_;  // (token, times drawn), sorted by token
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int>> candidates_;  // scratch
  std::vector<double> probs_;                      // scratch
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
