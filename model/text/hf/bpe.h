// tokenizer.json's "model" of type BPE: a word to ids by merging adjacent symbols, lowest merge rank
// first (leftmost among equal ranks), with byte fallback and unknown-token fusing.
//
// Byte-level vocabularies (GPT-2's alphabet: every byte is a printable character) are stored keyed by
// the raw bytes their tokens stand for, so a word goes from bytes to ids without remapping text.
#ifndef STEADY_MODEL_TEXT_HF_BPE_H_
#define STEADY_MODEL_TEXT_HF_BPE_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "model/text/hf/json_fields.h"

namespace steady::hf {

// GPT-2's byte alphabet: byte -> the character that stands for it in byte-level vocabularies.
const std::array<char32_t, 256>& ByteToChar();
// The inverse: the byte a character stands for, or -1.
int CharToByte(char32_t c);

class Bpe {
 public:
  // `j` is the "model" object; `byte_level` says whether words arrive as raw bytes.
  static absl::StatusOr<Bpe> Parse(const Json& j, const std::string& path, bool byte_level);

  // Appends the ids of one word (non-empty).
  void Encode(std::string_view word, std::vector<int32_t>* ids) const;
  // The model's tokens by id (in the vocabulary's own alphabet); ids without a token are empty.
  const std::vector<std::string>& tokens() const { return tokens_; }
  int32_t unk_id() const { return unk_id_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t id;  // the merged token
  };
  static uint64_t PairKey(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  int32_t Lookup(std::string_view piece) const;
  void MergeSymbols(std::vector<int32_t>* symbols, std::vector<uint32_t>* lengths) const;
  void EmitUnknown(std::string_view piece, bool* last_was_unk, std::vector<int32_t>* ids) const;

  bool byte_level_ = false;
  absl::flat_hash_map<std::string, int32_t> vocab_;  // keyed in the words' alphabet
  std::vector<std::string> tokens_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_ids_;      // byte-level: each single byte's token
  std::array<int32_t, 256> fallback_ids_;  // byte fallback: "<0xXX>"
  int32_t unk_id_ = -1;
  bool byte_fallback_ = false, fuse_unk_ = false, ignore_merges_ = false;
};

}  // namespace steady::hf

#endif  // STEADY_MODEL_TEXT_HF_BPE_H_
