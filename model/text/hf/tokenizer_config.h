// tokenizer_config.json: the special tokens' text, decoding options and the chat template(s).
#ifndef STEADY_MODEL_TEXT_HF_TOKENIZER_CONFIG_H_
#define STEADY_MODEL_TEXT_HF_TOKENIZER_CONFIG_H_

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace steady::hf {

struct TokenizerConfig {
  // The special tokens' text (a string, or an AddedToken object's "content"); absent when unset.
  std::optional<std::string> bos_token, eos_token, unk_token, pad_token;
  std::vector<std::string> additional_special_tokens;
  // transformers' clean_up_tokenization_spaces; the JS port (and older transformers) default to true.
  bool clean_up_tokenization_spaces = true;
  // "chat_template": one template (a string), or the list form [{"name", "template"}] by name.
  std::map<std::string, std::string> chat_templates;  // "default" for the string form
};

// `json` is the file's text; `name` prefixes every error ("DIR/tokenizer_config.json: eos_token: ...").
absl::StatusOr<TokenizerConfig> ParseTokenizerConfig(std::string_view json, const std::string& name);

}  // namespace steady::hf

#endif  // STEADY_MODEL_TEXT_HF_TOKENIZER_CONFIG_H_
