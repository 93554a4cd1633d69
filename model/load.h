// What `--model PATH` names, loaded: a checkpoint directory (config.json, safetensors, tokenizer.json
// or tokenizer.model; model/decoder/model.h, model/text/tokenizer.h) or a GGUF file (model/gguf/).
// The one place that tells the two apart, so that the binaries and the engine above see a Model and
// a Tokenizer whatever the format.
#ifndef STEADY_MODEL_LOAD_H_
#define STEADY_MODEL_LOAD_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "model/decoder/model.h"
#include "model/text/chat_format.h"
#include "model/text/tokenizer.h"

namespace steady {

// Whether `path` is a GGUF file (a regular file starting with the magic "GGUF"), not a directory.
bool IsGgufFile(const std::string& path);
// The model at `path`, with `override` applied to every layer.
absl::StatusOr<Model> LoadModel(const std::string& path, const std::optional<MechanismOverride>& override = std::nullopt);
// The tokenizer at `path`: the GGUF file's own, or the directory's (Tokenizer::LoadFromDirectory).
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& path);
// A GGUF file's tokenizer configuration: its special tokens' text and tokenizer.chat_template as the
// "default" Jinja template (what tokenizer_config.json gives for a directory).
absl::StatusOr<hf::TokenizerConfig> LoadGgufTokenizerConfig(const std::string& path);
// The chat format for the model at `path`: a GGUF file's tokenizer.chat_template, or a directory's
// (LoadChatFormat); `own` and `template_name` as there.
absl::StatusOr<std::unique_ptr<ChatFormat>> LoadChatFormatFor(const std::string& path, const ChatTemplate* own,
                                                              const std::string& template_name = "");
// Whether `path` has a tokenizer to load (a GGUF file with tokenizer.ggml.model; a directory with
// tokenizer.json or tokenizer.model).
bool HasTokenizer(const std::string& path);

}  // namespace steady

#endif  // STEADY_MODEL_LOAD_H_
