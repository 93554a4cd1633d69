// The plain reference the constraint engine is tested against: an Earley recognizer over code
// points that works on the parsed GBNF (grammar.h) directly, sharing nothing with the automaton,
// the stacks or the token tables. Slow and obviously right: "may these bytes begin a text of the
// grammar, and do they form one?".
#ifndef STEADY_TESTS_MODEL_CONSTRAIN_EARLEY_REFERENCE_H_
#define STEADY_TESTS_MODEL_CONSTRAIN_EARLEY_REFERENCE_H_

#include <cstdint>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "model/constrain/grammar.h"

namespace steady {

class EarleyReference {
 public:
  explicit EarleyReference(const Grammar& g) {
    rule_sym_.resize(g.rule_names.size(), -1);
    for (size_t r = 0; r < g.rule_names.size(); ++r) rule_sym_[r] = NewSymbol();
    for (size_t r = 0; r < g.rule_names.size(); ++r) {
      if (g.rule_body[r] >= 0) AddProduction(rule_sym_[r], {Lower(g, g.rule_body[r])});
    }
    root_ = rule_sym_[g.root];
    root_item_ = Sym(root_);
    by_lhs_.resize(symbols_);
    for (size_t q = 0; q < productions_.size(); ++q) by_lhs_[productions_[q].lhs].push_back(int(q));
    nullable_.assign(symbols_, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (const Production& p : productions_) {
        if (nullable_[p.lhs]) continue;
        bool all = true;
        for (const Item& it : p.rhs) all = all && it.symbol >= 0 && nullable_[it.symbol];
        if (all) nullable_[p.lhs] = changed = true;
      }
    }
  }

  enum class Verdict { kDead, kPrefix, kComplete };
  // kComplete: `bytes` is a text of the grammar; kPrefix: it can be continued into one.
  Verdict Check(const std::string& bytes) const {
    std::vector<uint32_t> cps;
    uint32_t lo = 0, hi = 0;
    bool partial = false;
    if (!Decode(bytes, &cps, &partial, &lo, &hi)) return Verdict::kDead;
    std::vector<std::set<State>> chart(cps.size() + 1);
    Add(chart, 0, {-1, 0, 0});  // the start item: root -> . root (production -1)
    for (size_t k = 0; k <= cps.size(); ++k) {
      Close(chart, k);
      if (chart[k].empty()) return Verdict::kDead;
      if (k == cps.size()) break;
      for (const State& s : chart[k]) {
        const Item* next = NextItem(s);
        if (next && next->symbol < 0 && Matches(*next, cps[k], cps[k])) {
          Add(chart, k + 1, {std::get<0>(s), std::get<1>(s) + 1, std::get<2>(s)});
        }
      }
    }
    const std::set<State>& last = chart[cps.size()];
    if (partial) {
      for (const State& s : last) {
        const Item* next = NextItem(s);
        if (next && next->symbol < 0 && Matches(*next, lo, hi)) return Verdict::kPrefix;
      }
      return Verdict::kDead;
    }
    return last.count({-1, 1, 0}) ? Verdict::kComplete : Verdict::kPrefix;
  }

 private:
  // A right-hand side item: a nonterminal (symbol >= 0) or a code point set (symbol -1).
  struct Item {
    int symbol = -1;
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
  };
  struct Production {
    int lhs;
    std::vector<Item> rhs;
  };
  using State = std::tuple<int, int, int>;  // (production or -1 for the start, dot, origin)

  int NewSymbol() { return symbols_++; }
  void AddProduction(int lhs, std::vector<Item> rhs) { productions_.push_back({lhs, std::move(rhs)}); }
  static Item Sym(int s) { return Item{s, {}}; }

  // A node as one item (a nonterminal of its own where it is not a single code point set).
  Item Lower(const Grammar& g, int index) {
    const GrammarNode& n = g.nodes[index];
    switch (n.kind) {
      case GrammarNode::Kind::kClass: return Item{-1, n.ranges};
      case GrammarNode::Kind::kRule: return Sym(rule_sym_[n.rule]);
      case GrammarNode::Kind::kLiteral: {
        std::vector<uint32_t> cps;
        uint32_t lo, hi;
        bool partial;
        Decode(n.bytes, &cps, &partial, &lo, &hi);
        const int s = NewSymbol();
        std::vector<Item> rhs;
        for (uint32_t c : cps) rhs.push_back(Item{-1, {{c, c}}});
        AddProduction(s, std::move(rhs));
        return Sym(s);
      }
      case GrammarNode::Kind::kSequence: {
        const int s = NewSymbol();
        std::vector<Item> rhs;
        for (int c : n.children) rhs.push_back(Lower(g, c));
        AddProduction(s, std::move(rhs));
        return Sym(s);
      }
      case GrammarNode::Kind::kAlternatives: {
        const int s = NewSymbol();
        for (int c : n.children) AddProduction(s, {Lower(g, c)});
        return Sym(s);
      }
      case GrammarNode::Kind::kRepeat: {
        // X{m,n}: m copies, then (n - m) nested optional copies, or a right-recursive star.
        const int s = NewSymbol();
        std::vector<Item> rhs;
        for (int i = 0; i < n.min; ++i) rhs.push_back(Lower(g, n.children[0]));
        if (n.max == kUnbounded) {
          const int star = NewSymbol();
          AddProduction(star, {});
          AddProduction(star, {Lower(g, n.children[0]), Sym(star)});
          rhs.push_back(Sym(star));
        } else if (n.max > n.min) {
          int opt = NewSymbol();
          rhs.push_back(Sym(opt));
          for (int i = n.min; i < n.max; ++i) {
            AddProduction(opt, {});
            const int inner = i + 1 < n.max ? NewSymbol() : -1;
            std::vector<Item> body = {Lower(g, n.children[0])};
            if (inner >= 0) body.push_back(Sym(inner));
            AddProduction(opt, std::move(body));
            opt = inner;
          }
        }
        AddProduction(s, std::move(rhs));
        return Sym(s);
      }
    }
    return Item{};
  }

  const Item* NextItem(const State& s) const {
    const auto [prod, dot, origin] = s;
    if (prod < 0) return dot == 0 ? &root_item_ : nullptr;
    const Production& p = productions_[prod];
    return size_t(dot) < p.rhs.size() ? &p.rhs[dot] : nullptr;
  }

  static bool Matches(const Item& it, uint32_t lo, uint32_t hi) {
    for (const auto& [a, b] : it.ranges) {
      if (a <= hi && lo <= b) return true;
    }
    return false;
  }

  static void Add(std::vector<std::set<State>>& chart, size_t k, State s) { chart[k].insert(s); }

  // Predict and complete (a worklist; a nullable nonterminal is also stepped over when predicted,
  // Aycock and Horspool's fix, so completions within one set need no second pass).
  void Close(std::vector<std::set<State>>& chart, size_t k) const {
    std::vector<State> work(chart[k].begin(), chart[k].end());
    auto add = [&](const State& s) {
      if (chart[k].insert(s).second) work.push_back(s);
    };
    while (!work.empty()) {
      const State s = work.back();
      work.pop_back();
      const auto [prod, dot, origin] = s;
      const Item* next = NextItem(s);
      if (next && next->symbol >= 0) {
        for (int q : by_lhs_[next->symbol]) add({q, 0, int(k)});
        if (nullable_[next->symbol]) add({prod, dot + 1, origin});
      } else if (!next && prod >= 0) {
        const int lhs = productions_[prod].lhs;
        std::vector<State> parents(chart[origin].begin(), chart[origin].end());
        for (const State& p : parents) {
          const Item* pn = NextItem(p);
          if (pn && pn->symbol == lhs) add({std::get<0>(p), std::get<1>(p) + 1, std::get<2>(p)});
        }
      }
    }
  }

  // UTF-8 to code points; a truncated last character gives the range of code points it may begin.
  static bool Decode(const std::string& s, std::vector<uint32_t>* cps, bool* partial, uint32_t* lo, uint32_t* hi) {
    *partial = false;
    for (size_t i = 0; i < s.size();) {
      const uint8_t c = uint8_t(s[i]);
      const int len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
      if (len == 0) return false;
      uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
      const size_t have = std::min(s.size() - i, size_t(len));
      for (size_t k = 1; k < have; ++k) {
        if ((uint8_t(s[i + k]) & 0xC0) != 0x80) return false;
        cp = (cp << 6) | (uint8_t(s[i + k]) & 0x3F);
      }
      if (have < size_t(len)) {
        const int missing = int(len - have);
        *partial = true;
        *lo = cp << (6 * missing);
        *hi = *lo | ((1u << (6 * missing)) - 1);
        const uint32_t min_cp = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
        *lo = std::max(*lo, min_cp);
        if (*hi > kMaxCodepoint) *hi = kMaxCodepoint;
        if (*lo > *hi) return false;
        // Surrogates are no characters.
        if (*lo >= 0xD800 && *hi <= 0xDFFF) return false;
        return true;
      }
      const uint32_t min_cp = len == 1 ? 0 : len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
      if (cp < min_cp || cp > kMaxCodepoint || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
      cps->push_back(cp);
      i += len;
    }
    return true;
  }

  int symbols_ = 0;
  int root_ = 0;
  std::vector<int> rule_sym_;
  std::vector<Production> productions_;
  std::vector<bool> nullable_;
  std::vector<std::vector<int>> by_lhs_;  // productions of each nonterminal
  Item root_item_;  // the start item's one item: root
};

}  // namespace steady

#endif  // STEADY_TESTS_MODEL_CONSTRAIN_EARLEY_REFERENCE_H_
