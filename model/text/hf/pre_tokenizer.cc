#include "model/text/hf/pre_tokenizer.h"

#include <algorithm>

#include "base/utf8.h"
#include "model/text/hf/normalizer.h"
#include "model/text/hf/unicode.h"

namespace steady::hf {
namespace {

struct Span {
  size_t begin, end;
  bool delimiter;
};

// JavaScript's whitespace (\s under the u flag), which the port's ByteLevel regex uses.
constexpr char kJsSpace[] =
    "\\x{9}-\\x{D}\\x{20}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}\\x{FEFF}";

const Regex& ByteLevelRegex() {
  static const Regex* r = [] {
    const std::string s = kJsSpace;
    const std::string pattern = absl::StrCat("'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^", s, "\\p{L}\\p{N}]+|[", s,
                                             "]+(?![^", s, "])|[", s, "]+");
    return new Regex(Regex::Compile(pattern).value());
  }();
  return *r;
}

// The Rust library's Whitespace pre-tokenizer: \w+|[^\w\s]+ with Unicode classes.
const Regex& WhitespaceRegex() {
  static const Regex* r = [] {
    const std::string w = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}";
    return new Regex(Regex::Compile(absl::StrCat("[", w, "]+|[^", w, "\\p{White_Space}]+")).value());
  }();
  return *r;
}

// The pieces of `text` in order, covering it: the pattern's non-empty matches and the gaps.
absl::StatusOr<std::vector<Span>> FindSpans(const PreTokenizer& p, std::string_view text) {
  std::vector<Span> spans;
  size_t prev = 0;
  auto add = [&](size_t begin, size_t end) {
    if (begin == end) return;
    if (prev < begin) spans.push_back({prev, begin, false});
    spans.push_back({begin, end, true});
    prev = end;
  };
  if (p.literal) {
    if (!p.literal->empty()) {
      for (size_t at = text.find(*p.literal); at != std::string_view::npos; at = text.find(*p.literal, prev)) {
        add(at, at + p.literal->size());
      }
    }
  } else if (absl::Status st = p.regex->ForEachMatch(text, add); !st.ok()) {
    return st;
  }
  if (prev < text.size()) spans.push_back({prev, text.size(), false});
  if (p.invert) {
    for (Span& s : spans) s.delimiter = !s.delimiter;
  }
  return spans;
}

// The Rust library's SplitDelimiterBehavior applied to spans (delimiter = the pattern's pieces).
void ApplyBehavior(SplitBehavior behavior, std::string_view text, std::vector<Span> spans, const WordSink& out) {
  std::vector<Span> kept;
  bool previous = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Span& s : spans) {
        if (!s.delimiter) kept.push_back(s);
      }
      break;
    case SplitBehavior::kIsolated:
      kept = std::move(spans);
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Span& s : spans) {
        if (s.delimiter && !previous && !kept.empty()) {
          kept.back().end = s.end;
        } else {
          kept.push_back(s);
        }
        previous = s.delimiter;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->delimiter && !previous && !kept.empty()) {
          kept.back().begin = it->begin;
        } else {
          kept.push_back(*it);
        }
        previous = it->delimiter;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    case SplitBehavior::kContiguous:
      for (const Span& s : spans) {
        if (!kept.empty() && s.delimiter == previous) {
          kept.back().end = s.end;
        } else {
          kept.push_back(s);
        }
        previous = s.delimiter;
      }
      break;
  }
  for (const Span& s : kept) {
    if (s.end > s.begin) out(text.substr(s.begin, s.end - s.begin));
  }
}

absl::StatusOr<SplitBehavior> ParseBehavior(const Json& j, const std::string& path) {
  auto name = ReadString(j, path, "behavior");
  if (!name.ok()) return name.status();
  static const std::pair<const char*, SplitBehavior> kNames[] = {
      {"Removed", SplitBehavior::kRemoved},
      {"Isolated", SplitBehavior::kIsolated},
      {"MergedWithPrevious", SplitBehavior::kMergedWithPrevious},
      {"MergedWithNext", SplitBehavior::kMergedWithNext},
      {"Contiguous", SplitBehavior::kContiguous}};
  for (const auto& [n, b] : kNames) {
    if (*name == n) return b;
  }
  return FieldError(Child(path, "behavior"), absl::StrCat("\"", *name, "\" is not a split behavior"));
}

absl::StatusOr<PreTokenizer> Parse(const Json& j, const std::string& path, bool last, bool* byte_level) {
  auto type = ReadType(j, path);
  if (!type.ok()) return type.status();
  PreTokenizer p;
  if (*type == "Sequence") {
    const Json* steps = Find(j, "pretokenizers");
    if (!steps || !steps->is_array()) return Unexpected(Child(path, "pretokenizers"), "a list", steps ? *steps : Json());
    for (size_t i = 0; i < steps->size(); ++i) {
      auto step = Parse((*steps)[i], Index(Child(path, "pretokenizers"), i), last && i + 1 == steps->size(), byte_level);
      if (!step.ok()) return step.status();
      p.steps.push_back(*std::move(step));
    }
    return p;
  }
  if (*type == "Split") {
    p.kind = PreTokenizer::Kind::kSplit;
    if (absl::Status st = ParsePattern(j, path, &p.literal, &p.regex); !st.ok()) return st;
    auto behavior = ParseBehavior(j, path);
    auto invert = ReadBool(j, path, "invert", false);
    if (!behavior.ok() || !invert.ok()) return !behavior.ok() ? behavior.status() : invert.status();
    p.behavior = *behavior;
    p.invert = *invert;
  } else if (*type == "ByteLevel") {
    if (!last) return FieldError(path, "ByteLevel is supported only as the last pre-tokenizer");
    p.kind = PreTokenizer::Kind::kByteLevel;
    auto prefix = ReadBool(j, path, "add_prefix_space", false);
    auto use_regex = ReadBool(j, path, "use_regex", true);
    if (!prefix.ok() || !use_regex.ok()) return !prefix.ok() ? prefix.status() : use_regex.status();
    p.add_prefix_space = *prefix;
    p.use_regex = *use_regex;
    *byte_level = true;
  } else if (*type == "Digits") {
    p.kind = PreTokenizer::Kind::kDigits;
    auto individual = ReadBool(j, path, "individual_digits", false);
    if (!individual.ok()) return individual.status();
    p.individual_digits = *individual;
  } else if (*type == "Metaspace") {
    p.kind = PreTokenizer::Kind::kMetaspace;
    auto replacement = ReadString(j, path, "replacement", "\xE2\x96\x81");
    auto split = ReadBool(j, path, "split", true);
    auto legacy_prefix = ReadBool(j, path, "add_prefix_space", true);
    auto scheme = ReadString(j, path, "prepend_scheme", *legacy_prefix ? "always" : "never");
    for (const absl::Status& st : {replacement.status(), split.status(), legacy_prefix.status(), scheme.status()}) {
      if (!st.ok()) return st;
    }
    if (replacement->empty()) return FieldError(Child(path, "replacement"), "must not be empty");
    p.replacement = *replacement;
    p.split = *split;
    if (*scheme == "always") {
      p.prepend = PreTokenizer::Prepend::kAlways;
    } else if (*scheme == "first") {
      p.prepend = PreTokenizer::Prepend::kFirst;
    } else if (*scheme == "never") {
      p.prepend = PreTokenizer::Prepend::kNever;
    } else {
      return FieldError(Child(path, "prepend_scheme"), absl::StrCat("\"", *scheme, "\" is not always, first or never"));
    }
    p.literal = p.replacement;  // the split point (merged with the word after it)
    p.behavior = SplitBehavior::kMergedWithNext;
  } else if (*type == "Whitespace") {
    p.kind = PreTokenizer::Kind::kWhitespace;
    p.regex = WhitespaceRegex();
    p.behavior = SplitBehavior::kRemoved;
    p.invert = true;
  } else if (*type == "WhitespaceSplit") {
    p.kind = PreTokenizer::Kind::kWhitespaceSplit;
  } else {
    return FieldError(Child(path, "type"),
                      absl::StrCat("pre-tokenizer \"", *type,
                                   "\" is not supported (Sequence, Split, ByteLevel, Digits, Metaspace, Whitespace, "
                                   "WhitespaceSplit are)"));
  }
  return p;
}

// Runs of characters split where `pred` changes (and between two matching characters when
// `isolate_each`); `keep` says which runs go to `out` (by whether they match).
void SplitRuns(std::string_view text, bool (*pred)(char32_t), bool isolate_each, bool keep_matching, bool keep_other,
               const WordSink& out) {
  size_t start = 0;
  bool in = false;
  for (size_t i = 0; i < text.size();) {
    size_t len;
    const bool now = pred(DecodeUtf8At(text, i, &len));
    if (i > start && (now != in || (now && isolate_each))) {
      if (in ? keep_matching : keep_other) out(text.substr(start, i - start));
      start = i;
    }
    in = now;
    i += len;
  }
  if (start < text.size() && (in ? keep_matching : keep_other)) out(text.substr(start));
}

absl::Status Apply(const PreTokenizer& p, std::string_view text, int section, const WordSink& out);

// A Sequence from step `i` on: every word of step i goes through the steps after it.
absl::Status ApplyFrom(const PreTokenizer& seq, size_t i, std::string_view text, int section, const WordSink& out) {
  if (i == seq.steps.size()) {
    out(text);
    return absl::OkStatus();
  }
  absl::Status status;
  absl::Status st = Apply(seq.steps[i], text, section, [&](std::string_view word) {
    if (status.ok()) status = ApplyFrom(seq, i + 1, word, section, out);
  });
  return st.ok() ? status : st;
}

absl::Status Apply(const PreTokenizer& p, std::string_view text, int section, const WordSink& out) {
  switch (p.kind) {
    case PreTokenizer::Kind::kSequence:
      return ApplyFrom(p, 0, text, section, out);
    case PreTokenizer::Kind::kSplit:
    case PreTokenizer::Kind::kWhitespace: {
      auto spans = FindSpans(p, text);
      if (!spans.ok()) return spans.status();
      ApplyBehavior(p.behavior, text, *std::move(spans), out);
      return absl::OkStatus();
    }
    case PreTokenizer::Kind::kByteLevel: {
      std::string with_prefix;
      if (p.add_prefix_space && (text.empty() || text[0] != ' ')) {
        with_prefix = " " + std::string(text);
        text = with_prefix;
      }
      if (!p.use_regex) {
        if (!text.empty()) out(text);
        return absl::OkStatus();
      }
      return ByteLevelRegex().ForEachMatch(text, [&](size_t begin, size_t end) {
        if (end > begin) out(text.substr(begin, end - begin));
      });
    }
    case PreTokenizer::Kind::kDigits:
      SplitRuns(text, IsNumeric, p.individual_digits, true, true, out);
      return absl::OkStatus();
    case PreTokenizer::Kind::kWhitespaceSplit:
      SplitRuns(text, IsJsWhiteSpace, false, false, true, out);
      return absl::OkStatus();
    case PreTokenizer::Kind::kMetaspace: {
      std::string replaced;
      replaced.reserve(text.size() + p.replacement.size());
      for (char c : text) {
        if (c == ' ') {
          replaced += p.replacement;
        } else {
          replaced += c;
        }
      }
      const bool prepend = p.prepend == PreTokenizer::Prepend::kAlways ||
                           (p.prepend == PreTokenizer::Prepend::kFirst && section == 0);
      if (prepend && replaced.compare(0, p.replacement.size(), p.replacement) != 0) replaced = p.replacement + replaced;
      if (!p.split) {
        if (!replaced.empty()) out(replaced);
        return absl::OkStatus();
      }
      auto spans = FindSpans(p, replaced);
      if (!spans.ok()) return spans.status();
      ApplyBehavior(p.behavior, replaced, *std::move(spans), out);
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PreTokenizer> ParsePreTokenizer(const Json& j, const std::string& path, bool* byte_level) {
  *byte_level = false;
  return Parse(j, path, /*last=*/true, byte_level);
}

absl::Status PreTokenize(const PreTokenizer& p, std::string_view text, int section, const WordSink& sink) {
  return Apply(p, text, section, sink);
}

}  // namespace steady::hf
