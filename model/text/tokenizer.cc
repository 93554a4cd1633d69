#include "model/text/tokenizer.h"

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/file_io.h"
#include "base/utf8.h"
#include "model/text/hf/hf_tokenizer.h"
#include "model/text/sentencepiece.h"

namespace steady {
namespace {

// tokenizer.json behind the Tokenizer interface.
class HfTokenizerAdapter final : public Tokenizer {
 public:
  explicit HfTokenizerAdapter(std::unique_ptr<hf::HfTokenizer> t) : t_(std::move(t)) {
    const auto& eos = t_->config().eos_token;
    eos_id_ = eos ? t_->TokenId(*eos) : -1;
  }
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_special_tokens) const override {
    return t_->Encode(text, add_special_tokens);
  }
  absl::StatusOr<std::string> Decode(const std::vector<int32_t>& ids, const DecodeOptions& options) const override {
    return t_->Decode(ids, options.skip_special_tokens,
                      options.clean_up_tokenization_spaces && t_->config().clean_up_tokenization_spaces);
  }
  int vocab_size() const override { return t_->vocab_size(); }
  int bos_id() const override { return t_->bos_id(); }
  int eos_id() const override { return eos_id_; }
  bool prepends_bos() const override { return t_->bos_id() >= 0; }
  int TokenId(std::string_view token) const override { return t_->TokenId(token); }

 private:
  std::unique_ptr<hf::HfTokenizer> t_;
  int eos_id_ = -1;
};

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerJson(const std::string& path) {
  auto json = ReadWholeFile(path);
  if (!json.ok()) return absl::Status(json.status().code(), absl::StrCat(path, ": ", json.status().message()));
  hf::TokenizerConfig config;
  const std::string config_path = (std::filesystem::path(path).parent_path() / "tokenizer_config.json").string();
  if (std::filesystem::exists(config_path)) {
    auto text = ReadWholeFile(config_path);
    if (!text.ok()) return text.status();
    auto parsed = hf::ParseTokenizerConfig(*text, config_path);
    if (!parsed.ok()) return parsed.status();
    config = *std::move(parsed);
  }
  return Tokenizer::FromTokenizerJson(*json, config, path);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromTokenizerJson(std::string_view json,
                                                                     const hf::TokenizerConfig& config,
                                                                     const std::string& name) {
  auto t = hf::HfTokenizer::Load(json, config, name);
  if (!t.ok()) return t.status();
  return std::unique_ptr<Tokenizer>(new HfTokenizerAdapter(*std::move(t)));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& path) {
  if (absl::EndsWith(path, ".json")) return LoadTokenizerJson(path);
  return LoadSentencePiece(path);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::LoadFromDirectory(const std::string& dir) {
  const std::filesystem::path d(dir);
  if (std::filesystem::exists(d / "tokenizer.json")) return Load((d / "tokenizer.json").string());
  if (std::filesystem::exists(d / "tokenizer.model")) return Load((d / "tokenizer.model").string());
  return absl::NotFoundError(absl::StrCat(dir, ": no tokenizer.json or tokenizer.model"));
}

namespace {

// True when `s` ends inside a UTF-8 sequence, or with the replacement character both tokenizer
// kinds emit for byte pieces that do not yet form a character.
bool EndsIncomplete(const std::string& s) {
  if (s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0) return true;
  return EndsInPartialUtf8(s);
}

}  // namespace

TextStreamer::TextStreamer(const Tokenizer& tokenizer, Mode mode) : tokenizer_(tokenizer) {
  if (mode != Mode::kContinuation) return;
  // A piece that is a word of its own: its decoded text ends where the continuation's begins.
  auto ids = tokenizer.Encode("a");
  if (!ids.ok() || ids->size() != 1) return;
  auto text = tokenizer.Decode(*ids);
  if (!text.ok() || text->empty()) return;
  sentinel_ = *std::move(ids);
  sentinel_text_ = *std::move(text);
}

absl::StatusOr<std::string> TextStreamer::DecodeWindow(size_t begin, size_t end) const {
  std::vector<int32_t> window(sentinel_);
  window.insert(window.end(), ids_.begin() + begin, ids_.begin() + end);
  auto text = tokenizer_.Decode(window);
  if (!text.ok() || sentinel_.empty()) return text;
  // The sentinel decodes to the same text in front of anything (pieces only append).
  if (text->compare(0, sentinel_text_.size(), sentinel_text_) != 0) {
    return absl::InternalError("tokenizer: the stream's sentinel piece did not decode as a prefix");
  }
  return text->substr(sentinel_text_.size());
}

absl::StatusOr<std::string> TextStreamer::Add(int32_t id) {
  ids_.push_back(id);
  auto before = DecodeWindow(prefix_, read_);
  if (!before.ok()) return before.status();
  auto after = DecodeWindow(prefix_, ids_.size());
  if (!after.ok()) return after.status();
  if (after->size() <= before->size() || EndsIncomplete(*after)) return std::string();
  std::string delta = after->substr(before->size());
  prefix_ = read_;
  read_ = ids_.size();
  return delta;
}

absl::StatusOr<std::string> TextStreamer::Flush() {
  auto before = DecodeWindow(prefix_, read_);
  if (!before.ok()) return before.status();
  auto after = DecodeWindow(prefix_, ids_.size());
  if (!after.ok()) return after.status();
  read_ = prefix_ = ids_.size();
  return after->size() > before->size() ? after->substr(before->size()) : std::string();
}

}  // namespace steady
