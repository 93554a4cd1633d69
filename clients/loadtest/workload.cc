#include "clients/loadtest/workload.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace steady::loadtest {
namespace {

// Common short English words: most are one to three tokens for a small SentencePiece vocabulary.
constexpr const char* kWords[] = {
    "the",    "of",     "and",   "to",    "in",     "is",    "that",   "it",    "was",   "for",    "on",
    "are",    "as",     "with",  "his",   "they",   "at",    "be",     "this",  "from",  "have",   "or",
    "by",     "one",    "had",   "not",   "but",    "what",  "all",    "were",  "when",  "we",     "there",
    "can",    "an",     "your",  "which", "their",  "said",  "if",     "do",    "will",  "each",   "about",
    "how",    "up",     "out",   "them",  "then",   "she",   "many",   "some",  "so",    "these",  "would",
    "other",  "into",   "has",   "more",  "her",    "two",   "like",   "him",   "see",   "time",   "could",
    "no",     "make",   "than",  "first", "been",   "its",   "who",    "now",   "people", "my",    "made",
    "over",   "did",    "down",  "only",  "way",    "find",  "use",    "may",   "water", "long",   "little",
    "very",   "after",  "words", "called", "just",  "where", "most",   "know",  "get",   "through", "back",
    "much",   "before", "go",    "good",  "new",    "write", "our",    "used",  "me",    "man",    "too",
    "any",    "day",    "same",  "right", "look",   "think", "also",   "around", "another", "came", "come",
    "work",   "three",  "word",  "must",  "because", "does", "part",   "even",  "place", "well",   "such",
    "here",   "take",   "why",   "help",  "put",    "years", "different", "away", "again", "off", "went",
    "old",    "number", "great", "tell",  "men",    "say",   "small",  "every", "found", "still",  "between",
    "name",   "should", "home",  "big",   "give",   "air",   "line",   "set",   "own",   "under",  "read",
    "last",   "never",  "us",    "left",  "end",    "along", "while",  "might", "next",  "sound",  "below",
    "saw",    "something", "thought", "both", "few", "those", "always", "show",  "large", "often",  "together",
    "asked",  "house",  "world", "going", "want",   "school", "important", "until", "form", "food", "keep",
    "children", "feet", "land",  "side",  "without", "boy",  "once",   "animals", "life", "enough", "took",
    "sometimes", "four", "head", "above", "kind",   "began", "almost", "live",  "page",  "got",    "earth",
    "need",   "far",    "hand",  "high",  "year",   "mother", "light", "country", "father", "let",  "night",
};
constexpr size_t kNumWords = sizeof(kWords) / sizeof(kWords[0]);

absl::StatusOr<int64_t> ParseCount(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v < 0 || v > (int64_t(1) << 30)) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": expected a token count >= 0, got \"", text, "\""));
  }
  return int64_t(v);
}

}  // namespace

absl::StatusOr<LengthDistribution> LengthDistribution::Parse(const std::string& flag, const std::string& spec) {
  LengthDistribution d;
  d.spec = spec;
  const std::vector<std::string> parts = absl::StrSplit(spec, absl::MaxSplits(':', 2));
  const auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": expected fixed:N, uniform:A:B or file:PATH, got \"", spec, "\""));
  };
  if (parts[0] == "fixed" && parts.size() == 2) {
    auto n = ParseCount(flag, parts[1]);
    if (!n.ok()) return n.status();
    d.kind = Kind::kFixed;
    d.values = {*n};
  } else if (parts[0] == "uniform" && parts.size() == 3) {
    auto a = ParseCount(flag, parts[1]);
    auto b = ParseCount(flag, parts[2]);
    if (!a.ok()) return a.status();
    if (!b.ok()) return b.status();
    if (*a > *b) return absl::InvalidArgumentError(absl::StrCat("--", flag, ": uniform:A:B needs A <= B"));
    d.kind = Kind::kUniform;
    d.values = {*a, *b};
  } else if (parts[0] == "file" && parts.size() >= 2) {
    const std::string path = spec.substr(5);
    std::ifstream in(path);
    if (!in) return absl::NotFoundError(absl::StrCat("--", flag, ": cannot read ", path));
    d.kind = Kind::kFile;
    std::string line;
    while (std::getline(in, line)) {
      const absl::string_view text = absl::StripAsciiWhitespace(line.substr(0, line.find('#')));
      if (text.empty()) continue;
      auto n = ParseCount(flag, std::string(text));
      if (!n.ok()) return n.status();
      d.values.push_back(*n);
    }
    if (d.values.empty()) return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", path, " has no lengths"));
  } else {
    return bad();
  }
  return d;
}

int64_t LengthDistribution::Sample(std::mt19937_64& rng) const {
  switch (kind) {
    case Kind::kFixed:
      return values[0];
    case Kind::kUniform:
      return std::uniform_int_distribution<int64_t>(values[0], values[1])(rng);
    case Kind::kFile:
      return values[std::uniform_int_distribution<size_t>(0, values.size() - 1)(rng)];
  }
  return values[0];
}

std::mt19937_64 RngFor(uint64_t seed, uint64_t stream, uint64_t index) {
  std::seed_seq seq{uint32_t(seed), uint32_t(seed >> 32), uint32_t(stream), uint32_t(index), uint32_t(index >> 32)};
  return std::mt19937_64(seq);
}

std::string MakePromptText(int64_t words, bool leading_space, std::mt19937_64& rng) {
  std::string text;
  std::uniform_int_distribution<size_t> pick(0, kNumWords - 1);
  for (int64_t i = 0; i < words; ++i) {
    if (i > 0 || leading_space) text += ' ';
    text += kWords[pick(rng)];
  }
  return text;
}

RequestSpec MakeRequestSpec(uint64_t seed, int64_t index, const LengthDistribution& prompt_tokens,
                            const LengthDistribution& output_tokens, double tokens_per_word, bool leading_space) {
  std::mt19937_64 rng = RngFor(seed, /*stream=*/1, uint64_t(index));
  RequestSpec r;
  r.index = index;
  r.prompt_tokens_target = prompt_tokens.Sample(rng);
  r.output_tokens_target = output_tokens.Sample(rng);
  // At least one word: an empty prompt on an empty session has nothing to condition on.
  r.prompt_words = std::max<int64_t>(1, std::llround(double(r.prompt_tokens_target) / tokens_per_word));
  r.prompt = MakePromptText(r.prompt_words, leading_space, rng);
  return r;
}

std::vector<double> ArrivalOffsets(uint64_t seed, double rate, double burstiness, int64_t count, double duration_s) {
  std::mt19937_64 rng = RngFor(seed, /*stream=*/2, 0);
  // Mean gap = shape * scale = 1 / rate.
  std::gamma_distribution<double> gap(burstiness, 1.0 / (rate * burstiness));
  std::vector<double> offsets;
  double t = 0;
  while (true) {
    if (count > 0 && int64_t(offsets.size()) >= count) break;
    if (count <= 0 && duration_s > 0 && t > duration_s) break;
    offsets.push_back(t);
    t += gap(rng);
  }
  return offsets;
}

}  // namespace steady::loadtest
