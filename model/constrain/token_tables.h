// Per-position token tables, the approach of xgrammar: for each position a stack top can be at,
// the vocabulary splits into tokens accepted whatever lies below the top (their bytes stay inside
// the rule, or end it exactly), tokens rejected whatever lies below (they die inside the rule, or
// end it and go on with a byte that never follows the rule), and the few uncertain ones, which a
// mask checks against the real stack. Built once per constraint by walking the vocabulary in byte
// order, so tokens sharing a prefix share its steps.
#ifndef STEADY_MODEL_CONSTRAIN_TOKEN_TABLES_H_
#define STEADY_MODEL_CONSTRAIN_TOKEN_TABLES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "model/constrain/automaton.h"

namespace steady {

// The model's tokens as bytes. A token with no bytes (BOS, control tokens, ids past the
// tokenizer's) is never allowed by a constraint; end tokens (EOS) are allowed once the text is
// complete.
class TokenVocabulary {
 public:
  TokenVocabulary(std::vector<std::string> bytes, std::vector<int32_t> end_tokens);
  int size() const { return int(bytes_.size()); }
  int words() const { return (size() + 63) / 64; }  // uint64 words of a mask
  const std::string& bytes(int32_t token) const { return bytes_[token]; }
  const std::vector<int32_t>& end_tokens() const { return end_tokens_; }
  bool is_end(int32_t token) const;
  // Tokens with bytes in byte order, and each one's common prefix length with the one before.
  const std::vector<int32_t>& sorted() const { return sorted_; }
  const std::vector<uint32_t>& shared_prefix() const { return shared_prefix_; }

 private:
  std::vector<std::string> bytes_;
  std::vector<int32_t> end_tokens_;
  std::vector<int32_t> sorted_;
  std::vector<uint32_t> shared_prefix_;
};

struct PositionTable {
  std::vector<uint64_t> accepted_bits;  // [words] when many tokens are accepted, else empty
  std::vector<int32_t> accepted;        // the accepted tokens when few are
  std::vector<int32_t> uncertain;       // in byte order
};

struct TokenTables {
  std::vector<PositionTable> tables;  // distinct tables
  std::vector<int32_t> table_of;      // per position: index into tables, -1 where no top can be
  int64_t bytes() const;
};

TokenTables BuildTokenTables(const Automaton& a, const TokenVocabulary& vocab);

}  // namespace steady

#endif  // STEADY_MODEL_CONSTRAIN_TOKEN_TABLES_H_
