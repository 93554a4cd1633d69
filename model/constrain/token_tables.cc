#include "model/constrain/token_tables.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "model/constrain/pushdown.h"

namespace steady {

TokenVocabulary::TokenVocabulary(std::vector<std::string> bytes, std::vector<int32_t> end_tokens)
    : bytes_(std::move(bytes)), end_tokens_(std::move(end_tokens)) {
  for (int32_t t = 0; t < int32_t(bytes_.size()); ++t) {
    if (!bytes_[t].empty() && !is_end(t)) sorted_.push_back(t);
  }
  std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) {
    return bytes_[a] != bytes_[b] ? bytes_[a] < bytes_[b] : a < b;
  });
  shared_prefix_.resize(sorted_.size(), 0);
  for (size_t i = 1; i < sorted_.size(); ++i) {
    const std::string& a = bytes_[sorted_[i - 1]];
    const std::string& b = bytes_[sorted_[i]];
    uint32_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
    shared_prefix_[i] = n;
  }
}

bool TokenVocabulary::is_end(int32_t token) const {
  return std::find(end_tokens_.begin(), end_tokens_.end(), token) != end_tokens_.end();
}

int64_t TokenTables::bytes() const {
  int64_t total = int64_t(table_of.size()) * 4;
  for (const PositionTable& t : tables) {
    total += int64_t(t.accepted_bits.size()) * 8 + int64_t(t.accepted.size() + t.uncertain.size()) * 4;
  }
  return total;
}

namespace {

// The positions a stack top can be at: has_bytes positions reachable from the root's start.
std::vector<bool> TopPositions(const Automaton& a) {
  const size_t n = a.positions.size();
  std::vector<bool> seen(n, false);
  std::vector<int32_t> stack = {a.rule_start[a.root]};
  seen[stack[0]] = true;
  auto visit = [&](int32_t p) {
    if (p >= 0 && !seen[p]) {
      seen[p] = true;
      stack.push_back(p);
    }
  };
  while (!stack.empty()) {
    const int32_t p = stack.back();
    stack.pop_back();
    for (int b = 0; b < 256; ++b) visit(a.Next(p, uint8_t(b)));
    for (const Automaton::Call& c : a.positions[p].calls) {
      visit(a.rule_start[c.rule]);
      visit(c.ret);
    }
  }
  for (size_t p = 0; p < n; ++p) seen[p] = seen[p] && a.positions[p].has_bytes;
  return seen;
}

PositionTable BuildTable(const Automaton& a, const TokenVocabulary& vocab, int32_t pos) {
  Pushdown pd(a);  // kNoFrame below the top stands for the unknown rest of the stack
  const std::bitset<256>& follow = a.follow[a.positions[pos].rule];
  const std::vector<int32_t>& sorted = vocab.sorted();
  const std::vector<uint32_t>& shared = vocab.shared_prefix();
  std::vector<std::vector<StackTop>> level(1, {{pos, kNoFrame}});
  std::vector<char> ended(1, 0);  // ended[d]: the rule can end right after d bytes
  size_t valid = 0;               // levels [0, valid] hold the previous token's prefix
  std::vector<int32_t> accepted, uncertain;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const std::string& s = vocab.bytes(sorted[i]);
    const size_t len = s.size();
    if (level.size() < len + 1) {
      level.resize(len + 1);
      ended.resize(len + 1, 0);
    }
    size_t d = std::min<size_t>(shared[i], valid);
    // A prefix that died stays dead: level d is empty then and nothing is recomputed.
    while (d < len && !level[d].empty()) {
      bool e = false;
      pd.Advance(level[d], uint8_t(s[d]), &level[d + 1], &e);
      ended[d + 1] = e;
      ++d;
    }
    valid = d;
    if (d == len && (!level[len].empty() || ended[len])) {
      accepted.push_back(sorted[i]);
      continue;
    }
    for (size_t j = 1; j <= std::min(d, len - 1); ++j) {
      if (ended[j] && follow.test(uint8_t(s[j]))) {
        uncertain.push_back(sorted[i]);
        break;
      }
    }
  }
  PositionTable t;
  t.uncertain = std::move(uncertain);
  if (int64_t(accepted.size()) * 32 > vocab.size()) {
    t.accepted_bits.assign(vocab.words(), 0);
    for (int32_t tok : accepted) t.accepted_bits[tok >> 6] |= uint64_t(1) << (tok & 63);
  } else {
    std::sort(accepted.begin(), accepted.end());
    t.accepted = std::move(accepted);
  }
  return t;
}

}  // namespace

TokenTables BuildTokenTables(const Automaton& a, const TokenVocabulary& vocab) {
  TokenTables out;
  const std::vector<bool> tops = TopPositions(a);
  out.table_of.assign(a.positions.size(), -1);
  std::map<std::tuple<std::vector<uint64_t>, std::vector<int32_t>, std::vector<int32_t>>, int32_t> distinct;
  for (size_t p = 0; p < a.positions.size(); ++p) {
    if (!tops[p]) continue;
    PositionTable t = BuildTable(a, vocab, int32_t(p));
    auto key = std::make_tuple(t.accepted_bits, t.accepted, t.uncertain);
    auto [it, added] = distinct.try_emplace(std::move(key), int32_t(out.tables.size()));
    if (added) out.tables.push_back(std::move(t));
    out.table_of[p] = it->second;
  }
  return out;
}

}  // namespace steady
