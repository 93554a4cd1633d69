#include "model/constrain/constraint.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "model/constrain/grammar.h"
#include "model/constrain/json_schema.h"

namespace steady {

absl::StatusOr<std::shared_ptr<const Constraint>> Constraint::Compile(const ConstraintSpec& spec,
                                                                      std::shared_ptr<const TokenVocabulary> vocab) {
  std::shared_ptr<Constraint> c(new Constraint());
  switch (spec.kind) {
    case ConstraintSpec::Kind::kJsonObject:
      c->gbnf_ = JsonObjectGbnf();
      break;
    case ConstraintSpec::Kind::kJsonSchema: {
      auto gbnf = JsonSchemaToGbnf(spec.text);
      if (!gbnf.ok()) return gbnf.status();
      c->gbnf_ = *std::move(gbnf);
      break;
    }
    case ConstraintSpec::Kind::kGrammar:
      c->gbnf_ = spec.text;
      break;
  }
  auto grammar = ParseGbnf(c->gbnf_);
  if (!grammar.ok()) return grammar.status();
  auto automaton = CompileAutomaton(*grammar);
  if (!automaton.ok()) return automaton.status();
  c->automaton_ = *std::move(automaton);
  c->vocab_ = std::move(vocab);
  c->tables_ = BuildTokenTables(c->automaton_, *c->vocab_);
  return std::shared_ptr<const Constraint>(std::move(c));
}

ConstraintState::ConstraintState(std::shared_ptr<const Constraint> constraint)
    : constraint_(std::move(constraint)), pushdown_(constraint_->automaton()) {
  Point start;
  pushdown_.Start(constraint_->automaton().root, &start.tops, &start.can_end);
  history_.push_back(std::move(start));
}

bool ConstraintState::Continues(const StackTop& top, const std::string& bytes) {
  scratch_.assign(1, top);
  bool ended = false;
  return pushdown_.AdvanceBytes(&scratch_, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &ended);
}

void ConstraintState::FillMask(std::vector<uint64_t>* bits) {
  const TokenVocabulary& vocab = constraint_->vocab();
  const TokenTables& tables = constraint_->tables();
  bits->assign(vocab.words(), 0);
  uint64_t* out = bits->data();
  const Point& now = history_.back();
  if (now.finished) return;
  for (const StackTop& top : now.tops) {
    const PositionTable& t = tables.tables[tables.table_of[top.pos]];
    if (!t.accepted_bits.empty()) {
      const uint64_t* in = t.accepted_bits.data();
      for (size_t w = 0; w < bits->size(); ++w) out[w] |= in[w];
    }
    for (int32_t tok : t.accepted) out[tok >> 6] |= uint64_t(1) << (tok & 63);
  }
  for (const StackTop& top : now.tops) {
    const PositionTable& t = tables.tables[tables.table_of[top.pos]];
    for (int32_t tok : t.uncertain) {
      if ((out[tok >> 6] >> (tok & 63)) & 1) continue;
      if (Continues(top, vocab.bytes(tok))) out[tok >> 6] |= uint64_t(1) << (tok & 63);
    }
  }
  if (now.can_end) {
    for (int32_t tok : vocab.end_tokens()) {
      if (tok >= 0 && tok < vocab.size()) out[tok >> 6] |= uint64_t(1) << (tok & 63);
    }
  }
}

bool ConstraintState::Allows(int32_t token) {
  const TokenVocabulary& vocab = constraint_->vocab();
  const Point& now = history_.back();
  if (now.finished || token < 0 || token >= vocab.size()) return false;
  if (vocab.is_end(token)) return now.can_end;
  const std::string& bytes = vocab.bytes(token);
  if (bytes.empty()) return false;
  for (const StackTop& top : now.tops) {
    if (Continues(top, bytes)) return true;
  }
  return false;
}

bool ConstraintState::Advance(int32_t token) {
  const TokenVocabulary& vocab = constraint_->vocab();
  const Point& now = history_.back();
  if (now.finished || token < 0 || token >= vocab.size()) return false;
  if (vocab.is_end(token)) {
    if (!now.can_end) return false;
    history_.push_back({{}, false, true});
    return true;
  }
  const std::string& bytes = vocab.bytes(token);
  if (bytes.empty()) return false;
  Point next;
  next.tops = now.tops;
  if (!pushdown_.AdvanceBytes(&next.tops, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &next.can_end)) {
    return false;
  }
  history_.push_back(std::move(next));
  return true;
}

void ConstraintState::Rewind(size_t tokens) {
  tokens = std::min(tokens, tokens_taken());
  history_.resize(history_.size() - tokens);
}

void ApplyTokenMask(const std::vector<uint64_t>& bits, float* logits, int vocab) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int covered = std::min<int>(vocab, int(bits.size()) * 64);
  for (int w = 0; w * 64 < covered; ++w) {
    const uint64_t word = bits[w];
    if (word == ~uint64_t(0)) continue;
    const int end = std::min(covered, (w + 1) * 64);
    for (int t = w * 64; t < end; ++t) {
      if (!((word >> (t & 63)) & 1)) logits[t] = kNegInf;
    }
  }
  for (int t = covered; t < vocab; ++t) logits[t] = kNegInf;
}

}  // namespace steady
