#include "model/sampling/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "tests/testutil.h"

namespace steady {
namespace {

std::vector<float> RandomLogits(int n, uint64_t salt) {
  std::mt19937_64 rng(testing::TestSeed() + salt);
  return testing::RandomNormal<float>(n, rng, 2.0);
}

TEST(SamplingTest, GreedyIsArgmax) {
  std::vector<float> logits = RandomLogits(50, 1);
  const int argmax = int(std::max_element(logits.begin(), logits.end()) - logits.begin());
  Sampler s(SamplingParams{});
  std::vector<float> copy = logits;
  EXPECT_EQ(s.Sample(copy.data(), 50, {}), argmax);
}

TEST(SamplingTest, SameSeedSameTokensDifferentSeedDifferentTokens) {
  const std::vector<float> logits = RandomLogits(50, 2);
  auto draw = [&](uint64_t seed) {
    Sampler s(SamplingParams{1.0f, 0, 1.0f, 1.0f, seed});
    std::vector<int> out;
    for (int i = 0; i < 64; ++i) {
      std::vector<float> copy = logits;
      out.push_back(s.Sample(copy.data(), 50, {}));
    }
    return out;
  };
  EXPECT_EQ(draw(7), draw(7));
  EXPECT_NE(draw(7), draw(8));
}

TEST(SamplingTest, TopKAndTopPRestrictTheCandidates) {
  const std::vector<float> logits = RandomLogits(40, 3);
  std::vector<int> order(40);
  for (int i = 0; i < 40; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  Sampler top3(SamplingParams{2.0f, 3, 1.0f, 1.0f, 1});
  Sampler tiny_p(SamplingParams{2.0f, 0, 1e-6f, 1.0f, 1});
  for (int i = 0; i < 300; ++i) {
    std::vector<float> a = logits, b = logits;
    const int t = top3.Sample(a.data(), 40, {});
    EXPECT_TRUE(t == order[0] || t == order[1] || t == order[2]);
    EXPECT_EQ(tiny_p.Sample(b.data(), 40, {}), order[0]);  // top_p -> 0 keeps only the best
  }
}

TEST(SamplingTest, TemperatureSamplesFollowTheDistribution) {
  // Two tokens with logits log(3) and 0: probabilities 3/4 and 1/4 at temperature 1.
  Sampler s(SamplingParams{1.0f, 0, 1.0f, 1.0f, testing::TestSeed()});
  int first = 0;
  constexpr int kDraws = 20000;
  for (int i = 0; i < kDraws; ++i) {
    std::vector<float> l = {std::log(3.0f), 0.0f};
    first += s.Sample(l.data(), 2, {}) == 0;
  }
  EXPECT_NEAR(double(first) / kDraws, 0.75, 0.02);  // ~6 standard deviations
}

// The plain reference: softmax(logits / T) over every token sorted by logit (ties: lower id), cut to
// the smallest prefix whose mass reaches top_p, renormalized. {token -> probability}.
std::map<int, double> NucleusReference(const std::vector<float>& logits, float temperature, float top_p) {
  std::vector<int> order(logits.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = int(i);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] != logits[b] ? logits[a] > logits[b] : a < b; });
  std::vector<double> p;
  double total = 0;
  for (int t : order) total += p.emplace_back(std::exp(double(logits[t]) / temperature - double(logits[order[0]]) / temperature));
  std::map<int, double> nucleus;
  double mass = 0;
  for (size_t i = 0; i < order.size() && (nucleus.empty() || mass < top_p * total); ++i) {
    nucleus[order[i]] = p[i];
    mass += p[i];
  }
  for (auto& [t, q] : nucleus) q /= mass;
  return nucleus;
}

// Draws without top-k walk the ids unsorted (all tokens) or sort only a growing head (top-p): each
// token's frequency must be its reference probability, and no token outside the nucleus may come.
TEST(SamplingTest, UnsortedAndHeadSortedDrawsFollowTheReferenceNucleus) {
  struct Case {
    int vocab;
    float scale, temperature, top_p;
  };
  // 64 tokens: every one or a 0.9 nucleus; 5000 nearly flat tokens: a nucleus far past the first
  // 256-token head, so the head grows.
  for (const Case c : {Case{64, 2.0f, 0.8f, 1.0f}, Case{64, 2.0f, 0.8f, 0.9f}, Case{5000, 0.3f, 1.0f, 0.95f}}) {
    SCOPED_TRACE(::testing::Message() << "vocab " << c.vocab << " top_p " << c.top_p);
    std::vector<float> logits = RandomLogits(c.vocab, 40 + c.vocab);
    for (float& l : logits) l *= c.scale / 2.0f;
    const std::map<int, double> nucleus = NucleusReference(logits, c.temperature, c.top_p);
    Sampler s(SamplingParams{c.temperature, 0, c.top_p, 1.0f, testing::TestSeed()});
    const int draws = c.vocab > 64 ? 2000 : 60000;  // the large case only checks membership
    std::map<int, int> counts;
    for (int i = 0; i < draws; ++i) {
      std::vector<float> copy = logits;
      const int t = s.Sample(copy.data(), c.vocab, {});
      ASSERT_TRUE(nucleus.contains(t)) << "token " << t << " is outside the nucleus";
      ++counts[t];
    }
    if (c.vocab > 64) {
      EXPECT_GT(nucleus.size(), 256u);  // the case reaches past the first head...
      EXPECT_GT(counts.size(), 256u);   // ...and so do the draws
      continue;                         // too many tokens for per-token frequencies
    }
    for (const auto& [t, q] : nucleus) {
      const double f = double(counts[t]) / draws;
      EXPECT_NEAR(f, q, 5 * std::sqrt(q * (1 - q) / draws) + 1e-4) << "token " << t;
    }
  }
}

TEST(SamplingTest, RepetitionPenaltyDiscouragesSeenTokens) {
  std::vector<float> logits = {2.0f, 1.9f, -1.0f};
  Sampler s(SamplingParams{0.0f, 0, 1.0f, 1.5f, 0});
  EXPECT_EQ(s.Sample(logits.data(), 3, {0, 0}), 1);
  EXPECT_FLOAT_EQ(logits[0], 2.0f / 1.5f);  // applied once per distinct token
}

TEST(SamplingTest, ValidationNamesTheField) {
  struct Case {
    SamplingParams p;
    const char* field;
  } cases[] = {{{NAN, 0, 1, 1, 0}, "temperature"}, {{-1, 0, 1, 1, 0}, "temperature"},
               {{1, -2, 1, 1, 0}, "top_k"},        {{1, 0, 0, 1, 0}, "top_p"},
               {{1, 0, NAN, 1, 0}, "top_p"},       {{1, 0, 1, 0, 0}, "repetition_penalty"},
               {{1, 0, 1, INFINITY, 0}, "repetition_penalty"}};
  for (const Case& c : cases) {
    const absl::Status s = ValidateSamplingParams(c.p);
    ASSERT_FALSE(s.ok()) << c.field;
    EXPECT_NE(std::string(s.message()).find(c.field), std::string::npos) << s;
  }
  EXPECT_TRUE(ValidateSamplingParams(SamplingParams{}).ok());
}

TEST(LogprobTest, MatchesThePlainSoftmaxAndSumsToOne) {
  // Large offsets: a naive exp would overflow float.
  std::vector<float> logits = RandomLogits(40, 7);
  for (float& x : logits) x += 200.0f;
  double total = 0;
  for (int t = 0; t < 40; ++t) {
    double sum = 0;  // the plain reference, shifted by the known offset
    for (float x : logits) sum += std::exp(double(x) - 200.0);
    EXPECT_NEAR(Logprob(logits.data(), 40, t), double(logits[t]) - 200.0 - std::log(sum), 1e-4);
    total += std::exp(double(Logprob(logits.data(), 40, t)));
  }
  EXPECT_NEAR(total, 1.0, 1e-5);
}

TEST(LogprobTest, TopLogprobsAreTheMostLikelyInOrder) {
  std::vector<float> logits = {0.5f, 3.0f, -1.0f, 3.0f, 2.0f};
  const std::vector<TokenLogprob> top = TopLogprobs(logits.data(), 5, 3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].token, 1);  // a tie goes to the lower id
  EXPECT_EQ(top[1].token, 3);
  EXPECT_EQ(top[2].token, 4);
  for (const TokenLogprob& t : top) EXPECT_FLOAT_EQ(t.logprob, Logprob(logits.data(), 5, t.token));
  EXPECT_EQ(TopLogprobs(logits.data(), 5, 0).size(), 0u);
  EXPECT_EQ(TopLogprobs(logits.data(), 5, 9).size(), 5u);  // at most the vocabulary
}

// OpenAI's definitions, computed by hand: logit_bias adds, presence subtracts once per drawn token,
// frequency once per draw.
TEST(SamplerTest, LogitBiasForcesAndBans) {
  const std::vector<float> base = {2.0f, 1.0f, 0.5f, 0.0f};
  SamplingParams p;
  p.temperature = 1.0f;
  p.logit_bias = {{3, 100.0f}};
  Sampler forced(p);
  for (int i = 0; i < 50; ++i) {
    std::vector<float> l = base;
    EXPECT_EQ(forced.Sample(l.data(), 4, {}), 3);
  }
  p.logit_bias = {{0, -100.0f}};
  p.temperature = 0.0f;
  Sampler banned(p);
  std::vector<float> l = base;
  EXPECT_EQ(banned.Sample(l.data(), 4, {}), 1);
  EXPECT_FLOAT_EQ(l[0], -98.0f);
}

TEST(SamplerTest, PresenceAndFrequencyPenaltiesCountTheSamplersOwnDraws) {
  SamplingParams p;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  Sampler s(p);  // greedy
  std::vector<float> l = {1.0f, 0.9f, 0.0f};
  EXPECT_EQ(s.Sample(l.data(), 3, {0, 0, 0}), 0);  // the prompt's tokens count for nothing
  l = {1.0f, 0.9f, 0.0f};
  EXPECT_EQ(s.Sample(l.data(), 3, {}), 1);  // 1 - 0.5 - 0.25 = 0.25 < 0.9
  EXPECT_FLOAT_EQ(l[0], 0.25f);
  l = {2.0f, 1.5f, 0.0f};
  EXPECT_EQ(s.Sample(l.data(), 3, {}), 0);  // 0: 2 - 0.75 = 1.25; 1: 1.5 - 0.75 = 0.75
  l = {2.0f, 1.5f, 0.0f};
  s.Sample(l.data(), 3, {});
  EXPECT_FLOAT_EQ(l[0], 2.0f - 0.5f - 2 * 0.25f);  // drawn twice
  EXPECT_FLOAT_EQ(l[1], 1.5f - 0.5f - 0.25f);      // drawn once
  EXPECT_FLOAT_EQ(l[2], 0.0f);
}

TEST(SamplerTest, PenaltyAndBiasBoundsAreChecked) {
  SamplingParams p;
  p.presence_penalty = 2.5f;
  EXPECT_NE(std::string(ValidateSamplingParams(p).message()).find("presence_penalty"), std::string::npos);
  p = {};
  p.frequency_penalty = std::nanf("");
  EXPECT_NE(std::string(ValidateSamplingParams(p).message()).find("frequency_penalty"), std::string::npos);
  p = {};
  p.logit_bias = {{5, 101.0f}};
  EXPECT_NE(std::string(ValidateSamplingParams(p).message()).find("logit_bias"), std::string::npos);
  p.logit_bias = {{-1, 1.0f}};
  EXPECT_NE(std::string(ValidateSamplingParams(p).message()).find("logit_bias"), std::string::npos);
}

TEST(StopMatcherTest, HoldsBackPossibleStopPrefixesAndCutsAtTheStop) {
  StopMatcher m({"END", "\n\n"});
  std::string out;
  out += m.Add("hello E");
  EXPECT_EQ(out, "hello ");  // "E" might begin "END"
  out += m.Add("NOUGH ");
  EXPECT_EQ(out, "hello ENOUGH ");
  out += m.Add("then EN");
  out += m.Add("D and more");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(out, "hello ENOUGH then ");
  EXPECT_EQ(m.Add("x"), "");
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopMatcherTest, FlushReleasesHeldTextWhenNoStopCame) {
  StopMatcher m({"\n\n"});
  EXPECT_EQ(m.Add("a\n"), "a");
  EXPECT_EQ(m.Flush(), "\n");
  StopMatcher none({});
  EXPECT_EQ(none.Add("abc"), "abc");
}

}  // namespace
}  // namespace steady
