// Grammar -> per-rule byte DFAs (automaton.h): choose the rules that stay rules, build each one's
// NFA with the others inlined (Thompson), determinize, minimize, drop what cannot reach an end,
// refuse left recursion, and compute which bytes may follow each rule.
#include "model/constrain/automaton.h"

#include <algorithm>
#include <functional>
#include <map>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"

namespace steady {
namespace {

// ---- Code point ranges to UTF-8 byte-range sequences (the construction RE2 and Rust's regex use).
using ByteRange = std::pair<uint8_t, uint8_t>;

void EncodeUtf8(uint32_t cp, uint8_t* out, int* len) {
  std::string s;
  AppendUtf8(cp, &s);
  *len = int(s.size());
  for (int i = 0; i < *len; ++i) out[i] = uint8_t(s[i]);
}

int Utf8Length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

void Utf8Sequences(uint32_t lo, uint32_t hi, std::vector<std::vector<ByteRange>>* out) {
  if (lo > hi) return;
  // Surrogates are not characters; UTF-8 never encodes them.
  if (lo < 0xD800 && hi >= 0xD800) {
    Utf8Sequences(lo, 0xD7FF, out);
    Utf8Sequences(0xE000, hi, out);
    return;
  }
  if (lo >= 0xD800 && lo <= 0xDFFF) return Utf8Sequences(0xE000, hi, out);
  static constexpr uint32_t kLengthEnds[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
  for (uint32_t end : kLengthEnds) {
    if (lo <= end && hi > end) {
      Utf8Sequences(lo, end, out);
      Utf8Sequences(end + 1, hi, out);
      return;
    }
  }
  const int n = Utf8Length(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        Utf8Sequences(lo, lo | m, out);
        Utf8Sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        Utf8Sequences(lo, (hi & ~m) - 1, out);
        Utf8Sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  int la, lb;
  EncodeUtf8(lo, a, &la);
  EncodeUtf8(hi, b, &lb);
  std::vector<ByteRange> seq;
  for (int i = 0; i < la; ++i) seq.push_back({a[i], b[i]});
  out->push_back(std::move(seq));
}

// ---- NFA (Thompson): byte-range edges, call edges, epsilon edges.
struct Nfa {
  struct State {
    std::vector<std::pair<ByteRange, int>> bytes;
    std::vector<std::pair<int, int>> calls;  // (rule, target)
    std::vector<int> eps;
  };
  std::vector<State> states;
  int Add() {
    states.emplace_back();
    return int(states.size()) - 1;
  }
};

struct Fragment {
  int start, end;
};

class NfaBuilder {
 public:
  NfaBuilder(const Grammar& g, const std::vector<bool>& kept, int64_t max_states)
      : g_(g), kept_(kept), max_states_(max_states) {}

  // The rule's body with every reference to a rule that is not kept inlined.
  absl::StatusOr<Nfa> Build(int rule, int* start, int* accept) {
    nfa_ = Nfa();
    Fragment f = Node(g_.rule_body[rule]);
    if (too_big_) {
      return absl::InvalidArgumentError(absl::StrCat("grammar: rule `", g_.rule_names[rule], "` expands to more than ",
                                                     max_states_, " automaton states (large repetition counts?)"));
    }
    *start = f.start;
    *accept = f.end;
    return std::move(nfa_);
  }

 private:
  int Add() {
    if (int64_t(nfa_.states.size()) >= max_states_) too_big_ = true;
    return nfa_.Add();
  }
  Fragment Empty() {
    const int s = Add(), e = Add();
    nfa_.states[s].eps.push_back(e);
    return {s, e};
  }

  Fragment Node(int index) {
    if (too_big_) return Empty();
    const GrammarNode& n = g_.nodes[index];
    switch (n.kind) {
      case GrammarNode::Kind::kLiteral: {
        const int s = Add();
        int cur = s;
        for (char c : n.bytes) {
          const int next = Add();
          nfa_.states[cur].bytes.push_back({{uint8_t(c), uint8_t(c)}, next});
          cur = next;
        }
        return {s, cur};
      }
      case GrammarNode::Kind::kClass: {
        const int s = Add(), e = Add();
        std::vector<std::vector<ByteRange>> seqs;
        for (const auto& [lo, hi] : n.ranges) Utf8Sequences(lo, hi, &seqs);
        for (const auto& seq : seqs) {
          int cur = s;
          for (size_t i = 0; i < seq.size(); ++i) {
            const int next = i + 1 == seq.size() ? e : Add();
            nfa_.states[cur].bytes.push_back({seq[i], next});
            cur = next;
          }
        }
        return {s, e};
      }
      case GrammarNode::Kind::kRule: {
        if (!kept_[n.rule]) return Node(g_.rule_body[n.rule]);
        const int s = Add(), e = Add();
        nfa_.states[s].calls.push_back({n.rule, e});
        return {s, e};
      }
      case GrammarNode::Kind::kSequence: {
        if (n.children.empty()) return Empty();
        Fragment f = Node(n.children[0]);
        for (size_t i = 1; i < n.children.size(); ++i) {
          Fragment next = Node(n.children[i]);
          nfa_.states[f.end].eps.push_back(next.start);
          f.end = next.end;
        }
        return f;
      }
      case GrammarNode::Kind::kAlternatives: {
        const int s = Add(), e = Add();
        for (int child : n.children) {
          Fragment f = Node(child);
          nfa_.states[s].eps.push_back(f.start);
          nfa_.states[f.end].eps.push_back(e);
        }
        return {s, e};
      }
      case GrammarNode::Kind::kRepeat: {
        Fragment f = Empty();
        for (int i = 0; i < n.min && !too_big_; ++i) {
          Fragment c = Node(n.children[0]);
          nfa_.states[f.end].eps.push_back(c.start);
          f.end = c.end;
        }
        if (n.max == kUnbounded) {
          Fragment c = Node(n.children[0]);
          const int e = Add();
          nfa_.states[f.end].eps.push_back(c.start);
          nfa_.states[f.end].eps.push_back(e);
          nfa_.states[c.end].eps.push_back(c.start);
          nfa_.states[c.end].eps.push_back(e);
          f.end = e;
        } else {
          // x{0,k} as (x (x (...)?)?)?: each optional copy may end the repetition.
          const int e = Add();
          int cur = f.end;
          for (int i = n.min; i < n.max && !too_big_; ++i) {
            Fragment c = Node(n.children[0]);
            nfa_.states[cur].eps.push_back(c.start);
            nfa_.states[cur].eps.push_back(e);
            cur = c.end;
          }
          nfa_.states[cur].eps.push_back(e);
          f.end = e;
        }
        return f;
      }
    }
    return Empty();
  }

  const Grammar& g_;
  const std::vector<bool>& kept_;
  const int64_t max_states_;
  Nfa nfa_;
  bool too_big_ = false;
};

// ---- One rule's DFA before it joins the automaton's table.
struct Dfa {
  struct State {
    bool final = false;
    std::vector<int32_t> next = std::vector<int32_t>(256, -1);
    std::vector<std::pair<int, int>> calls;  // (rule, state), sorted
  };
  std::vector<State> states;  // state 0 is the start
};

void Closure(const Nfa& nfa, std::vector<int>* set) {
  std::vector<int> stack(*set);
  std::vector<bool> in(nfa.states.size(), false);
  for (int s : *set) in[s] = true;
  while (!stack.empty()) {
    const int s = stack.back();
    stack.pop_back();
    for (int t : nfa.states[s].eps) {
      if (!in[t]) {
        in[t] = true;
        set->push_back(t);
        stack.push_back(t);
      }
    }
  }
  std::sort(set->begin(), set->end());
}

absl::StatusOr<Dfa> Determinize(const Nfa& nfa, int start, int accept, int64_t max_states, const std::string& rule) {
  Dfa dfa;
  std::map<std::vector<int>, int> ids;
  std::vector<std::vector<int>> sets;
  auto intern = [&](std::vector<int> set) -> int {
    Closure(nfa, &set);
    auto [it, added] = ids.try_emplace(set, int(sets.size()));
    if (added) {
      sets.push_back(std::move(set));
      dfa.states.emplace_back();
    }
    return it->second;
  };
  intern({start});
  std::vector<std::vector<int>> by_byte(256);
  for (size_t d = 0; d < sets.size(); ++d) {
    if (int64_t(sets.size()) > max_states) {
      return absl::InvalidArgumentError(absl::StrCat("grammar: rule `", rule, "` needs more than ", max_states,
                                                     " automaton states"));
    }
    for (auto& v : by_byte) v.clear();
    std::map<int, std::vector<int>> by_call;
    bool final = false;
    for (int s : sets[d]) {
      final = final || s == accept;
      for (const auto& [range, t] : nfa.states[s].bytes) {
        for (int b = range.first; b <= range.second; ++b) by_byte[b].push_back(t);
      }
      for (const auto& [r, t] : nfa.states[s].calls) by_call[r].push_back(t);
    }
    dfa.states[d].final = final;
    int prev_id = -1;
    for (int b = 0; b < 256; ++b) {
      if (by_byte[b].empty()) continue;
      // Classes give long runs of bytes with the same targets: determinize each run once.
      const int id = (b > 0 && by_byte[b] == by_byte[b - 1] && prev_id >= 0) ? prev_id : intern(by_byte[b]);
      dfa.states[d].next[b] = id;
      prev_id = id;
    }
    for (auto& [r, targets] : by_call) {
      const int id = intern(std::move(targets));
      dfa.states[d].calls.push_back({r, id});
    }
  }
  return dfa;
}

// Moore's partition refinement: states with the same finality and the same moves (to equivalent
// states) merge.
Dfa Minimize(const Dfa& dfa) {
  const size_t n = dfa.states.size();
  std::vector<int> cls(n);
  for (size_t i = 0; i < n; ++i) cls[i] = dfa.states[i].final ? 1 : 0;
  int classes = 0;
  for (;;) {
    std::map<std::vector<int>, int> ids;
    std::vector<int> next_cls(n);
    for (size_t i = 0; i < n; ++i) {
      const Dfa::State& s = dfa.states[i];
      std::vector<int> sig;
      sig.reserve(260);
      sig.push_back(cls[i]);
      for (int t : s.next) sig.push_back(t < 0 ? -1 : cls[t]);
      for (const auto& [r, t] : s.calls) {
        sig.push_back(r);
        sig.push_back(cls[t]);
      }
      next_cls[i] = ids.try_emplace(std::move(sig), int(ids.size())).first->second;
    }
    const int count = int(ids.size());
    cls.swap(next_cls);
    if (count == classes) break;
    classes = count;
  }
  // Renumber so that the start's class is 0.
  std::vector<int> order(classes, -1);
  int next_id = 0;
  order[cls[0]] = next_id++;
  for (size_t i = 0; i < n; ++i) {
    if (order[cls[i]] < 0) order[cls[i]] = next_id++;
  }
  Dfa out;
  out.states.resize(classes);
  std::vector<bool> done(classes, false);
  for (size_t i = 0; i < n; ++i) {
    const int c = order[cls[i]];
    if (done[c]) continue;
    done[c] = true;
    Dfa::State& s = out.states[c];
    s.final = dfa.states[i].final;
    for (int b = 0; b < 256; ++b) s.next[b] = dfa.states[i].next[b] < 0 ? -1 : order[cls[dfa.states[i].next[b]]];
    for (const auto& [r, t] : dfa.states[i].calls) s.calls.push_back({r, order[cls[t]]});
  }
  return out;
}

// The rules that stay rules: the root, every rule a back edge of a depth-first walk from the root
// reaches (so the inlined rest has no cycle), and those too large to copy into each use.
std::vector<bool> KeptRules(const Grammar& g, const AutomatonLimits& limits) {
  const size_t rules = g.rule_names.size();
  std::vector<std::vector<int>> refs(rules);
  for (size_t r = 0; r < rules; ++r) {
    std::vector<int> stack = {g.rule_body[r]};
    while (!stack.empty()) {
      const GrammarNode& n = g.nodes[stack.back()];
      stack.pop_back();
      if (n.kind == GrammarNode::Kind::kRule) refs[r].push_back(n.rule);
      for (int c : n.children) stack.push_back(c);
    }
  }
  std::vector<bool> kept(rules, false);
  std::vector<int> state(rules, 0);  // 0 unseen, 1 on the walk's path, 2 done
  std::vector<int> post_order;
  std::function<void(int)> visit = [&](int r) {
    state[r] = 1;
    for (int t : refs[r]) {
      if (state[t] == 1) kept[t] = true;
      if (state[t] == 0) visit(t);
    }
    state[r] = 2;
    post_order.push_back(r);
  };
  visit(g.root);
  kept[g.root] = true;
  // Sizes bottom-up (post order: every inlined rule a rule uses comes before it).
  std::vector<int64_t> size(rules, 0);
  std::function<int64_t(int)> node_size = [&](int index) -> int64_t {
    const GrammarNode& n = g.nodes[index];
    switch (n.kind) {
      case GrammarNode::Kind::kLiteral: return int64_t(n.bytes.size()) + 1;
      case GrammarNode::Kind::kClass: return 8 * int64_t(n.ranges.size()) + 2;
      case GrammarNode::Kind::kRule: return kept[n.rule] ? 2 : size[n.rule];
      case GrammarNode::Kind::kRepeat: {
        const int64_t copies = n.max == kUnbounded ? std::max(n.min, 1) : std::max(n.max, 1);
        return std::min<int64_t>(copies * node_size(n.children[0]) + 2, int64_t(1) << 40);
      }
      default: {
        int64_t total = 2;
        for (int c : n.children) total = std::min<int64_t>(total + node_size(c), int64_t(1) << 40);
        return total;
      }
    }
  };
  for (int r : post_order) {
    size[r] = node_size(g.rule_body[r]);
    if (size[r] > limits.inline_size) kept[r] = true;
  }
  for (size_t r = 0; r < rules; ++r) {
    if (state[r] == 0) kept[r] = false;  // unreachable from the root
  }
  return kept;
}

}  // namespace

absl::StatusOr<Automaton> CompileAutomaton(const Grammar& g, const AutomatonLimits& limits) {
  const std::vector<bool> kept = KeptRules(g, limits);
  // Each kept rule's minimal DFA; then one table.
  std::vector<int> rules;
  std::vector<Dfa> dfas;
  int64_t total = 0;
  for (size_t r = 0; r < kept.size(); ++r) {
    if (!kept[r]) continue;
    NfaBuilder builder(g, kept, limits.max_nfa_states);
    int start = 0, accept = 0;
    auto nfa = builder.Build(int(r), &start, &accept);
    if (!nfa.ok()) return nfa.status();
    auto dfa = Determinize(*nfa, start, accept, limits.max_positions, g.rule_names[r]);
    if (!dfa.ok()) return dfa.status();
    dfas.push_back(Minimize(*dfa));
    total += int64_t(dfas.back().states.size());
    if (total > limits.max_positions) {
      return absl::InvalidArgumentError(absl::StrCat("grammar: more than ", limits.max_positions, " automaton states"));
    }
    rules.push_back(int(r));
  }
  Automaton a;
  std::vector<int32_t> rule_index(kept.size(), -1);  // grammar rule -> automaton rule
  for (size_t i = 0; i < rules.size(); ++i) rule_index[rules[i]] = int32_t(i);
  std::vector<int32_t> offset(rules.size());
  for (size_t i = 0; i < rules.size(); ++i) {
    offset[i] = int32_t(a.positions.size());
    a.rule_start.push_back(offset[i]);
    a.rule_names.push_back(g.rule_names[rules[i]]);
    a.positions.resize(a.positions.size() + dfas[i].states.size());
  }
  a.root = rule_index[g.root];
  a.next.assign(a.positions.size() * 256, -1);
  for (size_t i = 0; i < rules.size(); ++i) {
    for (size_t s = 0; s < dfas[i].states.size(); ++s) {
      const Dfa::State& d = dfas[i].states[s];
      const size_t p = size_t(offset[i]) + s;
      Automaton::Position& pos = a.positions[p];
      pos.rule = int32_t(i);
      pos.final = d.final;
      for (int b = 0; b < 256; ++b) a.next[p * 256 + b] = d.next[b] < 0 ? -1 : offset[i] + d.next[b];
      for (const auto& [r, t] : d.calls) pos.calls.push_back({rule_index[r], offset[i] + t});
    }
  }
  const size_t n = a.positions.size();

  // Live positions: some path from them reaches the rule's end (calls only through rules that can
  // match something). Dead moves are removed, so a matcher's every stack can still complete.
  std::vector<bool> live(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t p = 0; p < n; ++p) {
      if (live[p]) continue;
      bool l = a.positions[p].final;
      for (int b = 0; b < 256 && !l; ++b) l = a.next[p * 256 + b] >= 0 && live[a.next[p * 256 + b]];
      for (const auto& c : a.positions[p].calls) l = l || (live[a.rule_start[c.rule]] && live[c.ret]);
      if (l) live[p] = changed = true;
    }
  }
  if (!live[a.rule_start[a.root]]) return absl::InvalidArgumentError("grammar: `root` matches no text");
  for (size_t p = 0; p < n; ++p) {
    for (int b = 0; b < 256; ++b) {
      int32_t& t = a.next[p * 256 + b];
      if (t >= 0 && !live[t]) t = -1;
    }
    auto& calls = a.positions[p].calls;
    calls.erase(std::remove_if(calls.begin(), calls.end(),
                               [&](const Automaton::Call& c) { return !live[a.rule_start[c.rule]] || !live[c.ret]; }),
                calls.end());
    bool bytes = false;
    for (int b = 0; b < 256 && !bytes; ++b) bytes = a.next[p * 256 + b] >= 0;
    a.positions[p].has_bytes = bytes;
  }

  // Nullable positions (can end the rule without a byte), then left recursion: a rule that can
  // call itself before consuming a byte would grow a matcher's stack forever.
  std::vector<bool> nullable(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t p = 0; p < n; ++p) {
      if (nullable[p]) continue;
      bool z = a.positions[p].final;
      for (const auto& c : a.positions[p].calls) z = z || (nullable[a.rule_start[c.rule]] && nullable[c.ret]);
      if (z) nullable[p] = changed = true;
    }
  }
  const size_t nrules = a.rule_start.size();
  std::vector<std::vector<int>> calls_at_start(nrules);
  for (size_t r = 0; r < nrules; ++r) {
    std::vector<int32_t> stack = {a.rule_start[r]};
    std::vector<bool> seen(n, false);
    seen[a.rule_start[r]] = true;
    while (!stack.empty()) {
      const int32_t p = stack.back();
      stack.pop_back();
      for (const auto& c : a.positions[p].calls) {
        calls_at_start[r].push_back(c.rule);
        if (nullable[a.rule_start[c.rule]] && !seen[c.ret]) {
          seen[c.ret] = true;
          stack.push_back(c.ret);
        }
      }
    }
  }
  {
    std::vector<int> state(nrules, 0);
    std::string cycle;
    std::function<bool(int)> visit = [&](int r) {
      state[r] = 1;
      for (int t : calls_at_start[r]) {
        if (state[t] == 1) {
          cycle = a.rule_names[t];
          return true;
        }
        if (state[t] == 0 && visit(t)) return true;
      }
      state[r] = 2;
      return false;
    };
    for (size_t r = 0; r < nrules; ++r) {
      if (state[r] == 0 && visit(int(r))) {
        return absl::InvalidArgumentError(absl::StrCat("grammar: rule `", cycle,
                                                       "` is left-recursive (it can reach itself before matching "
                                                       "a character); rewrite it with repetition"));
      }
    }
  }

  // FIRST bytes of each position, then FOLLOW of each rule.
  std::vector<std::bitset<256>> first(n);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t p = 0; p < n; ++p) {
      std::bitset<256> f = first[p];
      for (int b = 0; b < 256; ++b) {
        if (a.next[p * 256 + b] >= 0) f.set(b);
      }
      for (const auto& c : a.positions[p].calls) {
        f |= first[a.rule_start[c.rule]];
        if (nullable[a.rule_start[c.rule]]) f |= first[c.ret];
      }
      if (f != first[p]) {
        first[p] = f;
        changed = true;
      }
    }
  }
  a.follow.assign(nrules, {});
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t p = 0; p < n; ++p) {
      for (const auto& c : a.positions[p].calls) {
        std::bitset<256> f = a.follow[c.rule] | first[c.ret];
        if (nullable[c.ret]) f |= a.follow[a.positions[p].rule];
        if (f != a.follow[c.rule]) {
          a.follow[c.rule] = f;
          changed = true;
        }
      }
    }
  }
  return a;
}

}  // namespace steady
