#include "model/constrain/pushdown.h"

#include <algorithm>

namespace steady {
namespace {

uint64_t Key(int32_t pos, int32_t parent) { return (uint64_t(uint32_t(pos)) << 32) | uint32_t(parent); }

void SortUnique(std::vector<StackTop>* v) {
  if (v->size() < 2) return;
  std::sort(v->begin(), v->end());
  v->erase(std::unique(v->begin(), v->end()), v->end());
}

}  // namespace

int32_t Pushdown::Intern(int32_t pos, int32_t parent) {
  auto [it, added] = frame_ids_.try_emplace(Key(pos, parent), int32_t(frames_.size()));
  if (added) frames_.push_back({pos, parent});
  return it->second;
}

void Pushdown::Expand(StackTop t, std::vector<StackTop>* out, bool* ended) {
  if (!seen_.insert(Key(t.pos, t.parent)).second) return;
  const Automaton::Position& p = a_.positions[t.pos];
  if (p.has_bytes) out->push_back(t);
  for (const Automaton::Call& c : p.calls) Expand({a_.rule_start[c.rule], Intern(c.ret, t.parent)}, out, ended);
  if (p.final) {
    if (t.parent == kNoFrame) {
      *ended = true;
    } else {
      Expand(frames_[t.parent], out, ended);
    }
  }
}

void Pushdown::Start(int32_t rule, std::vector<StackTop>* out, bool* ended) {
  out->clear();
  *ended = false;
  seen_.clear();
  Expand({a_.rule_start[rule], kNoFrame}, out, ended);
  SortUnique(out);
}

void Pushdown::Advance(const std::vector<StackTop>& in, uint8_t byte, std::vector<StackTop>* out, bool* ended) {
  out->clear();
  *ended = false;
  bool expanded = false;
  for (const StackTop& t : in) {
    const int32_t n = a_.Next(t.pos, byte);
    if (n < 0) continue;
    const Automaton::Position& q = a_.positions[n];
    if (q.calls.empty() && !q.final) {  // the common case: a plain move inside the rule
      out->push_back({n, t.parent});
      continue;
    }
    if (!expanded) seen_.clear();
    expanded = true;
    Expand({n, t.parent}, out, ended);
  }
  SortUnique(out);
}

bool Pushdown::AdvanceBytes(std::vector<StackTop>* tops, const uint8_t* bytes, size_t n, bool* ended) {
  *ended = false;
  for (size_t i = 0; i < n; ++i) {
    Advance(*tops, bytes[i], &scratch_, ended);
    tops->swap(scratch_);
    if (tops->empty() && (!*ended || i + 1 < n)) {
      *ended = false;
      return false;
    }
  }
  return true;
}

}  // namespace steady
