#include "model/sampling/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace steady {

absl::Status ValidateSamplingParams(const SamplingParams& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0 || p.temperature > 100) {
    return absl::InvalidArgumentError(absl::StrCat("temperature: must be in [0, 100], got ", p.temperature));
  }
  if (p.top_k < 0) return absl::InvalidArgumentError(absl::StrCat("top_k: must be >= 0, got ", p.top_k));
  if (!std::isfinite(p.top_p) || p.top_p <= 0 || p.top_p > 1) {
    return absl::InvalidArgumentError(absl::StrCat("top_p: must be in (0, 1], got ", p.top_p));
  }
  if (!std::isfinite(p.repetition_penalty) || p.repetition_penalty <= 0 || p.repetition_penalty > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("repetition_penalty: must be in (0, 100], got ", p.repetition_penalty));
  }
  for (const auto& [name, v] : {std::pair<const char*, float>{"presence_penalty", p.presence_penalty},
                                {"frequency_penalty", p.frequency_penalty}}) {
    if (!std::isfinite(v) || std::abs(v) > kMaxOpenAIPenalty) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": must be in [-2, 2], got ", v));
    }
  }
  for (const auto& [token, bias] : p.logit_bias) {
    if (token < 0) return absl::InvalidArgumentError(absl::StrCat("logit_bias: token id ", token, " is negative"));
    if (!std::isfinite(bias) || std::abs(bias) > kMaxLogitBias) {
      return absl::InvalidArgumentError(absl::StrCat("logit_bias: token ", token, ": bias must be in [-100, 100], got ", bias));
    }
  }
  return absl::OkStatus();
}

namespace {

double LogSumExp(const float* logits, int vocab) {
  const double max = *std::max_element(logits, logits + vocab);
  double sum = 0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(double(logits[i]) - max);
  return max + std::log(sum);
}

}  // namespace

float Logprob(const float* logits, int vocab, int32_t token) {
  return float(double(logits[token]) - LogSumExp(logits, vocab));
}

std::vector<TokenLogprob> TopLogprobs(const float* logits, int vocab, int n) {
  n = std::clamp(n, 0, vocab);
  std::vector<int32_t> ids(vocab);
  std::iota(ids.begin(), ids.end(), 0);
  auto more_likely = [logits](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), more_likely);
  const double lse = LogSumExp(logits, vocab);
  std::vector<TokenLogprob> top;
  for (int i = 0; i < n; ++i) top.push_back({ids[i], float(double(logits[ids[i]]) - lse)});
  return top;
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

int Sampler::Sample(float* logits, int vocab, const std::vector<int32_t>& context) {
  if (params_.repetition_penalty != 1.0f) {
    // CTRL-style penalty (as in Hugging Face): divide positive logits, multiply negative ones, once
    // per distinct token.
    std::vector<int32_t> seen(context);
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (int32_t t : seen) {
      if (t < 0 || t >= vocab) continue;
      logits[t] = logits[t] > 0 ? logits[t] / params_.repetition_penalty : logits[t] * params_.repetition_penalty;
    }
  }
  for (const auto& [t, count] : sampled_) {
    if (t < vocab) logits[t] -= params_.frequency_penalty * float(count) + params_.presence_penalty;
  }
  for (const auto& [t, bias] : params_.logit_bias) {
    if (t < vocab) logits[t] += bias;
  }
  const int token = Draw(logits, vocab);
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) {
    auto it = std::lower_bound(sampled_.begin(), sampled_.end(), std::make_pair(int32_t(token), int32_t(0)));
    if (it != sampled_.end() && it->first == token) {
      ++it->second;
    } else {
      sampled_.insert(it, {token, 1});
    }
  }
  return token;
}

int Sampler::Draw(float* logits, int vocab) {
  if (params_.temperature == 0.0f) {
    return int(std::max_element(logits, logits + vocab) - logits);  // first maximum: deterministic
  }
  const bool top_k = params_.top_k > 0 && params_.top_k < vocab, top_p = params_.top_p < 1.0f;
  float max_logit = -INFINITY;
  for (int i = 0; i < vocab; ++i) max_logit = std::max(max_logit, logits[i] / params_.temperature);
  probs_.clear();
  double mass = 0;
  if (!top_k && !top_p) {
    // Every token a candidate: no order is needed, so none is made (a sort of a 150K vocabulary
    // costs milliseconds a row); the draw walks the ids. Equal in distribution to the sorted walk,
    // not draw for draw.
    for (int i = 0; i < vocab; ++i) mass += probs_.emplace_back(std::exp(double(logits[i] / params_.temperature - max_logit)));
    return int(DrawIndex(mass));
  }
  candidates_.resize(vocab);
  for (int i = 0; i < vocab; ++i) candidates_[i] = {logits[i] / params_.temperature, i};
  auto weight = [&](size_t i) { return std::exp(double(candidates_[i].first - max_logit)); };
  // Order by logit (ties by id, so the order is deterministic), only as far as the cut needs it:
  // top-k sorts its k tokens, top-p a head that grows until it holds the nucleus (in the full
  // sort's order).
  auto by_logit = [](const std::pair<float, int>& a, const std::pair<float, int>& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  };
  size_t keep = vocab;
  if (top_k) {
    keep = params_.top_k;
    std::partial_sort(candidates_.begin(), candidates_.begin() + keep, candidates_.end(), by_logit);
  }
  if (!top_p) {
    for (size_t i = 0; i < keep; ++i) mass += probs_.emplace_back(weight(i));
  } else {
    // Smallest prefix whose mass reaches top_p of the kept tokens' (at least one token).
    double total = 0;
    for (size_t i = 0; i < keep; ++i) total += weight(i);
    size_t sorted = top_k ? keep : 0, head = std::min<size_t>(keep, 256);
    while (true) {
      if (head > sorted) {
        std::partial_sort(candidates_.begin() + sorted, candidates_.begin() + head, candidates_.begin() + keep, by_logit);
        sorted = head;
      }
      while (probs_.size() < head && mass < params_.top_p * total) mass += probs_.emplace_back(weight(probs_.size()));
      if (mass >= params_.top_p * total || head == keep) break;
      head = std::min(keep, head * 4);
    }
    if (probs_.empty()) mass = probs_.emplace_back(weight(0));
  }
  return candidates_[DrawIndex(mass)].second;
}

size_t Sampler::DrawIndex(double mass) {
  std::uniform_real_distribution<double> u(0.0, mass);
  const double r = u(rng_);
  double acc = 0;
  for (size_t i = 0; i < probs_.size(); ++i) {
    acc += probs_[i];
    if (r < acc) return i;
  }
  return probs_.size() - 1;  // r rounded up to the mass
}

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  stops_.erase(std::remove(stops_.begin(), stops_.end(), std::string()), stops_.end());
}

std::string StopMatcher::Add(std::string_view text) {
  if (stopped_) return "";
  pending_.append(text);
  size_t cut = std::string::npos;
  for (const std::string& s : stops_) cut = std::min(cut, pending_.find(s));
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, cut);
    pending_.clear();
    return out;
  }
  // Hold back the longest suffix of pending_ that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const std::string& s : stops_) {
    for (size_t len = std::min(s.size() - 1, pending_.size()); len > hold; --len) {
      if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopMatcher::Flush() {
  std::string out;
  out.swap(pending_);
  return stopped_ ? "" : out;
}

}  // namespace steady
