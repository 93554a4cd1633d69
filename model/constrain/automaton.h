// A grammar compiled for matching bytes: each rule that must stay a rule (the root, and the rules
// that break every cycle of references) becomes a minimal DFA over bytes and calls of other rules;
// every other rule is inlined where it is used. A matcher (matcher.h) runs the DFAs with a stack of
// return positions. One table holds every rule's DFA states ("positions").
#ifndef STEADY_MODEL_CONSTRAIN_AUTOMATON_H_
#define STEADY_MODEL_CONSTRAIN_AUTOMATON_H_

#include <bitset>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "model/constrain/grammar.h"

namespace steady {

struct AutomatonLimits {
  int64_t max_nfa_states = 400000;  // per rule, after inlining and expanding repetitions
  int64_t max_positions = 200000;   // DFA states of every rule together
  int64_t inline_size = 4000;       // a rule larger than this (NFA states) is called, not inlined
};

struct Automaton {
  struct Call {
    int32_t rule;    // the callee
    int32_t ret;     // the caller's position once the callee has matched
  };
  struct Position {
    int32_t rule = 0;
    bool final = false;      // the rule may end here
    bool has_bytes = false;  // some byte moves on (a matcher's stack tops are such positions)
    std::vector<Call> calls;
  };
  std::vector<Position> positions;
  std::vector<int32_t> next;          // [positions, 256]: the position after a byte, or -1
  std::vector<int32_t> rule_start;    // per kept rule: its first position
  std::vector<std::string> rule_names;
  std::vector<std::bitset<256>> follow;  // per rule: the bytes that may come right after it
  int32_t root = 0;

  int32_t Next(int32_t pos, uint8_t byte) const { return next[size_t(pos) * 256 + byte]; }
};

// INVALID_ARGUMENT naming the rule for a left-recursive rule, a root that matches nothing, or an
// automaton beyond `limits`.
absl::StatusOr<Automaton> CompileAutomaton(const Grammar& grammar, const AutomatonLimits& limits = {});

}  // namespace steady

#endif  // STEADY_MODEL_CONSTRAIN_AUTOMATON_H_
