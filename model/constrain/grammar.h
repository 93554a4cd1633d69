// A context-free grammar over text, as GBNF writes it (llama.cpp's grammars/README.md): rules
// `name ::= body`, literals "...", character classes [a-z] and [^...], `.`, groups, alternatives |,
// and the repetitions * + ? {m} {m,} {m,n}; `root` is where a text starts. Classes and `.` match
// Unicode code points; the automaton (automaton.h) matches their UTF-8 bytes, so a token may end
// inside a character.
#ifndef STEADY_MODEL_CONSTRAIN_GRAMMAR_H_
#define STEADY_MODEL_CONSTRAIN_GRAMMAR_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace steady {

inline constexpr uint32_t kMaxCodepoint = 0x10FFFF;
inline constexpr int kUnbounded = -1;

struct GrammarNode {
  enum class Kind { kSequence, kAlternatives, kLiteral, kClass, kRule, kRepeat };
  Kind kind = Kind::kSequence;
  std::vector<int> children;                            // kSequence, kAlternatives; kRepeat: one
  std::string bytes;                                    // kLiteral: UTF-8
  std::vector<std::pair<uint32_t, uint32_t>> ranges;    // kClass: allowed code points, sorted, disjoint
  int rule = -1;                                        // kRule
  int min = 0, max = kUnbounded;                        // kRepeat
};

struct Grammar {
  std::vector<std::string> rule_names;
  std::vector<int> rule_body;  // node index per rule; -1 while only referenced (an error once parsed)
  std::vector<GrammarNode> nodes;
  int root = -1;

  int AddNode(GrammarNode node) {
    nodes.push_back(std::move(node));
    return int(nodes.size()) - 1;
  }
  // The rule's index, added (without a body) on first use.
  int RuleIndex(std::string_view name);
};

// INVALID_ARGUMENT naming the line and column of a syntax error, an undefined rule, a rule defined
// twice, or a missing `root`.
absl::StatusOr<Grammar> ParseGbnf(std::string_view text);

// Appends the UTF-8 encoding of `cp` (<= kMaxCodepoint) to `out`.
void AppendUtf8(uint32_t cp, std::string* out);

}  // namespace steady

#endif  // STEADY_MODEL_CONSTRAIN_GRAMMAR_H_
