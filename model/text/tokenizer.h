// Text to token ids and back: a model directory's tokenizer.json (Hugging Face, model/text/hf/) or
// tokenizer.model (sentencepiece, through its own module: model/text/spm_module.cc says why).
#ifndef STEADY_MODEL_TEXT_TOKENIZER_H_
#define STEADY_MODEL_TEXT_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/text/hf/tokenizer_config.h"

namespace steady {

struct DecodeOptions {
  bool skip_special_tokens = false;
  // transformers' clean_up_tokenization_spaces (" ." -> "."): what `steady tokenize --decode` and
  // Hugging Face's decode() do by default for tokenizers that ask for it; generated text is decoded
  // without it, since it rewrites text the model wrote and cannot be streamed exactly.
  bool clean_up_tokenization_spaces = false;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // A tokenizer file: a tokenizer.json (the tokenizer_config.json beside it is read when present)
  // or a sentencepiece model. NOT_FOUND for a missing file; INVALID_ARGUMENT naming the file (and
  // the field) for a malformed one. The sentencepiece module is found at $STEADY_SPM_MODULE, beside
  // the executable (../lib/libsteady_spm.so), or at its build-tree path.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& path);
  // A tokenizer.json given as its text, with tokenizer_config.json's contents (`name` prefixes every
  // error): for formats that carry a vocabulary of their own (model/gguf/gguf_tokenizer.h).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromTokenizerJson(std::string_view json,
                                                                       const hf::TokenizerConfig& config,
                                                                       const std::string& name);
  // A model directory's tokenizer: tokenizer.json when there is one, else tokenizer.model.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> LoadFromDirectory(const std::string& dir);

  // `add_special_tokens`: tokenizer.json's post-processor puts its special tokens (BOS) around the
  // text, as Hugging Face's encode() does by default; sentencepiece adds none. Text that looks like
  // an added token becomes that token. INVALID_ARGUMENT for text that is not valid UTF-8
  // (tokenizer.json; sentencepiece encodes any bytes).
  virtual absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_special_tokens = false) const = 0;
  // Ids outside [0, vocab_size) are an error.
  virtual absl::StatusOr<std::string> Decode(const std::vector<int32_t>& ids, const DecodeOptions& options = {}) const = 0;
  virtual int vocab_size() const = 0;
  virtual int bos_id() const = 0;  // -1 when there is none
  virtual int eos_id() const = 0;
  // Whether a prompt on an empty session gets the model's BOS in front: always for sentencepiece
  // models (Steady's checkpoints), for tokenizer.json when its post-processor adds a token in front.
  virtual bool prepends_bos() const = 0;
  // The id of a token's text (added and special tokens included), or -1.
  virtual int TokenId(std::string_view token) const = 0;
};

// Turns a stream of token ids into a stream of text: each Add returns the new complete UTF-8 text
// (pieces that end in a partial character wait for the next token). Decodes a short window, so a
// long generation costs O(1) per token.
//
// kStart decodes the ids as a text of their own (sentencepiece drops the space marker of the first
// piece: "▁The" -> "The"). kContinuation decodes them as the continuation of earlier text, a prompt
// (the generated "▁of" after "The whale" is " of"): every window is decoded behind a one-piece
// sentinel whose text is then cut off.
class TextStreamer {
 public:
  enum class Mode { kStart, kContinuation };
  explicit TextStreamer(const Tokenizer& tokenizer, Mode mode = Mode::kStart);
  absl::StatusOr<std::string> Add(int32_t id);
  // Text still held back (an incomplete character at the end).
  absl::StatusOr<std::string> Flush();

 private:
  absl::StatusOr<std::string> DecodeWindow(size_t begin, size_t end) const;

  const Tokenizer& tokenizer_;
  std::vector<int32_t> sentinel_;    // empty in kStart mode (or when no one-piece sentinel exists)
  std::string sentinel_text_;
  std::vector<int32_t> ids_;
  size_t prefix_ = 0;  // ids_[prefix_, read_) were emitted; decoding from prefix_ keeps spacing right
  size_t read_ = 0;
};

}  // namespace steady

#endif  // STEADY_MODEL_TEXT_TOKENIZER_H_
