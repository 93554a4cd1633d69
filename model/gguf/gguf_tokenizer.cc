#include "model/gguf/gguf_tokenizer.h"

#include <algorithm>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace steady {
namespace {

using nlohmann::json;

// llama.cpp's token types (llama_token_type).
constexpr int64_t kUnknown = 2, kControl = 3, kUserDefined = 4;

// The pre-tokenizer regexes of tokenizer.ggml.pre's names, as llama.cpp's llama-vocab.cpp gives them.
struct PreTokenizer {
  const char* name;
  const char* regex;
  bool ignore_merges;  // a word that is a token as a whole is that token (llama 3)
};
constexpr PreTokenizer kPreTokenizers[] = {
    {"default", R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)", false},
    {"gpt2", R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)", false},
    {"llama-bpe",
     R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
     true},
    {"qwen2",
     R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
     false},
};

absl::Status Bad(const GgufFile& f, const std::string& key, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(f.display_name(), ": ", key, ": ", why));
}

// An array of `type` elements under `key`; nullptr (and `*status` NOT_FOUND unless optional) when absent.
const GgufValue* Array(const GgufFile& f, const std::string& key, GgufValueType type, bool optional,
                       absl::Status* status) {
  const GgufValue* v = f.FindValue(key);
  if (v == nullptr) {
    if (!optional) *status = absl::NotFoundError(absl::StrCat(f.display_name(), ": no metadata key ", key));
    return nullptr;
  }
  if (v->type != GgufValueType::kArray || v->element_type != type) {
    *status = Bad(f, key, absl::StrCat("expected an array of ", GgufValueTypeName(type), ", got ",
                                       v->type == GgufValueType::kArray ? "an array of " + GgufValueTypeName(v->element_type)
                                                                        : GgufValueTypeName(v->type)));
    return nullptr;
  }
  return v;
}

// An optional bool (absent: `fallback`).
absl::StatusOr<bool> Bool(const GgufFile& f, const std::string& key, bool fallback) {
  const GgufValue* v = f.FindValue(key);
  if (v == nullptr) return fallback;
  if (v->type != GgufValueType::kBool) return Bad(f, key, "expected a bool, got " + GgufValueTypeName(v->type));
  return v->u != 0;
}

// An optional token id (-1 when absent), checked against the vocabulary.
absl::StatusOr<int64_t> TokenId(const GgufFile& f, const std::string& key, size_t vocab) {
  auto id = f.GetUint(key);
  if (absl::IsNotFound(id.status())) return -1;
  if (!id.ok()) return id.status();
  if (*id >= vocab) return Bad(f, key, absl::StrCat("token ", *id, " is outside the vocabulary of ", vocab));
  return int64_t(*id);
}

// sentencepiece-style merges from the scores: every (left, right) whose concatenation is a piece,
// the higher the merged piece's score the earlier (ties: the lower id), as llama.cpp's SPM
// tokenizer picks the best-scoring pair.
json MergesFromScores(const std::vector<std::string>& tokens, const std::vector<float>& scores,
                      const std::vector<int64_t>& types) {
  absl::flat_hash_map<std::string_view, int64_t> id;
  for (size_t i = 0; i < tokens.size(); ++i) id.try_emplace(tokens[i], int64_t(i));
  struct Merge {
    float score;
    int64_t merged;
    size_t split;
  };
  std::vector<Merge> merges;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (types[i] == kControl || types[i] == kUserDefined) continue;
    const std::string& t = tokens[i];
    for (size_t k = 1; k < t.size(); ++k) {
      if ((static_cast<unsigned char>(t[k]) & 0xC0) == 0x80) continue;  // inside a character
      if (id.contains(std::string_view(t).substr(0, k)) && id.contains(std::string_view(t).substr(k))) {
        merges.push_back({scores[i], int64_t(i), k});
      }
    }
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) {
    return a.score != b.score ? a.score > b.score : a.merged < b.merged;
  });
  json out = json::array();
  for (const Merge& m : merges) {
    const std::string& t = tokens[size_t(m.merged)];
    out.push_back(json::array({t.substr(0, m.split), t.substr(m.split)}));
  }
  return out;
}

}  // namespace

absl::StatusOr<GgufTokenizerFiles> GgufTokenizerAsJson(const GgufFile& f) {
  auto model = f.GetString("tokenizer.ggml.model");
  if (!model.ok()) return model.status();
  const bool spm = *model == "llama";
  if (!spm && *model != "gpt2") {
    return Bad(f, "tokenizer.ggml.model", absl::StrCat("\"", *model, "\" is not supported (llama, gpt2)"));
  }
  absl::Status status;
  const GgufValue* tokens_v = Array(f, "tokenizer.ggml.tokens", GgufValueType::kString, false, &status);
  const GgufValue* scores_v = Array(f, "tokenizer.ggml.scores", GgufValueType::kFloat32, !spm, &status);
  const GgufValue* types_v = Array(f, "tokenizer.ggml.token_type", GgufValueType::kInt32, true, &status);
  const GgufValue* merges_v = Array(f, "tokenizer.ggml.merges", GgufValueType::kString, spm, &status);
  if (!status.ok()) return status;
  const size_t n = tokens_v->elements.size();
  std::vector<std::string> tokens(n);
  std::vector<float> scores(n, 0.0f);
  std::vector<int64_t> types(n, 1);
  for (size_t i = 0; i < n; ++i) tokens[i] = tokens_v->elements[i].s;
  for (const auto& [v, key] : {std::pair{scores_v, "tokenizer.ggml.scores"}, std::pair{types_v, "tokenizer.ggml.token_type"}}) {
    if (v != nullptr && v->elements.size() != n) {
      return Bad(f, key, absl::StrCat(v->elements.size(), " entries for ", n, " tokens"));
    }
  }
  for (size_t i = 0; scores_v != nullptr && i < n; ++i) scores[i] = float(scores_v->elements[i].f);
  for (size_t i = 0; types_v != nullptr && i < n; ++i) types[i] = types_v->elements[i].i;

  auto bos = TokenId(f, "tokenizer.ggml.bos_token_id", n);
  auto eos = TokenId(f, "tokenizer.ggml.eos_token_id", n);
  auto unk = TokenId(f, "tokenizer.ggml.unknown_token_id", n);
  auto add_bos = Bool(f, "tokenizer.ggml.add_bos_token", spm);
  auto add_space = Bool(f, "tokenizer.ggml.add_space_prefix", spm);
  for (const absl::Status& s : {bos.status(), eos.status(), unk.status(), add_bos.status(), add_space.status()}) {
    if (!s.ok()) return s;
  }

  json vocab = json::object();
  json added = json::array();
  for (size_t i = 0; i < n; ++i) {
    if (vocab.contains(tokens[i])) {
      return Bad(f, "tokenizer.ggml.tokens", absl::StrCat("token ", i, " repeats token ", vocab[tokens[i]].get<int64_t>()));
    }
    vocab[tokens[i]] = i;
    if (types[i] == kUnknown || types[i] == kControl || types[i] == kUserDefined) {
      added.push_back({{"id", i}, {"content", tokens[i]}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                       {"normalized", false}, {"special", types[i] != kUserDefined}});
    }
  }
  json j = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", added}};
  json bpe = {{"type", "BPE"}, {"dropout", nullptr}, {"continuing_subword_prefix", nullptr},
              {"end_of_word_suffix", nullptr}, {"vocab", std::move(vocab)}};
  if (spm) {
    json normalizers = json::array();
    if (*add_space) normalizers.push_back({{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}});
    normalizers.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}});
    j["normalizer"] = {{"type", "Sequence"}, {"normalizers", normalizers}};
    j["pre_tokenizer"] = nullptr;
    json decoders = json::array({json{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
                                 json{{"type", "ByteFallback"}}, json{{"type", "Fuse"}}});
    if (*add_space) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    j["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
    bpe["unk_token"] = *unk >= 0 ? json(tokens[size_t(*unk)]) : json(nullptr);
    bpe["fuse_unk"] = true;
    bpe["byte_fallback"] = true;
    bpe["ignore_merges"] = false;
    bpe["merges"] = MergesFromScores(tokens, scores, types);
  } else {
    auto pre = f.GetString("tokenizer.ggml.pre");
    const std::string pre_name = pre.ok() ? *pre : "default";
    if (!pre.ok() && !absl::IsNotFound(pre.status())) return pre.status();
    const PreTokenizer* p = nullptr;
    for (const PreTokenizer& candidate : kPreTokenizers) {
      if (pre_name == candidate.name) p = &candidate;
    }
    if (p == nullptr) {
      return Bad(f, "tokenizer.ggml.pre", absl::StrCat("\"", pre_name, "\" is not a pre-tokenizer Steady knows (default, gpt2, llama-bpe, qwen2)"));
    }
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers", json::array({json{{"type", "Split"}, {"pattern", {{"Regex", p->regex}}},
                                                               {"behavior", "Isolated"}, {"invert", false}},
                                                          json{{"type", "ByteLevel"}, {"add_prefix_space", false},
                                                               {"trim_offsets", true}, {"use_regex", false}}})}};
    j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
    bpe["unk_token"] = nullptr;
    bpe["fuse_unk"] = false;
    bpe["byte_fallback"] = false;
    bpe["ignore_merges"] = p->ignore_merges;
    json merges = json::array();
    for (const GgufValue& m : merges_v->elements) merges.push_back(m.s);
    bpe["merges"] = std::move(merges);
  }
  j["model"] = std::move(bpe);
  if (*add_bos) {
    if (*bos < 0) return Bad(f, "tokenizer.ggml.add_bos_token", "true, but there is no tokenizer.ggml.bos_token_id");
    const std::string& b = tokens[size_t(*bos)];
    j["post_processor"] = {{"type", "TemplateProcessing"},
                           {"single", json::array({json{{"SpecialToken", {{"id", b}, {"type_id", 0}}}},
                                                   json{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                           {"pair", json::array({json{{"SpecialToken", {{"id", b}, {"type_id", 0}}}},
                                                 json{{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                                 json{{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
                           {"special_tokens", {{b, {{"id", b}, {"ids", {*bos}}, {"tokens", {b}}}}}}};
  } else {
    j["post_processor"] = nullptr;
  }

  GgufTokenizerFiles out;
  out.tokenizer_json = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (*bos >= 0) out.config.bos_token = tokens[size_t(*bos)];
  if (*eos >= 0) out.config.eos_token = tokens[size_t(*eos)];
  if (*unk >= 0) out.config.unk_token = tokens[size_t(*unk)];
  out.config.clean_up_tokenization_spaces = false;
  if (auto chat = f.GetString("tokenizer.chat_template"); chat.ok()) {
    out.config.chat_templates["default"] = *chat;
  } else if (!absl::IsNotFound(chat.status())) {
    return chat.status();
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const GgufFile& file) {
  auto files = GgufTokenizerAsJson(file);
  if (!files.ok()) return files.status();
  return Tokenizer::FromTokenizerJson(files->tokenizer_json, files->config, file.display_name() + " (its tokenizer)");
}

}  // namespace steady
