// sentencepiece tokenizer, reached through the steady_spm module (see model/text/spm_module.cc for why).
#ifndef STEADY_MODEL_TEXT_TOKENIZER_H_
#define STEADY_MODEL_TEXT_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace steady {

class Tokenizer {
 public:
  // Loads a sentencepiece model file. The module is found at $STEADY_SPM_MODULE, beside the
  // executable (../lib/libsteady_spm.so), or at its build-tree path.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& model_path);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  absl::StatusOr<std::vector<int32_t>> Encode(const std::string& text) const;
  // Ids outside [0, vocab_size) are an error.
  absl::StatusOr<std::string> Decode(const std::vector<int32_t>& ids) const;
  int vocab_size() const { return vocab_size_; }
  int bos_id() const { return bos_id_; }  // -1 when the model has none
  int eos_id() const { return eos_id_; }

  struct Module;  // the module's function table (tokenizer.cc)

 private:
  Tokenizer() = default;
  const Module* module_ = nullptr;
  void* handle_ = nullptr;
  int vocab_size_ = 0, bos_id_ = -1, eos_id_ = -1;
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
