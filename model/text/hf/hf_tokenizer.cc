#include "model/text/hf/hf_tokenizer.h"

#include "base/status.h"
#include "base/utf8.h"
#include "model/text/hf/unicode.h"

namespace steady::hf {

void AddedTokenTrie::Add(std::string_view text, int32_t index) {
  if (text.empty()) return;
  int32_t node = 0;
  for (unsigned char b : text) {
    auto [it, inserted] = edges_.try_emplace((uint64_t(node) << 8) | b, int32_t(terminal_.size()));
    if (inserted) terminal_.push_back(-1);
    node = it->second;
  }
  first_byte_[static_cast<unsigned char>(text[0])] = true;
  if (terminal_[node] < 0) terminal_[node] = index;  // the first token with this text wins
}

int32_t AddedTokenTrie::LongestAt(std::string_view text, size_t at, size_t* length) const {
  if (!first_byte_[static_cast<unsigned char>(text[at])]) return -1;
  int32_t node = 0, best = -1;
  for (size_t i = at; i < text.size(); ++i) {
    auto it = edges_.find((uint64_t(node) << 8) | static_cast<unsigned char>(text[i]));
    if (it == edges_.end()) break;
    node = it->second;
    if (terminal_[node] >= 0) {
      best = terminal_[node];
      *length = i + 1 - at;
    }
  }
  return best;
}

namespace {

bool IsWordChar(char32_t c) { return c == '_' || IsAlphanumeric(c); }

// The Rust library's single_word rule: no word character right before or after the match.
bool StandsAlone(std::string_view text, size_t begin, size_t end) {
  if (begin > 0) {
    size_t start = begin - 1, len;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    if (IsWordChar(DecodeUtf8At(text, start, &len))) return false;
  }
  size_t len;
  return end >= text.size() || !IsWordChar(DecodeUtf8At(text, end, &len));
}

absl::Status ParseAddedTokens(const Json& j, std::vector<AddedToken>* out) {
  const Json* list = Find(j, "added_tokens");
  if (!list) return absl::OkStatus();
  if (!list->is_array()) return Unexpected("added_tokens", "a list", *list);
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string path = Index("added_tokens", i);
    const Json& t = (*list)[i];
    AddedToken a;
    auto content = ReadString(t, path, "content");
    auto id = ReadInt(t, path, "id", -1, 0, (int64_t(1) << 24) - 1);
    if (!content.ok() || !id.ok()) return !content.ok() ? content.status() : id.status();
    if (*id < 0) return FieldError(Child(path, "id"), "missing");
    if (content->empty()) return FieldError(Child(path, "content"), "must not be empty");
    a.content = *content;
    a.id = int32_t(*id);
    std::pair<const char*, bool*> flags[] = {{"single_word", &a.single_word}, {"lstrip", &a.lstrip}, {"rstrip", &a.rstrip},
                                             {"special", &a.special}};
    for (auto& [key, flag] : flags) {
      auto v = ReadBool(t, path, key, false);
      if (!v.ok()) return v.status();
      *flag = *v;
    }
    auto normalized = ReadBool(t, path, "normalized", !a.special);
    if (!normalized.ok()) return normalized.status();
    a.normalized = *normalized;
    out->push_back(std::move(a));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status HfTokenizer::ParsePostProcessor(const Json& j, const std::string& path, bool* seen_sequence) {
  auto type = ReadType(j, path);
  if (!type.ok()) return type.status();
  if (*type == "ByteLevel") return absl::OkStatus();  // offsets only
  if (*type == "Sequence") {
    const Json* steps = Find(j, "processors");
    if (!steps || !steps->is_array()) return Unexpected(Child(path, "processors"), "a list", steps ? *steps : Json());
    for (size_t i = 0; i < steps->size(); ++i) {
      if (absl::Status st = ParsePostProcessor((*steps)[i], Index(Child(path, "processors"), i), seen_sequence); !st.ok()) {
        return st;
      }
    }
    return absl::OkStatus();
  }
  if (*type == "BertProcessing" || *type == "RobertaProcessing") {
    for (const char* key : {"cls", "sep"}) {
      const Json* pair = Find(j, key);
      if (!pair || !pair->is_array() || pair->size() != 2 || !(*pair)[1].is_number_integer()) {
        return Unexpected(Child(path, key), "[token, id]", pair ? *pair : Json());
      }
      (std::string(key) == "cls" ? prefix_ : suffix_).push_back((*pair)[1].get<int32_t>());
    }
    return absl::OkStatus();
  }
  if (*type != "TemplateProcessing") {
    return FieldError(Child(path, "type"), absl::StrCat("post-processor \"", *type,
                                                        "\" is not supported (TemplateProcessing, ByteLevel, Sequence, "
                                                        "BertProcessing, RobertaProcessing are)"));
  }
  const Json* single = Find(j, "single");
  if (!single || !single->is_array()) return Unexpected(Child(path, "single"), "a list", single ? *single : Json());
  const Json* specials = Find(j, "special_tokens");
  bool after_sequence = false;
  for (size_t i = 0; i < single->size(); ++i) {
    const std::string where = Index(Child(path, "single"), i);
    const Json& item = (*single)[i];
    if (Find(item, "Sequence")) {
      after_sequence = true;
      continue;
    }
    const Json* special = Find(item, "SpecialToken");
    if (!special) return Unexpected(where, "{\"SpecialToken\": ...} or {\"Sequence\": ...}", item);
    auto name = ReadString(*special, Child(where, "SpecialToken"), "id");
    if (!name.ok()) return name.status();
    const Json* entry = specials ? Find(*specials, name->c_str()) : nullptr;
    const Json* ids = entry ? Find(*entry, "ids") : nullptr;
    if (!ids || !ids->is_array()) {
      return FieldError(Child(path, "special_tokens"), absl::StrCat("no ids for \"", *name, "\""));
    }
    for (const Json& id : *ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0) return Unexpected(Child(path, "special_tokens"), "ids", *ids);
      (after_sequence ? suffix_ : prefix_).push_back(id.get<int32_t>());
    }
  }
  *seen_sequence = true;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::Load(std::string_view json, const TokenizerConfig& config,
                                                               const std::string& name) {
  Json j;
  BpeTables tables;
  if (absl::Status st = ReadTokenizerJson(json, name, &j, &tables); !st.ok()) return st;
  auto fail = [&](const absl::Status& st) { return WithContext(st, name); };
  if (!j.is_object()) return fail(Unexpected("(top level)", "an object", j));
  std::unique_ptr<HfTokenizer> t(new HfTokenizer());
  t->config_ = config;
  if (const Json* n = Find(j, "normalizer")) {
    auto normalizer = ParseNormalizer(*n, "normalizer");
    if (!normalizer.ok()) return fail(normalizer.status());
    t->normalizer_ = *std::move(normalizer);
  }
  bool byte_level = false;
  if (const Json* p = Find(j, "pre_tokenizer")) {
    auto pre = ParsePreTokenizer(*p, "pre_tokenizer", &byte_level);
    if (!pre.ok()) return fail(pre.status());
    t->pre_tokenizer_ = *std::move(pre);
  }
  const Json* model = Find(j, "model");
  if (!model) return fail(FieldError("model", "missing"));
  auto bpe = Bpe::Parse(*model, tables, "model", byte_level);
  if (!bpe.ok()) return fail(bpe.status());
  t->model_ = *std::move(bpe);
  if (const Json* d = Find(j, "decoder")) {
    auto decoder = ParseDecoder(*d, "decoder");
    if (!decoder.ok()) return fail(decoder.status());
    t->decoder_ = *std::move(decoder);
  }
  if (const Json* p = Find(j, "post_processor")) {
    bool template_seen = false;
    if (absl::Status st = t->ParsePostProcessor(*p, "post_processor", &template_seen); !st.ok()) return fail(st);
  }
  if (absl::Status st = ParseAddedTokens(j, &t->added_); !st.ok()) return fail(st);

  t->tokens_ = t->model_->TakeTokens();
  for (const AddedToken& a : t->added_) {
    if (size_t(a.id) >= t->tokens_.size()) t->tokens_.resize(size_t(a.id) + 1);
  }
  t->is_added_.assign(t->tokens_.size(), false);
  t->is_special_.assign(t->tokens_.size(), false);
  for (int32_t i = 0; i < int32_t(t->added_.size()); ++i) {
    const AddedToken& a = t->added_[i];
    t->tokens_[a.id] = a.content;
    t->is_added_[a.id] = true;
    t->is_special_[a.id] = t->is_special_[a.id] || a.special;
    t->added_texts_.insert(a.content);
    t->added_by_text_.try_emplace(a.content, a.id);
    if (a.normalized && t->normalizer_) {
      auto normalized = Normalize(*t->normalizer_, a.content);
      if (!normalized.ok()) return fail(normalized.status());
      t->normalized_trie_.Add(*normalized, i);
      t->added_by_text_.try_emplace(*normalized, a.id);
    } else {
      t->raw_trie_.Add(a.content, i);
    }
  }
  for (const std::string& extra : config.additional_special_tokens) {
    if (const int id = t->TokenId(extra); id >= 0) t->is_special_[id] = true;
  }
  for (int32_t id : t->prefix_) {
    if (id >= t->vocab_size()) return fail(FieldError("post_processor", absl::StrCat("special token id ", id, " is outside the vocabulary")));
  }
  for (int32_t id : t->suffix_) {
    if (id >= t->vocab_size()) return fail(FieldError("post_processor", absl::StrCat("special token id ", id, " is outside the vocabulary")));
  }
  return t;
}

int HfTokenizer::TokenId(std::string_view token) const {
  if (auto it = added_by_text_.find(Av(token)); it != added_by_text_.end()) return it->second;
  for (size_t id = 0; id < tokens_.size(); ++id) {
    if (tokens_[id] == token) return int(id);
  }
  return -1;
}

void HfTokenizer::SplitAdded(std::string_view text, const AddedTokenTrie& trie, std::vector<Section>* out) const {
  const size_t first = out->size();
  size_t plain = 0;  // start of the text not yet emitted
  for (size_t at = 0; at < text.size() && !trie.empty();) {
    size_t length = 0;
    const int32_t index = trie.LongestAt(text, at, &length);
    if (index < 0 || (added_[index].single_word && !StandsAlone(text, at, at + length))) {
      ++at;
      continue;
    }
    if (at > plain) out->push_back({text.substr(plain, at - plain), -1});
    out->push_back({std::string_view(), index});
    at += length;
    plain = at;
  }
  if (plain < text.size()) out->push_back({text.substr(plain), -1});
  // lstrip / rstrip take the whitespace beside the token with them (JavaScript's trim set, as the port).
  for (size_t i = first; i < out->size(); ++i) {
    Section& s = (*out)[i];
    if (s.token < 0) continue;
    const AddedToken& a = added_[s.token];
    if (a.lstrip && i > first && (*out)[i - 1].token < 0) {
      (*out)[i - 1].text = TrimEnd((*out)[i - 1].text, IsJsWhiteSpace);
    }
    if (a.rstrip && i + 1 < out->size() && (*out)[i + 1].token < 0) {
      (*out)[i + 1].text = TrimStart((*out)[i + 1].text, IsJsWhiteSpace);
    }
    s.token = a.id;
  }
}

absl::Status HfTokenizer::EncodeSection(std::string_view text, int section, std::vector<int32_t>* ids) const {
  if (text.empty()) return absl::OkStatus();
  if (auto it = added_by_text_.find(Av(text)); it != added_by_text_.end()) {
    ids->push_back(it->second);
    return absl::OkStatus();
  }
  std::string normalized_text;
  std::string_view normalized = text;
  if (normalizer_) {
    auto n = Normalize(*normalizer_, std::string(text));
    if (!n.ok()) return n.status();
    normalized_text = *std::move(n);
    normalized = normalized_text;
  }
  std::vector<Section> pieces;
  SplitAdded(normalized, normalized_trie_, &pieces);
  for (const Section& piece : pieces) {
    if (piece.token >= 0) {
      ids->push_back(piece.token);
      continue;
    }
    if (piece.text.empty()) continue;
    if (auto it = added_by_text_.find(Av(piece.text)); it != added_by_text_.end()) {
      ids->push_back(it->second);
      continue;
    }
    if (!pre_tokenizer_) {
      model_->Encode(piece.text, ids);
    } else if (absl::Status st = PreTokenize(*pre_tokenizer_, piece.text, section,
                                             [&](std::string_view word) { model_->Encode(word, ids); });
               !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> HfTokenizer::Encode(std::string_view text, bool add_special_tokens) const {
  if (!IsValidUtf8(text)) return absl::InvalidArgumentError("tokenizer: the text is not valid UTF-8");
  std::vector<int32_t> ids;
  if (add_special_tokens) ids = prefix_;
  std::vector<Section> sections;
  SplitAdded(text, raw_trie_, &sections);
  for (size_t i = 0; i < sections.size(); ++i) {
    if (sections[i].token >= 0) {
      ids.push_back(sections[i].token);
    } else if (absl::Status st = EncodeSection(sections[i].text, int(i), &ids); !st.ok()) {
      return st;
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  return ids;
}

absl::StatusOr<std::string> HfTokenizer::Decode(const std::vector<int32_t>& ids, bool skip_special_tokens,
                                                bool clean_up_tokenization_spaces) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size() || (tokens_[id].empty() && !is_added_[id])) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer: token id ", id, " is not in the vocabulary"));
    }
    if (skip_special_tokens && is_special_[id]) continue;
    tokens.push_back(tokens_[id]);
  }
  std::string text;
  if (decoder_) {
    absl::Status st = DecodeChain(*decoder_, [this](const std::string& t) { return added_texts_.contains(t); }, &tokens);
    if (!st.ok()) return st;
    for (const std::string& piece : tokens) text += piece;
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) absl::StrAppend(&text, i > 0 ? " " : "", tokens[i]);
  }
  return clean_up_tokenization_spaces ? CleanUpTokenization(std::move(text)) : text;
}

}  // namespace steady::hf
