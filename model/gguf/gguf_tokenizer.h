// The tokenizer a GGUF file carries (docs/gguf.md, "Tokenizer"), as the tokenizer.json Hugging Face
// would write for it, run by model/text/hf (one BPE implementation for both formats):
//
//   tokenizer.ggml.model "gpt2"   byte-level BPE: tokens, merges, and the pre-tokenizer regex that
//                                 tokenizer.ggml.pre names (llama.cpp's names: default/gpt2,
//                                 llama-bpe, qwen2; another is refused by name)
//   tokenizer.ggml.model "llama"  sentencepiece-style BPE with byte fallback: merges follow
//                                 tokenizer.ggml.scores (the pair whose merged piece scores highest
//                                 first, as llama.cpp's and sentencepiece's BPE), "▁" for spaces and
//                                 a leading one unless tokenizer.ggml.add_space_prefix is false
//
// Unknown (token_type 2), control (3) and user-defined (4) tokens are added tokens, found in text as
// llama.cpp finds them with special-token parsing on. BOS goes in front when
// tokenizer.ggml.add_bos_token says so (absent: true for llama, false for gpt2, llama.cpp's
// defaults); EOS is tokenizer.ggml.eos_token_id; tokenizer.chat_template becomes the tokenizer
// configuration's Jinja template.
#ifndef STEADY_MODEL_GGUF_GGUF_TOKENIZER_H_
#define STEADY_MODEL_GGUF_GGUF_TOKENIZER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/gguf/gguf.h"
#include "model/text/hf/tokenizer_config.h"
#include "model/text/tokenizer.h"

namespace steady {

// The tokenizer.json text and its configuration; errors name the file and the key.
struct GgufTokenizerFiles {
  std::string tokenizer_json;
  hf::TokenizerConfig config;
};
absl::StatusOr<GgufTokenizerFiles> GgufTokenizerAsJson(const GgufFile& file);

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const GgufFile& file);

}  // namespace steady

#endif  // STEADY_MODEL_GGUF_GGUF_TOKENIZER_H_
