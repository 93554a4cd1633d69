// A Hugging Face tokenizer.json: added tokens, normalizer, pre-tokenizer, BPE model, post-processor
// and decoder, with the meaning Hugging Face's JS port (@huggingface/tokenizers) gives them; where
// the port leaves an option out, the Rust library's meaning (docs/tokenizers.md lists both).
//
//   text -> cut at added tokens (not normalized ones) -> each piece: normalize -> cut at normalized
//        added tokens -> pre-tokenize into words -> BPE per word -> ids -> post-processor (BOS/EOS)
#ifndef STEADY_MODEL_TEXT_HF_HF_TOKENIZER_H_
#define STEADY_MODEL_TEXT_HF_HF_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "model/text/hf/bpe.h"
#include "model/text/hf/decoder.h"
#include "model/text/hf/normalizer.h"
#include "model/text/hf/pre_tokenizer.h"
#include "model/text/hf/tokenizer_config.h"

namespace steady::hf {

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
};

// Added tokens found in text: leftmost, then longest, over a byte trie.
class AddedTokenTrie {
 public:
  void Add(std::string_view text, int32_t index);
  // The longest entry starting at text[at]: its index, *length set; -1 if none.
  int32_t LongestAt(std::string_view text, size_t at, size_t* length) const;
  bool empty() const { return terminal_.size() <= 1; }

 private:
  absl::flat_hash_map<uint64_t, int32_t> edges_;  // (node << 8 | byte) -> child
  std::vector<int32_t> terminal_{-1};             // per node: the entry ending there, or -1
  bool first_byte_[256] = {};
};

class HfTokenizer {
 public:
  // `json` is tokenizer.json's text; `name` prefixes every error (the file's path).
  static absl::StatusOr<std::unique_ptr<HfTokenizer>> Load(std::string_view json, const TokenizerConfig& config,
                                                           const std::string& name);

  // INVALID_ARGUMENT for text that is not valid UTF-8.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_special_tokens) const;
  // INVALID_ARGUMENT for an id outside [0, vocab_size()) or one no token has.
  absl::StatusOr<std::string> Decode(const std::vector<int32_t>& ids, bool skip_special_tokens,
                                     bool clean_up_tokenization_spaces) const;

  int vocab_size() const { return int(tokens_.size()); }
  // The id add_special_tokens puts in front (the post-processor's first special token), or -1.
  int bos_id() const { return prefix_.empty() ? -1 : prefix_[0]; }
  // The id of a token's text (vocabulary or added), or -1.
  int TokenId(std::string_view token) const;
  const TokenizerConfig& config() const { return config_; }

 private:
  struct Section {
    std::string_view text;  // into the text SplitAdded cut
    int32_t token = -1;     // an added token's id instead of text
  };
  void SplitAdded(std::string_view text, const AddedTokenTrie& trie, std::vector<Section>* out) const;
  absl::Status EncodeSection(std::string_view text, int section, std::vector<int32_t>* ids) const;
  absl::Status ParsePostProcessor(const Json& j, const std::string& path, bool* seen_sequence);

  TokenizerConfig config_;
  std::optional<Normalizer> normalizer_;
  std::optional<PreTokenizer> pre_tokenizer_;
  std::optional<Bpe> model_;
  std::optional<Decoder> decoder_;
  std::vector<int32_t> prefix_, suffix_;  // the post-processor's special tokens around the text
  std::vector<AddedToken> added_;
  AddedTokenTrie raw_trie_, normalized_trie_;           // entries index added_
  absl::flat_hash_map<std::string, int32_t> added_by_text_;  // content (and normalized content) -> id
  std::vector<std::string> tokens_;                     // id -> token text (added tokens included)
  std::vector<bool> is_added_, is_special_;             // per id
  absl::flat_hash_set<std::string> added_texts_;
};

}  // namespace steady::hf

#endif  // STEADY_MODEL_TEXT_HF_HF_TOKENIZER_H_
