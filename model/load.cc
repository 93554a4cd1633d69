#include "model/load.h"

#include <filesystem>
#include <fstream>

#include "model/gguf/gguf.h"
#include "model/gguf/gguf_model.h"
#include "model/gguf/gguf_tokenizer.h"

namespace steady {

bool IsGgufFile(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::string_view(magic, 4) == "GGUF";
}

absl::StatusOr<Model> LoadModel(const std::string& path, const std::optional<MechanismOverride>& override) {
  if (!IsGgufFile(path)) return Model::Load(path, override);
  auto file = GgufFile::Open(path);
  if (!file.ok()) return file.status();
  return LoadGgufModel(*file, override);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& path) {
  if (!IsGgufFile(path)) return Tokenizer::LoadFromDirectory(path);
  auto file = GgufFile::Open(path);
  if (!file.ok()) return file.status();
  return LoadGgufTokenizer(*file);
}

absl::StatusOr<hf::TokenizerConfig> LoadGgufTokenizerConfig(const std::string& path) {
  auto file = GgufFile::Open(path);
  if (!file.ok()) return file.status();
  auto files = GgufTokenizerAsJson(*file);
  if (!files.ok()) return files.status();
  return files->config;
}

absl::StatusOr<std::unique_ptr<ChatFormat>> LoadChatFormatFor(const std::string& path, const ChatTemplate* own,
                                                              const std::string& template_name) {
  if (!IsGgufFile(path)) return LoadChatFormat(path, own, template_name);
  auto config = LoadGgufTokenizerConfig(path);
  if (!config.ok()) return config.status();
  return ChatFormatFromConfig(*std::move(config), path + " (tokenizer.chat_template)", own, template_name, "");
}

bool HasTokenizer(const std::string& path) {
  if (IsGgufFile(path)) {
    auto file = GgufFile::Open(path);
    return !file.ok() || file->FindValue("tokenizer.ggml.model") != nullptr;  // a broken file: LoadTokenizer says why
  }
  std::error_code ec;
  const std::filesystem::path dir(path);
  return std::filesystem::exists(dir / "tokenizer.json", ec) || std::filesystem::exists(dir / "tokenizer.model", ec);
}

}  // namespace steady
