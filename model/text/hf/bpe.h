// tokenizer.json's "model" of type BPE: a word to ids by merging adjacent symbols, lowest merge rank
// first (leftmost among equal ranks), with byte fallback and unknown-token fusing.
//
// Byte-level vocabularies (GPT-2's alphabet: every byte is a printable character) are stored keyed by
// the raw bytes their tokens stand for, so a word goes from bytes to ids without remapping text.
#ifndef STEADY_MODEL_TEXT_HF_BPE_H_
#define STEADY_MODEL_TEXT_HF_BPE_H_

#include <array>
#include <cstdint>
#include <memory>
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

// model.vocab and model.merges, read from the JSON text as it is parsed (ReadTokenizerJson) rather
// than kept as a JSON document: Gemma 3's file holds 262,144 tokens and 514,906 merges.
struct BpeTables {
  std::vector<std::pair<std::string, int64_t>> vocab;  // in file order; ids checked by Parse
  struct Pair {
    std::string left, right;
    bool well_formed = true;  // "left right" (one space) or [left, right]
  };
  std::vector<Pair> merges;
  bool has_vocab = false, has_merges = false;
};

// Parses tokenizer.json's text into `rest` (the document without model.vocab and model.merges, which
// go to `tables`). INVALID_ARGUMENT "NAME: not valid JSON: ... line L, column C ...".
absl::Status ReadTokenizerJson(std::string_view text, const std::string& name, Json* rest, BpeTables* tables);

// Words already encoded, shared by the threads that encode (a sharded map under mutexes); bounded:
// a full shard starts over.
class WordCache {
 public:
  WordCache();
  ~WordCache();
  WordCache(WordCache&&) noexcept;
  WordCache& operator=(WordCache&&) noexcept;
  // Appends the word's ids and returns true when it is cached.
  bool Get(std::string_view word, std::vector<int32_t>* ids) const;
  void Put(std::string_view word, const int32_t* ids, size_t n) const;

 private:
  static constexpr size_t kShards = 16, kShardEntries = 16384;
  struct Shard;
  std::unique_ptr<Shard[]> shards_;
};

class Bpe {
 public:
  // `j` is the "model" object (its vocab and merges in `tables`); `byte_level` says whether words
  // arrive as raw bytes. Moves the tables' contents.
  static absl::StatusOr<Bpe> Parse(const Json& j, BpeTables& tables, const std::string& path, bool byte_level);

  // Appends the ids of one word (non-empty).
  void Encode(std::string_view word, std::vector<int32_t>* ids) const;
  // The model's tokens by id (in the vocabulary's own alphabet; ids without a token are empty),
  // handed over once to the tokenizer that owns the id -> text table.
  std::vector<std::string> TakeTokens() { return std::move(tokens_); }
  int32_t unk_id() const { return unk_id_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t id;  // the merged token
  };
  static constexpr size_t kShortWord = 48;     // symbols; longer words use the heap
  static constexpr size_t kCachedBytes = 256;  // longer words are not cached
  static uint64_t PairKey(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  int32_t Lookup(std::string_view piece) const;
  void MergeSymbols(std::vector<int32_t>* symbols, std::vector<uint32_t>* lengths) const;
  void MergeShort(std::vector<int32_t>* symbols, std::vector<uint32_t>* lengths) const;
  void EncodePiece(std::string_view word, std::vector<int32_t>* ids) const;
  void EncodeUncached(std::string_view word, std::vector<int32_t>* ids) const;
  void EmitUnknown(std::string_view piece, bool* last_was_unk, std::vector<int32_t>* ids) const;

  bool byte_level_ = false;
  absl::flat_hash_map<std::string, int32_t> vocab_;  // keyed in the words' alphabet
  std::vector<std::string> tokens_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_ids_;      // byte-level: each single byte's token
  std::array<int32_t, 256> fallback_ids_;  // byte fallback: "<0xXX>"
  int32_t unk_id_ = -1;
  bool byte_fallback_ = false, fuse_unk_ = false, ignore_merges_ = false;
  // Sentencepiece-style vocabularies without a pre-tokenizer see the whole text as one word. When
  // no token holds U+2581 after another character, no merge can join a piece to the U+2581 that
  // follows it, so the word splits there into pieces encoded (and cached) one by one: an exact
  // shortcut, checked on the vocabulary at load.
  bool split_at_metaspace_ = false;
  WordCache cache_;
};

}  // namespace steady::hf

#endif  // STEADY_MODEL_TEXT_HF_BPE_H_
