// Constrained decoding: the public face of model/constrain/. A ConstraintSpec (JSON mode, a JSON
// Schema, or a GBNF grammar) compiles against a model's TokenVocabulary into a Constraint, immutable
// and shareable between requests; each generation keeps a ConstraintState that says which tokens may
// come next (a mask over the vocabulary) and advances with each accepted token. Callers (the engine,
// GenerateText) see only these types: no schema or grammar syntax.
//
// Pipeline: spec -> GBNF text (json_schema.h) -> Grammar (grammar.h) -> Automaton of byte DFAs
// (automaton.h) -> per-position token tables (token_tables.h), all at Compile; a state is a set of
// stacks (pushdown.h) and a mask ORs its tops' tables and checks only their uncertain tokens.
#ifndef STEADY_MODEL_CONSTRAIN_CONSTRAINT_H_
#define STEADY_MODEL_CONSTRAIN_CONSTRAINT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/constrain/automaton.h"
#include "model/constrain/pushdown.h"
#include "model/constrain/token_tables.h"

namespace steady {

struct ConstraintSpec {
  enum class Kind { kJsonObject, kJsonSchema, kGrammar };
  Kind kind = Kind::kJsonObject;
  std::string text;  // kJsonSchema: the schema as JSON; kGrammar: GBNF; kJsonObject: unused
};

class Constraint {
 public:
  // INVALID_ARGUMENT naming the problem (a schema keyword and where it is, a grammar's line and
  // column, a left-recursive rule, ...).
  static absl::StatusOr<std::shared_ptr<const Constraint>> Compile(const ConstraintSpec& spec,
                                                                   std::shared_ptr<const TokenVocabulary> vocab);
  const std::string& gbnf() const { return gbnf_; }
  const Automaton& automaton() const { return automaton_; }
  const TokenVocabulary& vocab() const { return *vocab_; }
  const TokenTables& tables() const { return tables_; }

 private:
  Constraint() = default;
  std::string gbnf_;
  Automaton automaton_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  TokenTables tables_;
};

// One generation's place in a Constraint. Not thread-safe; cheap to create.
class ConstraintState {
 public:
  explicit ConstraintState(std::shared_ptr<const Constraint> constraint);

  // bits[t / 64] bit t % 64 set: token t may come next ([vocab.words()] words).
  void FillMask(std::vector<uint64_t>* bits);
  // Whether `token` may come next (what a speculative draft token is checked with).
  bool Allows(int32_t token);
  // Takes `token`; false (and no change) when it may not come next. An end token is taken once the
  // text is complete and ends the constraint (nothing may follow).
  bool Advance(int32_t token);
  // Undoes the last `tokens` Advance calls (at most tokens_taken()).
  void Rewind(size_t tokens);
  size_t tokens_taken() const { return history_.size() - 1; }
  // The text so far is complete: an end token may come next.
  bool CanEnd() const { return history_.back().can_end && !history_.back().finished; }
  // Nothing but an end token may come next (or, after one, nothing at all).
  bool MustEnd() const { return history_.back().tops.empty(); }

 private:
  struct Point {
    std::vector<StackTop> tops;
    bool can_end = false;
    bool finished = false;  // an end token was taken
  };
  // Whether `token`'s bytes continue the stack ending in `top`.
  bool Continues(const StackTop& top, const std::string& bytes);

  std::shared_ptr<const Constraint> constraint_;
  Pushdown pushdown_;
  std::vector<Point> history_;  // [0]: the start; back(): now
  std::vector<StackTop> scratch_;
};

// logits[t] = -infinity for every t in [0, vocab) whose mask bit is clear.
void ApplyTokenMask(const std::vector<uint64_t>& bits, float* logits, int vocab);

}  // namespace steady

#endif  // STEADY_MODEL_CONSTRAIN_CONSTRAINT_H_
